"""Turning schedules into runs, ahead of time, and explaining every occurrence.

A pass takes the active jobs whose `next_due_at` falls inside the look-ahead
and does them a shard at a time, the shard with the most urgent job first
(due_shards: one index descent per shard, so a pass reads nothing of a shard
with nothing due, and never sorts a burst of due jobs to choose its shards).
Each shard is one transaction of a few statements, whatever its number of
jobs: lock up to `limit` of its due jobs, the most urgent first, and read them
in the same statement (SKIP LOCKED: a job being edited waits for the next
pass), insert every occurrence of them in one insert, move every
`next_due_at` forward in one update (advance_definitions). The unique
(job, due_at) makes a second insert after a crash harmless
(runs.enqueue.insert_runs passes over a run that is already there).
`materialize_job` does one job alone, by compare-and-set on its
`next_due_at` (0 rows: someone else did it).

The jobs of a burst share a few schedules (every hourly job at :00 in one
zone has the same next occurrence), so a pass asks jobs.cron once per
(expression, zone, previous occurrence) and reuses the answer for the rest.

Occurrences that were not inserted before they fell due (no scheduler ran)
go through the job's missed-run policy; those not run are recorded as
`skipped` rows saying why (one summary row per reason, with the window and
count), so "why didn't it run at 09:00?" always has an answer.

A scheduler materialises only the shards it owns, each in one transaction
that first checks, under a lock on the shard's lease, that the node still
holds it with the epoch it took (runs.shards.holds): a node whose shard was
taken over (a pause, a lost connection) writes nothing for it.

Maintenance windows and business-day calendars (calendars/) are applied
before the missed-run policy, with the windows of a shard's jobs read in one
query: an occurrence inside a window is skipped (the window's name is the
reason), or held until the window ends (`available_at` is its end, `due_at`
stays the occurrence), as the window's resume policy says (docs/windows.md).

A job whose tenant may no longer run its target (a superuser took away the
module prefix or the private network it needs: jobs.permissions) gets no new
runs either: its occurrences are recorded `skipped`, the reason naming what
was revoked, and its schedule moves on; restoring the permission brings back
the occurrences after that.

A job with `remaining_runs` gets at most that many runs; the statement
that advances its `next_due_at` also spends the count (advance_definitions:
`remaining_runs - spent`, compared with the value the plan read, on rows the
pass holds locked; `materialize_job` compares both values too), so two
schedulers, or two shards' owners during a take-over, cannot both spend it:
the second finds the row locked or changed and writes nothing, and the
column's CHECK (>= 0) would refuse an overdraft anyway. At 0 the job has no
next occurrence. Only inserted runs count: an occurrence the missed-run
policy, a window or the quota records `skipped` does not.

A tenant at its pending-run quota (jobs.quotas) gets no new runs: the
occurrences past its room are recorded `skipped` with the reason
"quota: max_pending_runs", and the schedule moves on. Deferring them
instead would pile a burst on the queue the moment the tenant's runs drain,
and would hide from the job's history that the quota, not a failure, is why
they did not run. The room is counted once a pass, for all its tenants at once.
"""

import dataclasses
import datetime as dt
import json
import time

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from calendars import blackouts
from calendars.models import Window
from jobs import jitter, occurrences, permissions, quotas
from jobs.models import SHARDS, JobDefinition, QueuePause
from runs import metrics, sql
from runs import shards as shard_leases
from runs.enqueue import build_runs, insert_runs, skipped_rows
from runs.models import CLAIMABLE_STATES, Run

# An occurrence is "missed" when it was not materialised before it fell due by
# more than this: a scheduler that ticks every second never gets near it.
MISSED_GRACE = dt.timedelta(seconds=10)
QUOTA_REASON = "quota: max_pending_runs"


@dataclasses.dataclass
class Plan:
    runs: list = dataclasses.field(default_factory=list)  # due_at instants to run
    skipped: list = dataclasses.field(default_factory=list)  # (first, last, count, reason)
    next_due_at: dt.datetime | None = None
    held: dict = dataclasses.field(default_factory=dict)  # due_at -> (available_at, reason): held by a window
    spent: int = 0  # runs counted against the job's remaining_runs (spend)


@dataclasses.dataclass
class MaterializeResult:
    jobs: int = 0
    inserted: int = 0
    skipped: int = 0
    refused_shards: int = 0  # shards this node no longer held (another took them over): nothing written
    more: bool = False  # stopped at its time budget with definitions left: call again at once


