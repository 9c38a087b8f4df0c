"""Figures computed from the database: lateness, throughput, lost, early, duplicates."""

import time

from django.db.models import Count, F, Max, Min, Q
from django.utils import timezone

from runs.models import Attempt, Run


def wait_until_done(tenant, timeout, fleet=None, last_due=None):
    """Poll until no run of the tenant that is due (by `last_due`, default now) waits or runs.

    Each poll is two index probes (run_claimable, run_leased_by_owner), never
    a count over the tenant's rows: with a million runs scheduled ahead in the
    same tenant, a counting harness would itself load the database it measures.
    Both name the open partition (pending runs live there): a poll that planned
    over every day of history cost 22 ms of planning with 34 days listed.
    Returns seconds waited.
    """
    started = time.monotonic()
    runs = Run.objects.filter(tenant=tenant)
    while time.monotonic() - started < timeout:
        now = timezone.now()
        if last_due is None or now > last_due:
            horizon = last_due or now
            waiting = runs.ready(horizon).exists()
            if not waiting and not runs.pending().filter(state="leased").exists():
                break
        if fleet is not None and not fleet.alive():
            raise RuntimeError("a bench process died; see its output")
        time.sleep(0.2)
    return time.monotonic() - started


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def figures(tenant, expected, since=None):
    runs = Run.objects.filter(tenant=tenant)
    first = Attempt.objects.filter(run__tenant=tenant, attempt=1)
    if since is not None:
        runs = runs.filter(created_at__gte=since)
        first = first.filter(run__created_at__gte=since)
    lateness_ms = sorted(
        (a - b).total_seconds() * 1000
        for a, b in first.values_list("started_at", "available_at").iterator(chunk_size=5000)
    )
    span = first.aggregate(start=Min("started_at"), end=Max("ended_at"), last_start=Max("started_at"))
    attempts = Attempt.objects.filter(run__tenant=tenant)
    succeeded = runs.filter(state="succeeded").count()
    duplicates = attempts.values("run_id").annotate(n=Count("id")).filter(n__gt=1).count()
    early = attempts.filter(Q(started_at__lt=F("available_at")) | Q(started_at__lt=F("run__due_at"))).count()
    elapsed = (span["end"] - span["start"]).total_seconds() if span["start"] else None
    return {
        "runs": expected,
        "succeeded": succeeded,
        "lost": expected - succeeded,
        "early": early,
        "duplicates": duplicates,
        "runs_per_s": round(succeeded / elapsed, 1) if elapsed else None,
        "elapsed_s": round(elapsed, 3) if elapsed else None,
        "first_start": span["start"],
        "last_start": span["last_start"],
        "lateness_ms": {
            "p50": _round(percentile(lateness_ms, 50)),
            "p99": _round(percentile(lateness_ms, 99)),
            "max": _round(lateness_ms[-1] if lateness_ms else None),
        },
    }


def _round(value):
    return None if value is None else round(value, 1)
