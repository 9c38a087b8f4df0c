"""`bench noisy`: one tenant's flood against ten quiet tenants, judged from the database.

Ten quiet tenants each have a no-op run falling due every 1/`rate` s for `seconds`; halfway, a
noisy tenant puts `runs` runs of a 5 ms task due at one instant, its max_concurrent_runs (`cap`)
below the workers' slots. The defaults are the issue's sizes (`bench noisy` = `--rate 20 --seconds 40
--runs 50000 --cap 10`: 20 runs/s per quiet tenant for 40 s, a 50,000-run flood). `workers` run_worker
processes (2) share one queue. Twice: the flood at the quiet tenants' priority (default), then at the
highest (critical), to show which of priority and tenant fairness wins.

The targets, each from the attempt rows: the quiet tenants' lateness p99 during the flood at most
max(2 x their p99 before it, that + 100 ms) and at most 250 ms; no attempt early; every run
succeeded; the noisy tenant never more than `cap` attempts at once; the flood work-conserving (at
least 80 % of cap / 5 ms, or of the free slots / 5 ms if lower).
"""

import datetime as dt
import time

from django.db.models import F

from bench import report
from bench.processes import Fleet
from bench.setup import bench_tenant, db_now, insert_runs, settle
from jobs.models import JobDefinition, Tenant
from runs.models import Attempt, Run

TASK_SECONDS = 0.005  # bench.handlers.sleep_5ms
QUIET_TENANTS = 10
PRIORITIES = {"default": 1, "critical": 0}


def run(options):
    phases = {name: _phase(options, name, priority) for name, priority in PRIORITIES.items()}
    return {"workload": "noisy", "cap": options["cap"], "phases": phases, "met": all(p["met"] for p in phases.values())}


def _phase(options, name, priority):
    quiet = [bench_tenant(f"noisy-quiet-{i}") for i in range(QUIET_TENANTS)]
    queue = quiet[0][1].queue
    for _, job in quiet[1:]:
        JobDefinition.objects.filter(pk=job.pk).update(queue=queue)
    noisy, flood_job = bench_tenant(f"noisy-flood-{name}", queue=queue)
    Tenant.objects.filter(pk=noisy.pk).update(max_concurrent_runs=options["cap"])
    JobDefinition.objects.filter(pk=flood_job.pk).update(target_ref="bench.handlers.sleep_5ms", priority=priority)
    flood_job.refresh_from_db()
    settle()
    fleet = Fleet(queue, options["workers"], options["concurrency"], options["batch"], options["pool"])
    tenants = [t.pk for t, _ in quiet] + [noisy.pk]
    try:
        fleet.wait_ready()
        start = db_now() + dt.timedelta(seconds=2)
        each = int(options["rate"] * options["seconds"])
        for i, (_, job) in enumerate(quiet):
            job.refresh_from_db()
            insert_runs(job, start + dt.timedelta(seconds=i / 1000), each, spacing_seconds=1 / options["rate"])
        flood_at = start + dt.timedelta(seconds=options["seconds"] / 2)
        insert_runs(flood_job, flood_at, options["runs"])
        _wait(tenants, start + dt.timedelta(seconds=options["seconds"]), options["timeout"] + options["seconds"], fleet)
    finally:
        fleet.stop()
    return _figures(options, [t.pk for t, _ in quiet], noisy.pk, flood_at, each * QUIET_TENANTS)


def _wait(tenants, last_due, timeout, fleet):
    runs = Run.objects.filter(tenant_id__in=tenants)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db_now() > last_due and not runs.pending().exists():
            return
        if not fleet.alive():
            raise RuntimeError("a bench process died; see its output")
        time.sleep(0.5)


def _figures(options, quiet_ids, noisy_id, flood_at, quiet_expected):
    flood = list(Attempt.objects.filter(run__tenant_id=noisy_id).values_list("started_at", "ended_at"))
    flood_end = max((e for _, e in flood), default=flood_at)
    first = Attempt.objects.filter(run__tenant_id__in=quiet_ids, attempt=1).values_list("available_at", "started_at")
    before, during = [], []
    for available, started in first:
        ms = (started - available).total_seconds() * 1000
        (before if available < flood_at else during if available <= flood_end else []).append(ms)
    p99_before, p99_during = (report.percentile(sorted(v), 99) for v in (before, during))
    bound = min(max(2 * p99_before, p99_before + 100), 250) if p99_before is not None else None
    rate = len(flood) / (flood_end - flood_at).total_seconds() if flood else 0.0
    slots = options["workers"] * options["concurrency"]
    target_rate = 0.8 * min(options["cap"], slots) / TASK_SECONDS
    all_ids = [*quiet_ids, noisy_id]
    figures = {
        "quiet_p99_before_ms": _round(p99_before),
        "quiet_p99_during_ms": _round(p99_during),
        "quiet_bound_ms": _round(bound),
        "quiet_runs_during": len(during),
        "early": Attempt.objects.filter(run__tenant_id__in=all_ids, started_at__lt=F("available_at")).count(),
        "succeeded": Run.objects.filter(tenant_id__in=all_ids, state="succeeded").count(),
        "expected": quiet_expected + options["runs"],
        "noisy_most_at_once": _most_at_once(flood),
        "flood_runs_per_s": round(rate, 1),
        "flood_target_runs_per_s": round(target_rate, 1),
        "flood_of_ideal": round(rate / (target_rate / 0.8), 3),  # of cap / task time (or free slots / task time)
        "flood_s": round((flood_end - flood_at).total_seconds(), 3),
    }
    checks = {
        "quiet_lateness": p99_during is not None and bound is not None and p99_during <= bound,
        "none_early": figures["early"] == 0,
        "all_succeeded": figures["succeeded"] == figures["expected"],
        "cap_held": figures["noisy_most_at_once"] <= options["cap"],
        "work_conserving": rate >= target_rate,
    }
    return {**figures, "checks": checks, "met": all(checks.values())}


def _most_at_once(intervals):
    """The most attempts running at one instant, from their (start, end): a sweep over the edges."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def _round(value):
    return None if value is None else round(value, 1)
