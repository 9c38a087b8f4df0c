"""Backfill: run a window of a cron or `every` job's past occurrences again, now.

The same plan, cap, audit record and origin `backfill` for every door: the
API (POST /v1/jobs/{name}:backfill), the portal's action and
`manage.py backfill`. A backfilled run keeps its occurrence's due time and
is available now (never before its nominal instant); its idempotency key is
the occurrence's with `#backfill`, so a handler can tell it from the
original run.

A backfill honours the job's maintenance windows and calendars (the same
rules as materialisation, calendars/blackouts.py) unless told to ignore them:
an occurrence inside a `skip` window is left out, a `run_once` window keeps
only its latest occurrence and a `run_all` window all of them (at most
DUETIME_MISSED_RUN_CAP). What the windows left out is in the plan
(`held_back`), and in the audit record.
"""

import dataclasses
import datetime as dt

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from calendars import blackouts
from calendars.models import Window
from jobs import audit, occurrences, permissions
from jobs.models import JobDefinition
from jobs.validation import instant_problem
from runs.enqueue import build_runs, insert_runs
from runs.models import Run

BACKFILL_LIMIT = 10_000
US = dt.timedelta(microseconds=1)


@dataclasses.dataclass
class BackfillPlan:
    times: list  # the occurrences to run again, oldest first
    truncated: bool  # more would run after these (max_runs reached)
    held_back: int = 0  # occurrences the windows left out
    reasons: list = dataclasses.field(default_factory=list)  # why, one line per window span
    resume_after: dt.datetime | None = None  # truncated: the last occurrence decided; a next chunk starts after it


def backfill_plan(job, start, end, max_runs=100, *, ignore_windows=False):
    """The occurrences of a cron or `every` job in [start, end) that a backfill would run (at most max_runs).

    A BackfillPlan. Its occurrences come from jobs.occurrences, so only those
    inside the job's bounds (start_at, end_at); remaining_runs is not spent
    by a backfill. Raises ValidationError for a job without occurrences, an empty or future
    window, an instant outside the years a schedule can express
    (jobs.validation.EARLIEST..LATEST), or a cap out of range. Windows apply
    unless `ignore_windows`.
    """
    if job.schedule_kind not in (JobDefinition.ScheduleKind.CRON, JobDefinition.ScheduleKind.EVERY):
        raise ValidationError({"job": ["only a cron or every job has occurrences to backfill"]})
    bad = {
        field: [instant_problem(value)] for field, value in (("start", start), ("end", end)) if instant_problem(value)
    }
    if bad:
        raise ValidationError(bad)
    if start >= end:
        raise ValidationError({"end": ["must be after start"]})
    if end > timezone.now():
        raise ValidationError({"end": ["a backfill covers the past; occurrences from now on run on schedule"]})
    if not 1 <= max_runs <= BACKFILL_LIMIT:
        raise ValidationError({"max_runs": [f"must be between 1 and {BACKFILL_LIMIT}"]})
    windows = [] if ignore_windows else _windows(job)
    if not windows:
        times = [t for t in occurrences.after(occurrences.Schedule.of(job), start - US, max_runs + 1) if t < end]
        cut = len(times) > max_runs
        return BackfillPlan(times[:max_runs], cut, resume_after=times[max_runs - 1] if cut else None)
    return _windowed_plan(job, start, end, max_runs, windows)


def _windows(job):
    return Window.objects.by_job([job])[job.pk]


def _windowed_plan(job, start, end, max_runs, windows):
    """Walk the window's occurrences in batches, letting the windows decide, until max_runs would run."""
    walk = blackouts.Walk.of(job)
    plan, cursor = BackfillPlan([], False), start - US
    while True:
        batch = [t for t in walk.after(cursor, 500) if t < end]
        if not batch:
            return plan
        held = blackouts.hold(batch, walk, windows, settings.DUETIME_MISSED_RUN_CAP)
        decided = sorted([*held.free, *(t for t in held.held if t < end)])
        plan.held_back += sum(count for _, _, count, _ in held.skipped)
        plan.reasons += [reason for _, _, _, reason in held.skipped]
        room = max_runs - len(plan.times)
        if len(decided) > room:
            plan.times += decided[:room]
            plan.truncated, plan.resume_after = True, decided[room - 1] if room else cursor
            return plan
        plan.times += decided
        cursor = max(held.resume_after or batch[-1], batch[-1])
        if len(batch) < 500 or cursor >= end:
            return plan


def backfill(
    job,
    start,
    end,
    *,
    actor,
    max_runs=100,
    note="",
    now=None,
    progress=None,
    quota=None,
    ignore_windows=False,
    plan=None,
):
    """Run the occurrences in [start, end) again, now (origin backfill). Returns the runs created.

    `progress(done, total)` is called as the runs are inserted (the CLI's bar).
    `quota`: the runs.enqueue.Quota this door obeys (the API's: Quota.PENDING),
    checked for the whole window before any run is created. `plan`: the
    BackfillPlan of these arguments, when the caller has made it already.
    Raises jobs.permissions.Revoked when the job's tenant may no longer run its target.
    """
    permissions.refuse_revoked([job])
    plan = plan or backfill_plan(job, start, end, max_runs, ignore_windows=ignore_windows)
    times = plan.times
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
        detail={
            "start": start.isoformat(),
            "end": end.isoformat(),
            "runs": len(created),
            "truncated": plan.truncated,
            "held_back_by_windows": plan.held_back,
            "ignore_windows": ignore_windows,
        },
        note=note,
    )
    return created
