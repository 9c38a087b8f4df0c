"""The occurrence ledger: every occurrence a job's schedule implied in a window, and what became of it.

"Why didn't my job run at 02:30?" `ledger(job, start, end, now)` walks the
schedule's occurrences in [start, end) (at most `limit` a page, in time
order, jobs.occurrences: cron with the usual DST rules, `at`, `every`, inside
the job's start_at and end_at) and finds each one's
record, in a handful of queries whatever the page size: the run of that
occurrence (unique per job and due time), the skipped summary row that
covers it (missed-run policy, quota, maintenance window, passed over while
paused), its attempts, and the audit entry of whoever cancelled it. Each
entry gets a fate (FATES). An occurrence with no record at all, before the
job's next due time, after its current schedule began and within the history
kept (DUETIME_RETENTION_DAYS, runs/retention.py: older ones are `expired`), is **missing**:
Duetime promises that never happens, so each is counted in
`duetime_ledger_missing_occurrences` when a ledger is computed. Once a job's
`remaining_runs` is spent, the occurrences after its last run are `ended`.

What the ledger assumes (also in `Ledger.assumptions`, shown with it): the
job's *current* schedule held over the window. A schedule edit leaves runs
whose due time is not an occurrence of the current schedule; those runs are
listed as `earlier_schedule`, and the occurrences before the edit that
followed them are `before_schedule`, not missing. An edit that left no run in
the window cannot be told from any other edit: the window's edits are listed
beside the ledger. Windows are today's: one added later did not hold the
occurrences before it. Occurrences before the job was created are not listed.
"""

import dataclasses
import datetime as dt

from django.conf import settings
from django.db.models import Q

from calendars import blackouts
from calendars.models import Window
from jobs import cron, occurrences
from jobs.models import AuditEntry, JobDefinition
from runs import metrics
from runs.models import Attempt, Run

MAX_LIMIT = 500
US = dt.timedelta(microseconds=1)
SUMMARY_REACH = dt.timedelta(days=400)  # how far back a skipped summary row may start and still cover the window

FATES = {
    "ran": "succeeded",
    "retrying": "failed, waiting to retry",
    "running": "leased to a worker now",
    "dead": "failed for good: in the dead-letter queue",
    "skipped": "recorded skipped (the reason says which policy or window)",
    "paused": "passed over while the job or its tenant was paused",
    "cancelled": "cancelled (by whom: the audit log)",
    "waiting": "due, waiting for a worker",
    "not_yet_due": "not due yet",
    "not_materialized": "due, but the scheduler has not reached it yet",
    "earlier_schedule": "a run of an earlier schedule of the job",
    "before_schedule": "before the current schedule began: no record expected",
    "expired": "older than the history kept (DUETIME_RETENTION_DAYS): its record may have been removed",
    "ended": "after the job's last run (remaining_runs reached 0): no run expected",
    "missing": "no record at all: a bug",
}


@dataclasses.dataclass
class Entry:
    at: dt.datetime  # the occurrence, UTC
    local: dt.datetime  # in the job's zone
    fate: str
    detail: str = ""
    run_id: int | None = None
    attempts: int = 0
    lateness: dt.timedelta | None = None
    outcome: str = ""
    cancelled_by: str = ""
    windows: tuple = ()  # the names of today's windows that cover it
    backfilled: int = 0  # backfill runs of this occurrence


@dataclasses.dataclass
class Ledger:
    job: JobDefinition
    start: dt.datetime
    end: dt.datetime
    entries: list
    next_start: dt.datetime | None  # the next page starts here (None: the window is done)
    assumptions: list
    edits: list  # audit entries of the job's definition in the window

    @property
    def missing(self):
        return sum(1 for e in self.entries if e.fate == "missing")


