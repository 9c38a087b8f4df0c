"""What observability costs the engine, side by side: metrics-overhead and move-log-overhead.

Each drains `runs` runs due at once (as `drain` does) `repeat` times per side,
alternating the sides and which one goes first in each round, so the drift of
a shared machine falls on both alike; it reports each side's median rate, the
ratio on / off and the load average (a busy machine's figures are noisy), and
the CPU time the engine processes (scheduler and workers, not PostgreSQL)
spent per run while they drained (start-up excluded): on a shared machine that
moves far less than the rate does.

- metrics-overhead: "on" gives the scheduler and each worker a /metrics port
  and scrapes them every second, and renders the web's database gauges
  (runs.metrics.DatabaseCollector) every second too; "off" serves nothing.
- move-log-overhead: "on" writes the move log to a file (DUETIME_MOVE_LOG, a
  real file rather than the bench's /dev/null stderr), "off" turns it off.
"""

import contextlib
import os
import socket
import statistics
import tempfile
import threading
import time
import urllib.request

from django.core.management.base import CommandError
from django.db import connection
from prometheus_client import CollectorRegistry, generate_latest

from bench import report
from bench.processes import Fleet
from bench.setup import bench_tenant, db_now, insert_runs, settle
from runs import metrics

SCRAPE_EVERY = 1.0


def metrics_overhead(options):
    return _side_by_side("metrics-overhead", options, {"off": _no_metrics, "on": _scraped_metrics})


def move_log_overhead(options):
    return _side_by_side("move-log-overhead", options, {"off": _no_move_log, "on": _move_log_to_file})


def _side_by_side(workload, options, sides):
    """Drain per side `repeat` times, alternating (off, on), (on, off), ...; the medians and their ratio."""
    if options["repeat"] < 1 or options["runs"] < 1 or options["workers"] < 1:
        raise CommandError(f"{workload} needs --repeat, --runs and --workers of at least 1")
    tenant, job = bench_tenant(workload)
    runs, rates, notes, drains = options["runs"], {name: [] for name in sides}, {name: [] for name in sides}, 0
    loads, faults = [os.getloadavg()[0]], {"lost": 0, "early": 0, "duplicates": 0}
    for round_ in range(options["repeat"]):
        for name in list(sides) if round_ % 2 == 0 else list(reversed(sides)):
            with sides[name](options) as (fleet_options, note):
                figures = _drain(tenant, job, options, drains * runs, fleet_options, note)
            drains += 1
            rates[name].append(figures["runs_per_s"])
            for count in ("lost", "early", "duplicates"):
                faults[count] += figures[count]
            notes[name].append(note)
            loads.append(os.getloadavg()[0])
    off, on = round(statistics.median(rates["off"]), 1), round(statistics.median(rates["on"]), 1)
    cpu = {name: statistics.median(n["engine_cpu_us_per_run"] for n in notes[name]) for name in sides}
    return {
        "workload": workload,
        "tenant": tenant.name,
        "runs": runs,
        "workers": options["workers"],
        "repeat": options["repeat"],
        "runs_per_s": on,
        "off_runs_per_s": off,
        "on_runs_per_s": on,
        "ratio_on_to_off": round(on / off, 3) if off and on else None,
        "cost_percent": round(100 * (1 - on / off), 1) if off and on else None,
        "engine_cpu_us_per_run": cpu,
        "engine_cpu_cost_percent": round(100 * (cpu["on"] / cpu["off"] - 1), 1) if cpu["off"] else None,
        **faults,  # over every drain of both sides
        "rates": rates,
        "sides": notes,
        "load_average_1m": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
    }


@contextlib.contextmanager
def _no_metrics(options):
    yield {"env": {"DUETIME_METRICS_PORT": "0"}}, {}


@contextlib.contextmanager
def _scraped_metrics(options):
    """A /metrics port per process (scheduler, then each worker), scraped every second from a thread."""
    ports = [_free_port() for _ in range(options["workers"] + 1)]
    scraper = Scraper(ports)
    scraper.start()
    note = {}
    try:
        yield {"metrics_ports": ports}, note
    finally:
        note.update(scraper.stop())


class Scraper(threading.Thread):
    """GETs each engine port's /metrics, then renders the database gauges, every SCRAPE_EVERY seconds."""

    def __init__(self, ports):
        super().__init__(name="bench-scraper", daemon=True)
        self.ports, self.stopped = ports, threading.Event()
        self.engine_seconds, self.database_seconds, self.failed = [], [], 0
        self.registry = CollectorRegistry()
        self.registry.register(metrics.DatabaseCollector())

    def run(self):
        try:
            while not self.stopped.wait(SCRAPE_EVERY):
                for port in self.ports:
                    started = time.perf_counter()
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                            answer.read()
                        self.engine_seconds.append(time.perf_counter() - started)
                    except OSError:  # a process still starting, or stopping
                        self.failed += 1
                started = time.perf_counter()
                generate_latest(self.registry)
                self.database_seconds.append(time.perf_counter() - started)
        finally:
            connection.close()

    def stop(self):
        self.stopped.set()
        self.join(30)
        return {
            "engine_scrapes": len(self.engine_seconds),
            "engine_scrape_ms": _median_ms(self.engine_seconds),
            "database_scrapes": len(self.database_seconds),
            "database_scrape_ms": _median_ms(self.database_seconds),
            "refused": self.failed,
        }


@contextlib.contextmanager
def _no_move_log(options):
    yield {"env": {"DUETIME_MOVE_LOG": "off"}}, {}


@contextlib.contextmanager
def _move_log_to_file(options):
    """The move log of every process appended to one file; reports how many lines it got."""
    handle, path = tempfile.mkstemp(prefix="duetime-bench-moves-", suffix=".jsonl")
    os.close(handle)
    note = {}
    try:
        yield {"env": {"DUETIME_MOVE_LOG": path}}, note
        with open(path, "rb") as written:
            note["lines"] = sum(1 for _ in written)
        note["bytes"] = os.path.getsize(path)
    finally:
        os.unlink(path)


def _drain(tenant, job, options, start_index, fleet_options, note):
    """`drain` once with these Fleet options; notes the engine's CPU per run from the insert to the last run."""
    settle()
    fleet = Fleet(
        job.queue, options["workers"], options["concurrency"], options["batch"], options["pool"], **fleet_options
    )
    try:
        fleet.wait_ready()
        since, cpu = db_now(), _cpu_seconds(fleet)
        insert_runs(job, since, options["runs"], start_index=start_index)
        report.wait_until_done(tenant, options["timeout"], fleet)
        note["engine_cpu_us_per_run"] = round((_cpu_seconds(fleet) - cpu) / options["runs"] * 1e6, 1)
    finally:
        fleet.stop()
    return report.figures(tenant, options["runs"], since=since)


def _cpu_seconds(fleet):
    """User + system CPU seconds the Fleet's processes have used so far (Linux: /proc/<pid>/stat)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for child in fleet.children:
        with open(f"/proc/{child.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / tick


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _median_ms(seconds):
    return round(1000 * statistics.median(seconds), 2) if seconds else None


WORKLOADS = {"metrics-overhead": metrics_overhead, "move-log-overhead": move_log_overhead}