def upcoming(job, after, until, schedules=None):
    """The job's occurrences strictly after `after` up to `until` inclusive, and the next one after that.

    Asks jobs.occurrences for two at first (an hourly or daily job's
    look-ahead holds one), then more: each occurrence computed costs (an
    every-minute job asked for 500 cost 35 ms a pass). `schedules`, a dict
    shared by the jobs of one pass, keeps each answer by (schedule, after,
    until): the jobs of a burst ask the same few questions.
    """
    key = (occurrences.Schedule.of(job), after, until)
    if schedules is not None and key in schedules:
        found, following = schedules[key]
        return list(found), following
    found, following = _upcoming(key[0], after, until)
    if schedules is not None:
        schedules[key] = (tuple(found), following)
    return found, following


def _upcoming(schedule, after, until):
    found, cursor, size = [], after, 2
    while True:
        batch = occurrences.after(schedule, cursor, size)
        for instant in batch:
            if instant > until:
                return found, instant
            found.append(instant)
        if len(batch) < size:
            return found, None
        cursor, size = batch[-1], min(size * 4, 500)


def plan(job, now, horizon, *, cap=None, windows=(), schedules=None):
    """What to insert for `job` from its `next_due_at` up to `horizon` (`schedules`: see `upcoming`).

    `windows`: the job's maintenance windows and calendars (calendars.models.Window,
    its own and its tenant's). An occurrence inside one is decided by the
    window's resume policy first (calendars/blackouts.py: the whole window at
    once, so `next_due_at` may jump past the look-ahead to the window's end);
    the missed-run policy then decides the occurrences outside every window.
    """
    cap = cap or settings.DUETIME_MISSED_RUN_CAP
    first = job.next_due_at
    if job.remaining_runs == 0:  # spent: nothing more to insert (next_due_at is None once it is)
        return Plan()
    if job.schedule_kind == JobDefinition.ScheduleKind.AT:
        times, following = [first], None
    else:
        times, following = upcoming(job, first - dt.timedelta(microseconds=1), horizon, schedules)
    held = _hold(job, times, windows, cap)
    if held.resume_after is not None:
        following = _after(job, held.resume_after)
    cutoff = now - MISSED_GRACE
    missed = [t for t in held.free if t < cutoff]
    result = Plan(runs=[t for t in held.free if t >= cutoff], next_due_at=following, held=held.held)
    result.skipped += held.skipped
    if missed:
        _apply_missed_policy(job, now, missed, result, cap)
    if held.held:
        result.runs = sorted([*result.runs, *held.held])
    _within_count(job, result)
    return result


def _within_count(job, result):
    """Keep the first `remaining_runs` runs of the plan; the next pass starts at the first one left out.

    Whether the count is then spent is decided after the quota (`spend`): a
    run the quota skips does not count, and the schedule goes on from there.
    """
    left = job.remaining_runs
    if left is None or len(result.runs) <= left:
        return
    result.next_due_at = result.runs[left]
    result.runs = result.runs[:left]


def spend(job, todo):
    """Count `todo.runs` against the job's remaining_runs (unsaved: the advance writes it).

    At 0 the job has no next occurrence, and what the plan skipped after its
    last run is dropped: those occurrences are past the job's end, not skipped.
    """
    if job.remaining_runs is None:
        return
    todo.spent = len(todo.runs)
    if job.remaining_runs - todo.spent == 0:
        todo.next_due_at = None
        last = todo.runs[-1] if todo.runs else None
        todo.skipped = [s for s in todo.skipped if last is not None and s[0] <= last]


def _hold(job, times, windows, cap):
    if not windows or not times:
        return blackouts.Held(free=list(times))
    walk = blackouts.Walk.of(job)
    offset = dt.timedelta(seconds=jitter.stable_jitter(job.tenant.name, job.name, job.jitter_seconds))
    return blackouts.hold(times, walk, windows, cap, jitter=offset)


def _after(job, instant):
    """The job's first occurrence after `instant` (None for an `at` job, or a schedule that ends)."""
    found = occurrences.after(occurrences.Schedule.of(job), instant, 1)
    return found[0] if found else None


def rows_for(job, todo, now):
    """The unsaved rows of a plan: its runs (a held run available when its window ends) and skipped summaries."""
    rows = build_runs(job, todo.runs)
    for row in rows:
        if row.due_at in todo.held:
            row.available_at, row.reason = todo.held[row.due_at]
    return rows + skipped_rows(job, todo.skipped, now)


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


