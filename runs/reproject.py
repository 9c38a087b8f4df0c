"""Re-projecting future runs when the time-zone database changes (docs/timezone-changes.md).

A cron job's occurrences are local wall times; Duetime stores them as UTC
instants, computed with the tz database of the day. When a new tzdata release
changes a zone's rules (a country drops daylight saving time, moves it, or
changes its offset), the instants already computed for the future are wrong.

Each zone in use has a `calendars.ZoneVersion` row: the fingerprint, release
and compiled rules (TZif bytes) its runs were projected with. `reproject(now)`
compares it with the rules zoneinfo loads now (calendars/zones.py). A new
zone gets a row (its runs are taken as projected with what is there now). A
changed zone is taken by compare-and-set on the old fingerprint, then its
jobs are moved in batches of BATCH, each batch in one transaction under the
row's lock (another scheduler waits, then finds the batch done):

- a job's projection starts at its first occurrence not yet due: the earliest
  of its unclaimed scheduled runs (origin `schedule`, never leased, due after
  `now`) and its `next_due_at`. Its local wall time under the *old* rules is
  re-read under the *new* ones, and the schedule is walked from there with
  the new rules (jobs.cron.occurrences, so the DST rules are the usual ones);
- an unclaimed run whose `due_at` is no longer an occurrence is cancelled
  (runs.transitions.cancel_waiting: a compare-and-set on `scheduled`; its
  `due_at`, the run's identity, is never rewritten), and each new occurrence
  up to the last wall time that was materialised is inserted through
  runs.enqueue.insert_runs (the job's windows apply to them);
- `next_due_at` becomes the first new occurrence after those (an instant the
  new rules put in the past is then decided by the missed-run policy, as
  after an outage);
- each job that moved gets an audit entry `reproject` saying what moved.

Runs already due, leased or finished are history and stay as they ran. The
scheduler's step `tick(now)` does this at most every
DUETIME_TZDATA_CHECK_SECONDS (one stat() per zone in use when nothing
changed), and every pass while a change is being rolled out; the command is
`manage.py reproject_timezones [--dry-run]`.
"""

import dataclasses
import datetime as dt
import time
import zoneinfo

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from calendars import blackouts, zones
from calendars.models import Window, ZoneVersion
from jobs import audit, cron, jitter, occurrences
from jobs.models import AuditEntry, JobDefinition
from runs import transitions
from runs.enqueue import build_runs, insert_runs, skipped_rows
from runs.models import Run

BATCH = 500  # jobs per transaction
ACTOR = "system:tzdata"
US = dt.timedelta(microseconds=1)
SHOWN = 20  # instants listed per job in an audit entry
Kind = JobDefinition.ScheduleKind


@dataclasses.dataclass
class JobMove:
    """What re-projecting one job changes."""

    job: JobDefinition
    cancelled: list  # the unclaimed runs whose due_at is no longer an occurrence
    inserted: list  # the new occurrences to insert
    next_due_at: dt.datetime | None

    @property
    def moves(self):
        return bool(self.cancelled or self.inserted or self.next_due_at != self.job.next_due_at)


@dataclasses.dataclass
class ZoneChange:
    zone: str
    before: str  # the tzdata release the runs were projected with
    after: str  # the one they are moved to
    jobs: int = 0  # jobs that moved
    cancelled: int = 0
    inserted: int = 0
    done: bool = False  # every job of the zone is re-projected


@dataclasses.dataclass
class Result:
    zones: int = 0  # zones in use, compared
    changes: list = dataclasses.field(default_factory=list)

    @property
    def moved_runs(self):
        return sum(c.cancelled + c.inserted for c in self.changes)


_next_check = 0.0  # time.monotonic() of this process's next comparison
_rolling = False  # a change was still being rolled out after the last pass


def tick(now):
    """The scheduler step: compare now and then, roll a change out one batch a pass. Returns runs moved."""
    global _next_check, _rolling
    if not _rolling and time.monotonic() < _next_check:
        return 0
    _next_check = time.monotonic() + settings.DUETIME_TZDATA_CHECK_SECONDS
    result = reproject(now)
    _rolling = any(not change.done for change in result.changes)
    return result.moved_runs


def zones_in_use():
    """The zones of the cron jobs that may still run (active or paused)."""
    jobs = JobDefinition.objects.filter(schedule_kind=Kind.CRON, status__in=["active", "paused"])
    return sorted(set(jobs.values_list("time_zone", flat=True).distinct()))


