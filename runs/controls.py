"""Operator controls on a definition: pause, resume, delete, backfill.

Each is audited, and each explains what it passes over: occurrences while a
job was paused become one `skipped` row saying so.
"""

import datetime as dt

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from jobs import audit, cron
from jobs.definitions import first_due
from jobs.models import JobDefinition
from runs import transitions
from runs.materialize import build_runs, missed_summary, skipped_rows, upcoming
from runs.models import Run

Status = JobDefinition.Status
BACKFILL_LIMIT = 10_000


def pause(job, *, actor, note="", now=None):
    """Stop materialising new runs and claiming existing ones. False if not active."""
    with transaction.atomic():
        changed = JobDefinition.objects.filter(pk=job.pk, status=Status.ACTIVE).update(status=Status.PAUSED)
        if changed:
            audit.record(actor, "pause", job, note=note)
    job.refresh_from_db()
    return bool(changed)


def resume(job, *, actor, note="", now=None):
    """Start again from the next occurrence after now; what was passed over is recorded skipped."""
    now = now or timezone.now()
    with transaction.atomic():
        job = JobDefinition.objects.select_for_update().get(pk=job.pk)
        if job.status != Status.PAUSED:
            return False
        Run.objects.bulk_create(reactivate(job, now), ignore_conflicts=True)
        job.save(update_fields=["status", "next_due_at", "updated_at"])
        audit.record(actor, "resume", job, note=note)
    return True


def reactivate(job, now):
    """Set a paused `job` active again from its next occurrence after now (unsaved).

    Returns the skipped row that explains what was passed over while paused
    (none if nothing was). An `at` job keeps its instant: if it passed while
    paused, the missed-run policy decides.
    """
    skipped = []
    if job.schedule_kind == JobDefinition.ScheduleKind.CRON:
        if job.next_due_at and job.next_due_at < now:
            missed, _ = upcoming(job, job.next_due_at - dt.timedelta(microseconds=1), now)
            if missed:
                skipped = skipped_rows(job, [missed_summary(missed, "passed over while the job was paused")], now)
        job.next_due_at = first_due(job, now)
    job.status = Status.ACTIVE
    return skipped


def delete(job, *, actor, note="", now=None):
    """Cancel the job: no new runs; runs not yet started are cancelled; running ones finish."""
    with transaction.atomic():
        JobDefinition.objects.filter(pk=job.pk).update(status=Status.CANCELLED, next_due_at=None)
        cancelled = transitions.cancel_future_runs([job.pk], reason="job deleted", now=now)
        audit.record(actor, "delete", job, detail={"cancelled_runs": cancelled}, note=note)
    job.refresh_from_db()
    return cancelled


def backfill_plan(job, start, end, max_runs=100):
    """The occurrences of a cron job in [start, end) that a backfill would run (at most max_runs)."""
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


def backfill(job, start, end, *, actor, max_runs=100, note="", now=None, progress=None):
    """Run the occurrences in [start, end) again, now (origin backfill). Returns the runs created.

    `progress(done, total)` is called after each chunk (the CLI's bar).
    """
    times, truncated = backfill_plan(job, start, end, max_runs)
    now = now or timezone.now()
    created = []
    for i in range(0, len(times), 500):
        chunk = times[i : i + 500]
        rows = build_runs(job, chunk, origin=Run.Origin.BACKFILL)
        for row, due in zip(rows, chunk):
            row.idempotency_key = f"{row.idempotency_key}#backfill"
            row.available_at = max(now, due)  # runs now; never before its nominal instant
        with transaction.atomic():
            created += Run.objects.bulk_create(rows)
        if progress:
            progress(len(created), len(times))
    audit.record(
        actor,
        "backfill",
        job,
        detail={"start": start.isoformat(), "end": end.isoformat(), "runs": len(created), "truncated": truncated},
        note=note,
    )
    return created