def _due(horizon, shards=None):
    # A paused tenant's jobs, and a paused queue's, wait where they are (runs.controls.pause_tenant): their
    # next_due_at stays, and the resume records what they passed over (runs.controls.catch_up).
    held_queue = QueuePause.objects.filter(tenant=OuterRef("tenant"), queue=OuterRef("queue"))
    jobs = JobDefinition.objects.filter(
        ~Exists(held_queue),
        status=JobDefinition.Status.ACTIVE,
        next_due_at__isnull=False,
        next_due_at__lte=horizon,
        tenant__paused_at__isnull=True,
    )
    if shards is not None:
        jobs = jobs.filter(shard__in=list(shards))
    return jobs


def materialize(now=None, *, shards=None, owner=None, lookahead=None, limit=500, budget=None):
    """One pass over due definitions, shard by shard, the most urgent first. Returns what it inserted.

    `shards`: None for every shard, or the shards to do; with `owner`, a
    {shard: epoch} mapping from runs.shards.own_shards, and each shard is
    written in one transaction only while `owner` still holds it with that
    epoch (otherwise it is counted in `refused_shards` and left alone).

    `limit`: the most definitions of one shard done in a pass; a shard that
    had that many due says `more`. `budget` (seconds): after the first shard,
    start no further shard once it is spent, and say `more` (the scheduler
    renews its leases between passes, so a pass stays short).
    """
    now = now or timezone.now()
    lookahead = lookahead if lookahead is not None else settings.DUETIME_LOOKAHEAD_SECONDS
    horizon = now + dt.timedelta(seconds=lookahead)
    result = MaterializeResult()
    room = {}  # tenant pk -> runs it may still add under max_pending_runs, counted once a pass (rooms)
    schedules = {}  # the occurrences the pass computed, by schedule (upcoming)
    started = time.monotonic()
    for shard in due_shards(horizon, range(SHARDS) if shards is None else shards):
        if budget is not None and result.jobs + result.refused_shards and time.monotonic() - started > budget:
            result.more = True
            break
        with transaction.atomic():
            if owner is not None and not shard_leases.holds(owner, shard, shards[shard]):
                result.refused_shards += 1
                continue
            jobs = lock_due(shard, horizon, limit)
            done, inserted, skipped = materialize_jobs(jobs, now, horizon, room, schedules)
        result.jobs += done
        result.inserted += inserted
        result.skipped += skipped
        result.more = result.more or len(jobs) >= limit
    return result


def due_shards(horizon, shards):
    """The due_shards query: which of `shards` have an active job due by `horizon` that no pause holds,
    the shard with the most urgent one first (one index descent per shard, however many are due)."""
    return [shard for (shard,) in sql.execute("due_shards", {"shards": sorted(shards), "horizon": horizon})]


def lock_due(shard, horizon, limit):
    """Lock and read up to `limit` of `shard`'s jobs due by `horizon`, the most urgent first: one
    statement (index job_due_by_shard, in order), in the caller's transaction. SKIP LOCKED: a job
    being edited or paused right now waits for the next pass, which reads it as it is then."""
    return list(_locked(_due(horizon, [shard]).order_by("next_due_at"))[:limit])


def _locked(jobs):
    """`jobs` locked FOR UPDATE SKIP LOCKED, each read with its tenant and whether any window applies
    to it (two index probes: its own windows, its tenant's), so that only the jobs with windows
    cost a query for them."""
    own = Window.objects.filter(job=OuterRef("pk"), enabled=True)
    tenant_wide = Window.objects.filter(job__isnull=True, tenant=OuterRef("tenant"), enabled=True)
    jobs = jobs.select_related("tenant").annotate(own_windows=Exists(own), tenant_windows=Exists(tenant_wide))
    return jobs.select_for_update(skip_locked=True, of=("self",))


