"""Celery as the worker transport, side by side with plain Celery on the same broker: celery-drain, celery-steady.

One Celery worker (`celery -A bench.celery_app worker -P prefork`, two
children by default) serves two queues: Duetime's (run_dispatcher publishes
`duetime.execute` there, the no-op handler bench.handlers.noop runs) and a
plain one, where this process publishes plain Celery tasks itself. The plain
side runs first, then Duetime's, on the same worker and broker:

- drain: plain Celery gets `runs` tasks by `apply_async`, one by one; Duetime
  gets `runs` runs due at once (one insert). Throughput of each: executions
  over first start to last end.
- steady: plain Celery gets `rate` x `seconds` tasks with `eta=` spaced
  1/rate apart (published ahead); Duetime the same number of runs due at the
  same spacing. Lateness of each: start minus eta (plain) or minus
  available_at (Duetime, from the attempts: the start is the Celery worker's
  take-over).

Duetime's figures come from its database (bench.report); plain Celery's from
what its task appended per worker process (bench.celery_app.plain_noop).
"""

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery import Celery
from django.conf import settings

from bench import report
from bench.processes import MANAGE, engine_env
from bench.setup import bench_tenant, db_now, insert_runs, settle
from jobs.models import JobDefinition

DEFAULT_BROKER = "amqp://guest:guest@127.0.0.1:5672//"
WARM_UP = 20  # plain tasks that must run before measuring: the worker and its children are up


