"""Turning schedules into runs, ahead of time, and explaining every occurrence.

For each active job whose `next_due_at` falls inside the look-ahead, one
transaction: move `next_due_at` forward by compare-and-set (0 rows: another
scheduler did this job; leave it), then insert the occurrences as runs.
The unique (job, due_at) makes a second insert after a crash harmless
(runs.enqueue.insert_runs passes over a run that is already there).

Occurrences that were not inserted before they fell due (no scheduler ran)
go through the job's missed-run policy; those not run are recorded as
`skipped` rows saying why (one summary row per reason, with the window and
count), so "why didn't it run at 09:00?" always has an answer.

A tenant at its pending-run quota (jobs.quotas) gets no new runs: the
occurrences past its room are recorded `skipped` with the reason
"quota: max_pending_runs", and the schedule moves on. Deferring them
instead would pile a burst on the queue the moment the tenant's runs drain,
and would hide from the job's history that the quota, not a failure, is why
they did not run. The room is counted once per tenant per pass.
"""

import dataclasses
import datetime as dt

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs import cron, quotas
from jobs.models import JobDefinition
from runs.enqueue import build_runs, insert_runs, skipped_rows

# An occurrence is "missed" when it was not materialised before it fell due by
# more than this: a scheduler that ticks every second never gets near it.
MISSED_GRACE = dt.timedelta(seconds=10)
QUOTA_REASON = "quota: max_pending_runs"


@dataclasses.dataclass
class Plan:
    runs: list = dataclasses.field(default_factory=list)  # due_at instants to run
    skipped: list = dataclasses.field(default_factory=list)  # (first, last, count, reason)
    next_due_at: dt.datetime | None = None


@dataclasses.dataclass
class MaterializeResult:
    jobs: int = 0
    inserted: int = 0
    skipped: int = 0


def upcoming(job, after, until):
    """The job's occurrences strictly after `after` up to `until` inclusive, and the next one after that."""
    found, cursor = [], after
    while True:
        batch = cron.occurrences(job.cron_expr, job.time_zone, cursor, 500)
        for instant in batch:
            if instant > until:
                return found, instant
            found.append(instant)
        if len(batch) < 500:
            return found, None
        cursor = batch[-1]


def plan(job, now, horizon, *, cap=None):
    """What to insert for `job` from its `next_due_at` up to `horizon`."""
    cap = cap or settings.DUETIME_MISSED_RUN_CAP
    first = job.next_due_at
    if job.schedule_kind == JobDefinition.ScheduleKind.AT:
        times, following = [first], None
    else:
        times, following = upcoming(job, first - dt.timedelta(microseconds=1), horizon)
    cutoff = now - MISSED_GRACE
    missed = [t for t in times if t < cutoff]
    result = Plan(runs=[t for t in times if t >= cutoff], next_due_at=following)
    if missed:
        _apply_missed_policy(job, now, missed, result, cap)
    return result


def _apply_missed_policy(job, now, missed, result, cap):
    policy = job.missed_run_policy
    if job.starting_deadline_seconds is not None:
        deadline = now - dt.timedelta(seconds=job.starting_deadline_seconds)
        expired = [t for t in missed if t < deadline]
        missed = [t for t in missed if t >= deadline]
        if expired:
            result.skipped.append(
                missed_summary(
                    expired,
                    f"missed while no scheduler ran, older than the starting deadline ({job.starting_deadline_seconds} s)",
                )
            )
    if not missed:
        return
    if policy == JobDefinition.MissedRunPolicy.SKIP:
        result.skipped.append(missed_summary(missed, "missed while no scheduler ran (missed-run policy skip)"))
    elif policy == JobDefinition.MissedRunPolicy.RUN_ONCE:
        if len(missed) > 1:
            result.skipped.append(
                missed_summary(
                    missed[:-1], "missed while no scheduler ran; run_once runs only the latest missed occurrence"
                )
            )
        result.runs.insert(0, missed[-1])
    else:
        if len(missed) > cap:
            result.skipped.append(
                missed_summary(missed[:-cap], f"missed while no scheduler ran; run_all runs at most the latest {cap}")
            )
        result.runs[:0] = missed[-cap:]


def missed_summary(times, reason):
    if len(times) == 1:
        return (times[0], None, 1, reason)
    return (
        times[0],
        times[-1],
        len(times),
        f"{reason}: {len(times)} occurrences from {times[0]:%Y-%m-%d %H:%M} to {times[-1]:%Y-%m-%d %H:%M} UTC",
    )


def due_definitions(now, shards=None, lookahead=None, limit=500):
    """Active jobs whose next occurrence falls inside the look-ahead (index job_due_by_shard)."""
    lookahead = lookahead if lookahead is not None else settings.DUETIME_LOOKAHEAD_SECONDS
    jobs = JobDefinition.objects.filter(
        status=JobDefinition.Status.ACTIVE,
        next_due_at__isnull=False,
        next_due_at__lte=now + dt.timedelta(seconds=lookahead),
    ).select_related("tenant")
    if shards is not None:
        jobs = jobs.filter(shard__in=list(shards))
    return list(jobs.order_by("next_due_at")[:limit])


def materialize(now=None, *, shards=None, lookahead=None, limit=500):
    """One pass over due definitions. Returns what it inserted."""
    now = now or timezone.now()
    lookahead = lookahead if lookahead is not None else settings.DUETIME_LOOKAHEAD_SECONDS
    horizon = now + dt.timedelta(seconds=lookahead)
    result = MaterializeResult()
    room = {}  # tenant pk -> runs it may still add under max_pending_runs, counted once a pass
    for job in due_definitions(now, shards, lookahead, limit):
        inserted, skipped = materialize_job(job, now, horizon, room)
        result.jobs += 1
        result.inserted += inserted
        result.skipped += skipped
    return result


def materialize_job(job, now, horizon, room=None):
    """Insert `job`'s occurrences up to `horizon`; returns (runs, skipped rows) inserted.

    `room` (tenant pk -> runs it may add, filled on first use) is shared by
    the jobs of one pass; occurrences beyond it are recorded skipped.
    """
    todo = plan(job, now, horizon)
    cap_by_quota(job, todo, room if room is not None else {})
    with transaction.atomic():
        advanced = JobDefinition.objects.filter(
            pk=job.pk, status=JobDefinition.Status.ACTIVE, next_due_at=job.next_due_at
        ).update(next_due_at=todo.next_due_at)
        if not advanced:
            return 0, 0  # another scheduler materialised it, or it was paused meanwhile
        insert_runs(build_runs(job, todo.runs) + skipped_rows(job, todo.skipped, now))
    job.next_due_at = todo.next_due_at
    return len(todo.runs), len(todo.skipped)


def cap_by_quota(job, todo, room):
    """Keep in `todo.runs` what the tenant's pending-run quota has room for; record the rest skipped."""
    if not todo.runs:
        return
    if job.tenant_id not in room:
        room[job.tenant_id] = quotas.pending_room(job.tenant)
    allowed = max(0, room[job.tenant_id])
    room[job.tenant_id] -= min(allowed, len(todo.runs))
    if len(todo.runs) <= allowed:
        return
    refused = todo.runs[allowed:]
    todo.runs = todo.runs[:allowed]
    limit = job.tenant.max_pending_runs
    todo.skipped.append(missed_summary(refused, f"{QUOTA_REASON} (at most {limit} runs waiting or running)"))