def reproject(now=None, *, dry_run=False, actor=ACTOR, exhaust=False):
    """Compare every zone in use and move the runs of those whose rules changed. Returns a Result.

    One batch of jobs per changed zone, unless `exhaust` (the command: every
    batch). `dry_run` says what would move and writes nothing.
    """
    now = now or timezone.now()
    in_use = zones_in_use()
    known = {row.zone: row for row in ZoneVersion.objects.filter(zone__in=in_use)}
    result = Result(zones=len(in_use))
    for zone in in_use:
        try:
            data = zones.current(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            continue  # a zone no longer in the database: validation names it when the job is next saved
        row = known.get(zone)
        if row is None:
            if not dry_run:
                _baseline(zone, data, now)
            continue
        if dry_run:
            if row.fingerprint != data.fingerprint or row.rolling_out:
                result.changes.append(_preview(row, data, now))
            continue
        if not row.rolling_out:
            if row.fingerprint == data.fingerprint or not _take(row, data):
                continue
        result.changes.append(_roll_out(zone, now, actor, exhaust))
    return result


def _baseline(zone, data, now):
    ZoneVersion.objects.get_or_create(
        zone=zone,
        defaults={"fingerprint": data.fingerprint, "version": data.version, "tzif": data.tzif, "projected_at": now},
    )


def _take(row, data):
    """Start rolling out `data` for `row`'s zone: a compare-and-set on the fingerprint (0 rows: another node did)."""
    return bool(
        ZoneVersion.objects.filter(zone=row.zone, fingerprint=row.fingerprint, pending_fingerprint="").update(
            pending_fingerprint=data.fingerprint, pending_version=data.version, pending_tzif=data.tzif, job_cursor=0
        )
    )


def _roll_out(zone, now, actor, exhaust):
    """Move the zone's jobs, a batch per transaction under the row's lock; the last batch makes the rules current."""
    zoneinfo.ZoneInfo.clear_cache(only_keys=[zone])  # this process computes new occurrences with the new rules
    change = None
    while True:
        with transaction.atomic():
            row = ZoneVersion.objects.select_for_update().get(zone=zone)
            if change is None:
                change = ZoneChange(zone, row.version, row.pending_version or row.version)
            if not row.rolling_out:  # another node finished it meanwhile
                change.done = True
                return change
            old, new = _rules(row.zone, row.tzif), _rules(row.zone, row.pending_tzif)
            jobs = list(_jobs(zone).filter(pk__gt=row.job_cursor).order_by("pk")[:BATCH])
            _apply(_moves(jobs, old, new, now), change, row, now, actor)
            if len(jobs) < BATCH:
                _finish(row, now)
                change.done = True
            else:
                ZoneVersion.objects.filter(zone=zone).update(job_cursor=jobs[-1].pk)
        if change.done or not exhaust:
            return change


def _jobs(zone):
    jobs = JobDefinition.objects.filter(schedule_kind=Kind.CRON, time_zone=zone, status__in=["active", "paused"])
    return jobs.select_for_update(of=("self",)).select_related("tenant")


def _rules(zone, tzif):
    return zones.ZoneData(zone, "", "", bytes(tzif)).load()


def _finish(row, now):
    ZoneVersion.objects.filter(zone=row.zone).update(
        fingerprint=row.pending_fingerprint,
        version=row.pending_version,
        tzif=row.pending_tzif,
        pending_fingerprint="",
        pending_version="",
        pending_tzif=None,
        job_cursor=0,
        projected_at=now,
    )


def _preview(row, data, now):
    """What rolling `data` out would move, for every job of the zone; writes nothing."""
    before = row.pending_tzif if row.rolling_out else row.tzif
    old, new = _rules(row.zone, before), data.load()
    change = ZoneChange(row.zone, row.pending_version if row.rolling_out else row.version, data.version)
    jobs = JobDefinition.objects.filter(schedule_kind=Kind.CRON, time_zone=row.zone, status__in=["active", "paused"])
    for move in _moves(list(jobs.select_related("tenant").order_by("pk")), old, new, now):
        change.jobs += 1
        change.cancelled += len(move.cancelled)
        change.inserted += len(move.inserted)
    change.done = True
    return change


# --- one batch -----------------------------------------------------------------------


def _moves(jobs, old, new, now):
    """The JobMove of each of `jobs` that moves: their unclaimed future runs read in one query."""
    future = {}
    waiting = Run.objects.filter(
        job_id__in=[j.pk for j in jobs],
        origin=Run.Origin.SCHEDULE,
        state=Run.State.SCHEDULED,
        attempt=0,
        due_at__gt=now,
    )
    for run in waiting.order_by("due_at").only("pk", "job_id", "due_at"):
        future.setdefault(run.job_id, []).append(run)
    found = []
    for job in jobs:
        move = reprojected(job, future.get(job.pk, []), old, new, now)
        if move is not None and move.moves:
            found.append(move)
    return found


def reprojected(job, future, old, new, now):
    """The JobMove of `job` from the rules `old` to `new` (ZoneInfo objects), or None if nothing lies ahead.

    `future`: its unclaimed scheduled runs due after `now`, by due_at.
    """
    starts = [r.due_at for r in future] + ([job.next_due_at] if job.next_due_at and job.next_due_at > now else [])
    if not starts:
        return None
    wall = _wall(min(starts), old)
    last_wall = _wall(future[-1].due_at, old) if future else None
    times, following = _walk(job.cron_expr, new, _instant(wall, new) - US, last_wall)
    schedule = occurrences.Schedule.of(job)  # the job's bounds hold under the new rules too
    times = [t for t in times if occurrences.within(schedule, t)]
    if following is not None and job.end_at is not None and following >= job.end_at:
        following = None
    kept = {r.due_at for r in future}
    return JobMove(
        job=job,
        cancelled=[r for r in future if r.due_at not in set(times)],
        inserted=[t for t in times if t not in kept],
        next_due_at=following,
    )


def _wall(instant, rules):
    """The local wall time of `instant` under `rules` (naive; a repeated hour's second pass keeps fold=1)."""
    local = instant.astimezone(rules)
    return local.replace(tzinfo=None, fold=local.fold)


def _instant(wall, rules):
    """The earliest UTC instant whose wall time under `rules` is `wall` (a gap: the instant the gap begins)."""
    return min(wall.replace(tzinfo=rules, fold=f).astimezone(dt.UTC) for f in (0, 1))


def _walk(expression, rules, after, last_wall):
    """(occurrences after `after` whose wall time is at most `last_wall`, the first one past it)."""
    found, cursor = [], after
    while True:
        batch = cron.occurrences(expression, rules, cursor, 16)
        for instant in batch:
            if last_wall is None or _wall(instant, rules).replace(fold=0) > last_wall.replace(fold=0):
                return found, instant
            found.append(instant)
        if len(batch) < 16:
            return found, None
        cursor = batch[-1]


def _apply(moves, change, row, now, actor):
    """Cancel, insert and move next_due_at for `moves`, audit each job: the caller's transaction."""
    if not moves:
        return
    reason = (
        f"time-zone rules of {row.zone} changed (tzdata {row.version} -> {row.pending_version}): "
        "no longer an occurrence; the re-projected one is a new run"
    )
    cancelled = {r.pk for m in moves for r in m.cancelled}
    waiting = Run.objects.filter(pk__in=cancelled, state=Run.State.SCHEDULED, attempt=0)
    gone = {r.pk for r in transitions.cancel_waiting(waiting, reason=reason, now=now)}
    windows = Window.objects.by_job([m.job for m in moves])
    rows = []
    for move in moves:
        rows += _rows(move, windows[move.job.pk], now)
        JobDefinition.objects.filter(pk=move.job.pk).update(next_due_at=move.next_due_at)
    inserted = insert_runs(rows)
    AuditEntry.objects.bulk_create(
        [_entry(move, row, actor, gone) for move in moves],
        batch_size=1000,
    )
    change.jobs += len(moves)
    change.cancelled += len(gone)
    change.inserted += sum(1 for r in inserted if r.state == Run.State.SCHEDULED)


def _rows(move, windows, now):
    job = move.job
    offset = dt.timedelta(seconds=jitter.stable_jitter(job.tenant.name, job.name, job.jitter_seconds))
    walk = blackouts.Walk.of(job)
    held = blackouts.hold(move.inserted, walk, windows, settings.DUETIME_MISSED_RUN_CAP, jitter=offset)
    due = sorted([*held.free, *(t for t in held.held if t in move.inserted)])
    rows = build_runs(job, due)
    for run in rows:
        if run.due_at in held.held:
            run.available_at, run.reason = held.held[run.due_at]
    return rows + skipped_rows(job, held.skipped, now)


def _entry(move, row, actor, gone):
    iso = [t.isoformat() for t in move.inserted]
    detail = {
        "zone": row.zone,
        "tzdata": {"before": row.version, "after": row.pending_version},
        "next_due_at": {
            "before": move.job.next_due_at.isoformat() if move.job.next_due_at else None,
            "after": move.next_due_at.isoformat() if move.next_due_at else None,
        },
        "cancelled": [r.due_at.isoformat() for r in move.cancelled if r.pk in gone][:SHOWN],
        "inserted": iso[:SHOWN],
    }
    return audit.entry(actor, "reproject", move.job, detail=detail)