class CeleryFleet:
    """The Celery worker (both queues), run_scheduler and run_dispatcher (Duetime's queue), each in its group."""

    def __init__(self, broker, duetime_queue, plain_queue, children, batch):
        env = engine_env(CELERY_BROKER_URL=broker)
        worker = [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker", "-P", "prefork"]
        worker += ["-c", str(children), "-Q", f"{duetime_queue},{plain_queue}", "-n", f"bench-{duetime_queue}@%h"]
        worker += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"]
        dispatcher = [sys.executable, MANAGE, "run_dispatcher", "--skip-checks", "--queues", duetime_queue]
        commands = [
            worker,
            [sys.executable, MANAGE, "run_scheduler", "--skip-checks"],
            dispatcher + ["--batch", str(batch)],
        ]
        self.children = [
            subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
            for command in commands
        ]

    def alive(self):
        return all(child.poll() is None for child in self.children)

    def stop(self):
        for child in self.children:
            _signal_group(child, signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=40)
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
                child.wait()


def _signal_group(child, sig):
    try:
        os.killpg(child.pid, sig)
    except ProcessLookupError:
        pass


class PlainCelery:
    """Plain Celery tasks published from here (no publisher confirms: Celery's default), timed from the sink."""

    def __init__(self, broker, queue):
        self.app = Celery("bench-plain", broker=broker, set_as_current=False)
        self.app.conf.task_ignore_result = True
        self.queue = queue
        self.base = Path(tempfile.mkdtemp(prefix="duetime-bench-celery-"))

    def sink(self, name):
        path = self.base / name
        path.mkdir()
        return str(path)

    def send(self, sink, eta=None):
        options = {"eta": dt.datetime.fromtimestamp(eta, dt.UTC)} if eta is not None else {}
        self.app.send_task("bench.plain_noop", args=(sink, eta), queue=self.queue, routing_key=self.queue, **options)

    def wait(self, sink, count, timeout, fleet):
        """Poll the sink until `count` executions are in it; returns their (start, end, eta) lines."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.read(sink)
            if len(lines) >= count:
                return lines
            if not fleet.alive():
                raise RuntimeError("a bench process died; see its output")
            time.sleep(0.2)
        raise RuntimeError(f"plain Celery ran {len(self.read(sink))} of {count} tasks within {timeout} s")

    def read(self, sink):
        lines = []
        for path in Path(sink).glob("*.txt"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 2:
                    lines.append((float(parts[0]), float(parts[1]), float(parts[2]) if len(parts) > 2 else None))
        return lines

    def remove(self):
        shutil.rmtree(self.base, ignore_errors=True)

    def warm_up(self, fleet):
        sink = self.sink("warm-up")
        for _ in range(WARM_UP):
            self.send(sink)
        self.wait(sink, WARM_UP, 120, fleet)


def _setup(workload, options):
    broker = settings.CELERY_BROKER_URL or DEFAULT_BROKER
    tenant, job = bench_tenant(workload)
    JobDefinition.objects.filter(pk=job.pk).update(target_kind="celery")  # the same no-op, run by Celery workers
    job.refresh_from_db()
    plain = PlainCelery(broker, f"{job.queue}-plain")
    settle()
    fleet = CeleryFleet(broker, job.queue, plain.queue, options["children"], options["batch"])
    return broker, tenant, job, plain, fleet


def drain(options):
    """`runs` tasks published one by one to plain Celery, then `runs` due runs through Duetime. Throughput."""
    broker, tenant, job, plain, fleet = _setup("celery-drain", options)
    count = options["runs"]
    try:
        plain.warm_up(fleet)
        sink = plain.sink("drain")
        published = time.monotonic()
        for _ in range(count):
            plain.send(sink)
        publish_s = time.monotonic() - published
        lines = plain.wait(sink, count, options["timeout"], fleet)
        settle()
        insert_runs(job, db_now(), count)
        report.wait_until_done(tenant, options["timeout"], fleet)
    finally:
        fleet.stop()
        plain.remove()
    duetime = report.figures(tenant, count)
    elapsed = max(end for _, end, _ in lines) - min(start for start, _, _ in lines)
    plain_figures = {
        "runs": count,
        "executed": len(lines),
        "runs_per_s": round(len(lines) / elapsed, 1),
        "elapsed_s": round(elapsed, 3),
        "publish_s": round(publish_s, 3),
    }
    return _result("celery-drain", tenant, broker, options, duetime, plain_figures, "runs_per_s")


def steady(options):
    """`rate` runs/s falling due for `seconds`: plain Celery with eta=, then Duetime. Lateness."""
    broker, tenant, job, plain, fleet = _setup("celery-steady", options)
    rate, count = options["rate"], int(options["rate"] * options["seconds"])
    try:
        plain.warm_up(fleet)
        sink = plain.sink("steady")
        first = time.time() + 2 + count / 2000  # every eta task is published before the first is due
        for i in range(count):
            plain.send(sink, eta=first + i / rate)
        lines = plain.wait(sink, count, options["timeout"] + options["seconds"] + 10, fleet)
        settle()
        due = db_now() + dt.timedelta(seconds=2)
        insert_runs(job, due, count, spacing_seconds=1 / rate)
        last_due = due + dt.timedelta(seconds=(count - 1) / rate)
        report.wait_until_done(tenant, options["timeout"] + options["seconds"], fleet, last_due=last_due)
    finally:
        fleet.stop()
        plain.remove()
    duetime = report.figures(tenant, count)
    lateness = sorted((start - eta) * 1000 for start, _, eta in lines)
    plain_figures = {
        "runs": count,
        "executed": len(lines),
        "early": sum(1 for ms in lateness if ms < 0),
        "lateness_ms": {
            "p50": round(report.percentile(lateness, 50), 1),
            "p99": round(report.percentile(lateness, 99), 1),
            "max": round(lateness[-1], 1),
        },
    }
    return {**_result("celery-steady", tenant, broker, options, duetime, plain_figures, None), "rate": rate}


def _result(workload, tenant, broker, options, duetime, plain, ratio_of):
    result = {
        "workload": workload,
        "tenant": tenant.name,
        "broker": broker.split("://")[0],
        "children": options["children"],
        "runs_per_s": duetime["runs_per_s"],
        "lateness_ms": duetime["lateness_ms"],
        "duetime": duetime,
        "plain_celery": plain,
    }
    if ratio_of and duetime[ratio_of] and plain[ratio_of]:
        result["ratio_to_plain_celery"] = round(duetime[ratio_of] / plain[ratio_of], 3)
    return result


WORKLOADS = {"celery-drain": drain, "celery-steady": steady}
