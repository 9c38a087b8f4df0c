"""Backfill: run a window of a cron job's past occurrences again, now.

The same plan, cap, audit record and origin `backfill` for every door: the
API (POST /v1/jobs/{name}:backfill), the portal's action and
`manage.py backfill`. A backfilled run keeps its occurrence's due time and
is available now (never before its nominal instant); its idempotency key is
the occurrence's with `#backfill`, so a handler can tell it from the
original run.
"""

import datetime as dt

from django.core.exceptions import ValidationError
from django.utils import timezone

from jobs import audit, cron
from jobs.models import JobDefinition
from runs.enqueue import build_runs, insert_runs
from runs.models import Run

BACKFILL_LIMIT = 10_000


def backfill_plan(job, start, end, max_runs=100):
    """The occurrences of a cron job in [start, end) that a backfill would run (at most max_runs).

    Returns (times, truncated). Raises ValidationError for a job without
    occurrences, an empty or future window, or a cap out of range.
    """
    if job.schedule_kind != JobDefinition.ScheduleKind.CRON:
        raise ValidationError({"job": ["only a cron job has occurrences to backfill"]})
    if start >= end:
        raise ValidationError({"end": ["must be after start"]})
    if end > timezone.now():
        raise ValidationError({"end": ["a backfill covers the past; occurrences from now on run on schedule"]})
    if not 1 <= max_runs <= BACKFILL_LIMIT:
        raise ValidationError({"max_runs": [f"must be between 1 and {BACKFILL_LIMIT}"]})
    times = cron.occurrences(job.cron_expr, job.time_zone, start - dt.timedelta(microseconds=1), max_runs + 1)
    times = [t for t in times if t < end]
    return times[:max_runs], len(times) > max_runs


def backfill(job, start, end, *, actor, max_runs=100, note="", now=None, progress=None, quota=None):
    """Run the occurrences in [start, end) again, now (origin backfill). Returns the runs created.

    `progress(done, total)` is called as the runs are inserted (the CLI's bar).
    `quota`: the runs.enqueue.Quota this door obeys (the API's: Quota.PENDING),
    checked for the whole window before any run is created.
    """
    times, truncated = backfill_plan(job, start, end, max_runs)
    now = now or timezone.now()
    rows = build_runs(job, times, origin=Run.Origin.BACKFILL)
    for row, due in zip(rows, times):
        row.idempotency_key = f"{row.idempotency_key}#backfill"
        row.available_at = max(now, due)  # runs now; never before its nominal instant
    created = insert_runs(rows, quota=quota, now=now, progress=progress)
    audit.record(
        actor,
        "backfill",
        job,
        detail={"start": start.isoformat(), "end": end.isoformat(), "runs": len(created), "truncated": truncated},
        note=note,
    )
    return created
