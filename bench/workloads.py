"""The workloads of issue 3: drain, steady, spike, backlog.

Each returns a dict of figures; the command prints it as the last line.
"""

import datetime as dt
import time

from bench import report
from bench.processes import Fleet
from bench.setup import bench_tenant, db_now, insert_runs, settle

READY_WAIT = 3.0  # seconds for worker processes to import Django and reach their loop


def drain(options):
    """All runs due now, appearing at once (one transaction) for workers that are up. Throughput.

    The workers start first: their start-up (a second or two of imports) is
    not the engine's throughput, and counting it would favour one worker.
    """
    tenant, job = bench_tenant("drain")
    settle()
    fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"])
    try:
        time.sleep(READY_WAIT)
        insert_runs(job, db_now(), options["runs"])
        report.wait_until_done(tenant, options["timeout"], fleet)
    finally:
        fleet.stop()
    return {"workload": "drain", "tenant": tenant.name, **report.figures(tenant, options["runs"])}


def steady(options):
    """`rate` runs/s falling due evenly for `seconds`, workers already running. Lateness."""
    tenant, job = bench_tenant("steady")
    settle()
    count = int(options["rate"] * options["seconds"])
    fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"])
    try:
        time.sleep(READY_WAIT)
        first = db_now() + dt.timedelta(seconds=2)
        insert_runs(job, first, count, spacing_seconds=1 / options["rate"])
        last_due = first + dt.timedelta(seconds=(count - 1) / options["rate"])
        report.wait_until_done(tenant, options["timeout"] + options["seconds"], fleet, last_due=last_due)
    finally:
        fleet.stop()
    return {"workload": "steady", "tenant": tenant.name, "rate": options["rate"], **report.figures(tenant, count)}


def spike(options):
    """`runs` all due at one instant 10 s ahead. Time from that instant to the last start."""
    tenant, job = bench_tenant("spike")
    settle()
    fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"])
    try:
        instant = db_now() + dt.timedelta(seconds=10)
        insert_runs(job, instant, options["runs"])
        report.wait_until_done(tenant, options["timeout"] + 10, fleet, last_due=instant)
    finally:
        fleet.stop()
    figures = report.figures(tenant, options["runs"])
    last = figures["last_start"]
    figures["all_started_after_s"] = round((last - instant).total_seconds(), 3) if last else None
    return {"workload": "spike", "tenant": tenant.name, **figures}


def backlog(options):
    """A drain, then `future` runs scheduled days ahead, then the same drain again: the ratio."""
    tenant, job = bench_tenant("backlog")
    runs = options["runs"]
    phases = {}
    for phase, future in (("without_backlog", 0), ("with_backlog", options["future"])):
        if future:
            insert_runs(job, db_now() + dt.timedelta(days=3), future, spacing_seconds=0.2, start_index=10_000_000)
        settle()
        fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"])
        try:
            time.sleep(READY_WAIT)
            since = db_now()
            insert_runs(job, since, runs, start_index=len(phases) * runs)
            report.wait_until_done(tenant, options["timeout"], fleet)
        finally:
            fleet.stop()
        phases[phase] = report.figures(tenant, runs, since=since)
    drain_rate = phases["without_backlog"]["runs_per_s"]
    backlog_rate = phases["with_backlog"]["runs_per_s"]
    result = dict(phases["with_backlog"])
    result.update(
        workload="backlog",
        tenant=tenant.name,
        future=options["future"],
        drain_runs_per_s=drain_rate,
        ratio_to_drain=round(backlog_rate / drain_rate, 3) if drain_rate and backlog_rate else None,
    )
    return result


WORKLOADS = {"drain": drain, "steady": steady, "spike": spike, "backlog": backlog}