def ledger(job, start, end, now, *, limit=100):
    """The Ledger of `job` for [start, end), at most `limit` (1 to MAX_LIMIT) occurrences. Counts what is missing."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
    if start >= end:
        raise ValueError("end must be after start")
    begin = max(start, job.created_at)
    times, more = _occurrences(job, begin, end, limit)
    runs = _runs(job, begin, times[-1] if more and times else end)
    entries = _entries(job, times, runs, now)
    result = Ledger(job, start, end, entries, times[-1] + US if more else None, _assumptions(job, runs), [])
    result.edits = list(
        AuditEntry.objects.filter(object_type="jobs.jobdefinition", object_id=str(job.pk), at__gte=start, at__lt=end)
        .filter(action__in=("create", "update", "reproject", "pause", "resume", "delete"))
        .order_by("at")[:50]
    )
    metrics.ledger_missing(job.tenant.name, result.missing)
    return result


def _occurrences(job, start, end, limit):
    """(occurrences in [start, end), at most `limit`; whether more follow): jobs.occurrences, any kind, bounded."""
    found = [t for t in occurrences.after(occurrences.Schedule.of(job), start - US, limit + 1) if t < end]
    return found[:limit], len(found) > limit


@dataclasses.dataclass
class _Records:
    by_due: dict  # due_at -> run (origin schedule)
    summaries: list  # skipped rows that stand for several occurrences
    backfills: dict  # due_at -> count
    attempts: dict  # run id -> [Attempt]
    cancellers: dict  # run id -> actor
    off_schedule: list  # runs whose due_at is not an occurrence of the current schedule
    last_run: dt.datetime | None = None  # a job whose remaining_runs is spent: its last scheduled run


def _runs(job, start, end):
    """The records of [start, end]: five queries, whatever the number of occurrences."""
    rows = list(
        Run.objects.filter(job=job, origin__in=(Run.Origin.SCHEDULE, Run.Origin.BACKFILL))
        .filter(
            Q(due_at__gte=start, due_at__lte=end)
            | Q(state=Run.State.SKIPPED, covers_until__gte=start, due_at__lt=start, due_at__gte=start - SUMMARY_REACH)
        )
        .order_by("due_at")
    )
    scheduled = [r for r in rows if r.origin == Run.Origin.SCHEDULE]
    backfills = {}
    for r in rows:
        if r.origin == Run.Origin.BACKFILL:
            backfills[r.due_at] = backfills.get(r.due_at, 0) + 1
    ids = [r.pk for r in scheduled]
    attempts = {}
    for attempt in Attempt.objects.filter(run_id__in=ids).order_by("run_id", "attempt"):
        attempts.setdefault(attempt.run_id, []).append(attempt)
    cancelled = [str(r.pk) for r in scheduled if r.state == Run.State.CANCELLED]
    cancellers = dict(
        AuditEntry.objects.filter(object_type="runs.run", object_id__in=cancelled, action="cancel").values_list(
            "object_id", "actor"
        )
    )
    return _Records(
        by_due={r.due_at: r for r in scheduled},
        summaries=[r for r in scheduled if r.covers_until is not None],
        backfills=backfills,
        attempts=attempts,
        cancellers={int(k): v for k, v in cancellers.items()},
        off_schedule=[],
    )


def _entries(job, times, records, now):
    zone = cron.get_zone(job.time_zone)
    windows = Window.objects.by_job([job])[job.pk]
    implied = set(times)
    records.off_schedule = [
        r for due, r in records.by_due.items() if due not in implied and r.covers_until is None and _inside(due, times)
    ]
    cut = _schedule_began(job, records.off_schedule)
    records.last_run = _last_run(job)
    entries = []
    for at in times:
        entry = Entry(at=at, local=at.astimezone(zone), fate="missing", backfilled=records.backfills.get(at, 0))
        entry.windows = tuple(dict.fromkeys(b.name for b in blackouts.covering(windows, at)))
        run = records.by_due.get(at)
        if run is not None:
            _from_run(entry, run, records, now)
        else:
            _without_run(entry, job, records, now, cut)
        entries.append(entry)
    for run in records.off_schedule:
        entry = Entry(at=run.due_at, local=run.due_at.astimezone(zone), fate="earlier_schedule")
        _from_run(entry, run, records, now)
        entry.detail = f"{run.state}: {FATES['earlier_schedule']}"
        entry.fate = "earlier_schedule"
        entries.append(entry)
    return sorted(entries, key=lambda e: e.at)


def _inside(instant, times):
    return bool(times) and times[0] <= instant <= times[-1]


def _schedule_began(job, off_schedule):
    """When the current schedule began, as far as the records tell (None: as far back as the job)."""
    if not off_schedule:
        return None
    last = max(r.due_at for r in off_schedule)
    edit = (
        AuditEntry.objects.filter(object_type="jobs.jobdefinition", object_id=str(job.pk), action="update", at__gt=last)
        .order_by("at")
        .values_list("at", flat=True)
        .first()
    )
    return edit or last


def _from_run(entry, run, records, now):
    entry.run_id = run.pk
    attempts = records.attempts.get(run.pk, [])
    entry.attempts = len(attempts) or run.attempt
    if attempts:
        entry.lateness = attempts[0].lateness
        entry.outcome = attempts[-1].outcome
    state = run.state
    if state == Run.State.SUCCEEDED:
        entry.fate = "ran"
        entry.detail = "succeeded" + (f" after {entry.attempts} attempts" if entry.attempts > 1 else "")
    elif state == Run.State.RETRY_WAIT:
        entry.fate, entry.detail = "retrying", f"attempt {run.attempt} failed: {run.last_error[:200]}"
    elif state == Run.State.LEASED:
        entry.fate, entry.detail = "running", f"attempt {run.attempt} on {run.worker_id or '?'}"
    elif state == Run.State.DEAD:
        entry.fate, entry.detail = "dead", run.last_error[:200]
    elif state == Run.State.CANCELLED:
        entry.fate, entry.detail = "cancelled", run.reason
        entry.cancelled_by = records.cancellers.get(run.pk, "")
    elif state == Run.State.SKIPPED:
        _skipped(entry, run)
    elif run.available_at > now:
        entry.fate, entry.detail = "not_yet_due", run.reason or f"available at {run.available_at:%Y-%m-%d %H:%M:%S} UTC"
    else:
        entry.fate, entry.detail = "waiting", run.reason or "ready: waiting for a worker"


def _skipped(entry, run):
    entry.fate = "paused" if run.reason.startswith("passed over while") else "skipped"
    entry.detail = run.reason


def _without_run(entry, job, records, now, cut):
    summary = next((r for r in records.summaries if r.due_at <= entry.at <= r.covers_until), None)
    if summary is not None:
        entry.run_id = summary.pk
        _skipped(entry, summary)
    elif records.last_run is not None and entry.at > records.last_run:
        entry.fate, entry.detail = "ended", f"the job's last run was due {records.last_run:%Y-%m-%d %H:%M:%S} UTC"
    elif job.next_due_at is None or entry.at >= job.next_due_at:
        _not_materialized(entry, job, now)
    elif cut is not None and entry.at < cut:
        entry.fate, entry.detail = "before_schedule", f"the schedule was edited at {cut:%Y-%m-%d %H:%M} UTC"
    elif entry.at < retained_since(now):
        entry.fate, entry.detail = "expired", FATES["expired"]
    else:
        entry.fate, entry.detail = "missing", "no run and no skipped record stands for this occurrence"


def _last_run(job):
    """The due time of the last run of a job whose remaining_runs is spent (None otherwise): one query."""
    if job.remaining_runs != 0:
        return None
    runs = Run.objects.filter(job=job, origin=Run.Origin.SCHEDULE).exclude(state=Run.State.SKIPPED)
    return runs.order_by("-due_at").values_list("due_at", flat=True).first()


def retained_since(now):
    """The oldest instant whose records retention surely kept: a day's history goes as a whole, up to a day
    after it passed DUETIME_RETENTION_DAYS (runs/retention.py), so an occurrence before that may be gone."""
    return now - dt.timedelta(days=settings.DUETIME_RETENTION_DAYS + 1)


def _not_materialized(entry, job, now):
    if entry.at > now:
        entry.fate = "not_yet_due"
    elif job.status == JobDefinition.Status.PAUSED or getattr(job.tenant, "paused_at", None):
        entry.fate, entry.detail = "paused", "passed over while paused: recorded skipped when it resumes"
    elif job.status == JobDefinition.Status.CANCELLED:
        entry.fate, entry.detail = "cancelled", "the job was deleted"
    else:
        entry.fate = "not_materialized"


def _words(job):
    try:
        return occurrences.describe(occurrences.Schedule.of(job))
    except (cron.CronError, cron.ZoneError):
        return f"{job.cron_expr or job.schedule_kind}, {job.time_zone}"


def _assumptions(job, records):
    said = [
        f"The job's current schedule ({_words(job)}) is assumed over the whole window, its bounds "
        "(start_at, end_at) included; occurrences before the job was created are not listed.",
        "Maintenance windows are today's: a window added later did not hold earlier occurrences.",
    ]
    if records.off_schedule:
        said.append(
            f"{len(records.off_schedule)} run(s) in the window belong to an earlier schedule: "
            "occurrences before the edit that followed them are not counted missing."
        )
    return said