def materialize_jobs(jobs, now, horizon, room, schedules):
    """Insert the occurrences of `jobs` (locked by the caller's transaction) up to `horizon` and advance them.

    Returns (jobs, runs, skipped rows). A few statements whatever the number
    of jobs: the windows of those that have any (`_locked` says which), the
    room of the tenants `room` has not counted yet, one insert, one update
    (advance_definitions). `schedules`: see `upcoming`.
    """
    if not jobs:
        return 0, 0, 0
    windows = Window.objects.by_job([job for job in jobs if job.own_windows or job.tenant_windows])
    room.update(rooms({job.tenant_id: job.tenant for job in jobs if job.tenant_id not in room}.values()))
    rows, planned = [], []
    for job in jobs:
        todo = plan(job, now, horizon, windows=windows.get(job.pk, ()), schedules=schedules)
        skip_revoked(job, todo)
        cap_by_quota(job, todo, room)
        spend(job, todo)
        rows += rows_for(job, todo, now)
        planned.append((job, todo))
    insert_runs(rows)
    advance_definitions(planned)
    for job, todo in planned:
        job.next_due_at = todo.next_due_at
        job.remaining_runs = None if job.remaining_runs is None else job.remaining_runs - todo.spent
        metrics.materialized(job, todo.runs, todo.skipped, now)
    return len(jobs), sum(len(t.runs) for _, t in planned), sum(len(t.skipped) for _, t in planned)


def advance_definitions(planned):
    """The advance_definitions query: move each job's next_due_at from the value its plan started from
    to the plan's, and spend its remaining_runs, for every (job, plan) of `planned` in one statement
    (the jobs are locked, and the statement compares both values as read)."""
    rows = [
        {
            "id": job.pk,
            "was": _utc(job.next_due_at),
            "next": _utc(todo.next_due_at),
            "left_was": job.remaining_runs,
            "spent": todo.spent,
        }
        for job, todo in planned
    ]
    sql.execute("advance_definitions", {"rows": json.dumps(rows)})


def _utc(value):
    """UTC wall time as text, as runs.enqueue sends datetimes in JSON: the form both dialects read."""
    return None if value is None else str(value.astimezone(dt.UTC).replace(tzinfo=None))


def materialize_job(job, now, horizon, room=None):
    """Insert `job`'s occurrences up to `horizon`; returns (runs, skipped rows) inserted.

    `room` (tenant pk -> runs it may add, filled on first use) is shared by
    the jobs of one pass; occurrences beyond it are recorded skipped.
    """
    todo = plan(job, now, horizon, windows=Window.objects.by_job([job])[job.pk])
    skip_revoked(job, todo)
    cap_by_quota(job, todo, room if room is not None else {})
    spend(job, todo)
    left = None if job.remaining_runs is None else job.remaining_runs - todo.spent
    with transaction.atomic():
        advanced = JobDefinition.objects.filter(
            pk=job.pk,
            status=JobDefinition.Status.ACTIVE,
            next_due_at=job.next_due_at,
            remaining_runs=job.remaining_runs,
        ).update(next_due_at=todo.next_due_at, remaining_runs=left)
        if not advanced:
            return 0, 0  # another scheduler materialised it, or it was paused or edited meanwhile
        insert_runs(rows_for(job, todo, now))
    job.next_due_at, job.remaining_runs = todo.next_due_at, left
    metrics.materialized(job, todo.runs, todo.skipped, now)
    return len(todo.runs), len(todo.skipped)


def rooms(tenants):
    """{tenant pk: runs it may still add under max_pending_runs} for these Tenant rows, in one query.

    A pass of a burst touches hundreds of tenants: one count each
    (jobs.quotas.pending_room) cost more than the materialising itself.
    """
    ids = [tenant.pk for tenant in tenants]
    if not ids:
        return {}
    # Stated as waiting OR leased, each half the predicate of a partial index (run_claimable,
    # run_leased_by_owner): the planner reads those two for the tenants instead of every open run.
    waiting_or_leased = Q(state__in=CLAIMABLE_STATES) | Q(state=Run.State.LEASED)
    pending = Run.objects.filter(waiting_or_leased, tenant_id__in=ids).pending().values_list("tenant_id")
    counts = dict(pending.order_by().annotate(n=Count("pk")).values_list("tenant_id", "n"))
    return {tenant.pk: tenant.max_pending_runs - counts.get(tenant.pk, 0) for tenant in tenants}


def skip_revoked(job, todo):
    """Record all of `todo.runs` skipped when the job's tenant may no longer run its target
    (jobs.permissions: a module prefix or a private network was taken away); the schedule moves on."""
    if not todo.runs:
        return
    why = permissions.revoked(job)
    if why is None:
        return
    todo.skipped.append(missed_summary(sorted(todo.runs), why))
    todo.runs, todo.held = [], {}


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
