"""A job's schedule, whatever its kind, and its occurrences: the one entry point.

Everything that asks "when does this job run" (materialisation, the ledger,
the preview, backfill, windows, a resume's catch-up, the default jitter) asks
here with a `Schedule`, and this module dispatches by kind:

- `cron`: jobs.cron, with its DST rules (docs/dst.md);
- `at`: the one instant `run_at`;
- `every`: `anchor + k * period` for k = 0, 1, 2, ...: the anchor is
  `start_at`, or the Unix epoch (1970-01-01 00:00 UTC) without one, so an
  hourly `every` falls on the hour UTC. The instants are computed from the
  anchor, never from the previous run, so lateness does not shift later runs,
  and the spacing is absolute: a 90-minute period stays 90 minutes across a
  DST change (the local times move by the change instead);
- `none`: no occurrence.

Every kind is bounded by `start_at` (inclusive) and `end_at` (exclusive): no
occurrence outside [start_at, end_at). `remaining_runs` is not a property of
the schedule but a count kept on the job (runs.materialize spends it); the
schedule's occurrences go on after it reaches 0, the job just stops running
them (`ended` says why a job has no next occurrence).

A pure module: no models, no settings, no clock.
"""

import dataclasses
import zoneinfo
from datetime import UTC, datetime, timedelta

from jobs import cron

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
MAX_EVERY_SECONDS = 366 * 86400  # a period longer than a year is a cron or an `at` schedule


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The fields of a job that decide its occurrences (hashable: a materialisation pass keys answers by it)."""

    kind: str
    time_zone: str = "UTC"
    cron_expr: str = ""
    run_at: datetime | None = None
    every_seconds: int | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None

    @classmethod
    def of(cls, job):
        return cls(
            kind=job.schedule_kind,
            time_zone=job.time_zone,
            cron_expr=job.cron_expr or "",
            run_at=job.run_at,
            every_seconds=job.every_seconds,
            start_at=job.start_at,
            end_at=job.end_at,
        )

    @property
    def anchor(self):
        """Where an `every` schedule counts its periods from."""
        return self.start_at or EPOCH

    @property
    def period(self):
        return timedelta(seconds=self.every_seconds)


def after(schedule, instant, count):
    """The next `count` occurrences strictly after the aware `instant`, as increasing UTC datetimes.

    Only occurrences inside [start_at, end_at) come back, so fewer (or none)
    may: past `end_at`, or a cron expression with no run (jobs.cron.occurrences).
    """
    if not isinstance(instant, datetime) or instant.utcoffset() is None:
        raise ValueError(f"instant must be a timezone-aware datetime, got {instant!r}")
    if count <= 0:
        return []
    if schedule.start_at is not None and instant < schedule.start_at:
        instant = schedule.start_at - US  # the bound is inclusive
    found = _unbounded(schedule, instant, count)
    if schedule.end_at is not None:
        found = [t for t in found if t < schedule.end_at]
    return found


def _unbounded(schedule, instant, count):
    if schedule.kind == "cron":
        return cron.occurrences(schedule.cron_expr, schedule.time_zone, instant, count)
    if schedule.kind == "at":
        return [schedule.run_at.astimezone(UTC)] if schedule.run_at and schedule.run_at > instant else []
    if schedule.kind == "every":
        return _every(schedule.anchor, schedule.period, instant, count)
    return []


def _every(anchor, period, instant, count):
    """anchor + k * period for the `count` smallest k >= 0 whose instant is after `instant` (exact: integer µs)."""
    first = 0 if instant < anchor else (instant - anchor) // period + 1
    found = []
    for k in range(first, first + count):
        try:
            found.append((anchor + k * period).astimezone(UTC))
        except OverflowError:  # past the year 9999
            break
    return found


def within(schedule, instant):
    """True when `instant` is inside the schedule's bounds [start_at, end_at)."""
    if schedule.start_at is not None and instant < schedule.start_at:
        return False
    return schedule.end_at is None or instant < schedule.end_at


# ------------------------------------------------------------ for people


def preview(schedule, instant, count):
    """The next `count` occurrences like `after`, each a jobs.cron.Occurrence (UTC, local time, DST note)."""
    zone = cron.get_zone(schedule.time_zone)
    if schedule.kind == "cron":
        start = schedule.start_at - US if schedule.start_at is not None and instant < schedule.start_at else instant
        shown = cron.preview(schedule.cron_expr, schedule.time_zone, start, count)
        return [o for o in shown if within(schedule, o.at_utc)]
    times = after(schedule, instant, count)
    if schedule.kind != "every":
        return [cron.Occurrence(t, t.astimezone(zone), "") for t in times]
    return [cron.Occurrence(t, t.astimezone(zone), _every_note(schedule, t, zone)) for t in times]


def _every_note(schedule, at, zone):
    """When the zone's offset changed since the previous occurrence: the spacing is kept, the local time moves."""
    if at - schedule.period < schedule.anchor:
        return ""
    previous = (at - schedule.period).astimezone(zone)
    local = at.astimezone(zone)
    if previous.utcoffset() == local.utcoffset():
        return ""
    return (
        f"clocks changed since the previous run ({previous:%H:%M %Z}→{local:%H:%M %Z}): still "
        f"{period_words(schedule.every_seconds)} after it, as every period is"
    )


def period_words(seconds):
    """ "90 minutes", "2 hours", "1 day", "45 s"."""
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' * (n != 1)}"
    return f"{seconds} s"


def describe(schedule):
    """The schedule in plain words, bounds included, e.g. "every 90 minutes from 2026-03-28 00:00 CET"."""
    zone = cron.get_zone(schedule.time_zone)
    if schedule.kind == "cron":
        words = cron.describe(schedule.cron_expr, schedule.time_zone)
    elif schedule.kind == "at" and schedule.run_at:
        words = f"once at {_local(schedule.run_at, zone)}, {zone.key}"
    elif schedule.kind == "every":
        words = f"every {period_words(schedule.every_seconds)}"
        words += f" from {_local(schedule.start_at, zone)}" if schedule.start_at else " (counted from 1970-01-01 UTC)"
        words += f", {zone.key}"
    else:
        return "on demand only"
    if schedule.start_at and schedule.kind != "every":
        words += f", not before {_local(schedule.start_at, zone)}"
    if schedule.end_at:
        words += f", until before {_local(schedule.end_at, zone)}"
    return words


def _local(instant, zone: zoneinfo.ZoneInfo):
    shape = "%Y-%m-%d %H:%M %Z" if instant.second == instant.microsecond == 0 else "%Y-%m-%d %H:%M:%S %Z"
    return f"{instant.astimezone(zone):{shape}}"


def ended(job):
    """Why an active scheduled job has no next occurrence, or None while it has one (or is not scheduled).

    `remaining_runs`: it ran its count; `at`: its one instant is materialised;
    `end_at`: its schedule reached its end; `no_occurrence`: its schedule has none left (a cron expression
    that never matches again, a start after the end).
    """
    if job.schedule_kind == "none" or job.next_due_at is not None or job.status != "active":
        return None
    if job.remaining_runs == 0:
        return "remaining_runs"
    if job.schedule_kind == "at":
        return "at"
    if job.end_at is not None:
        return "end_at"
    return "no_occurrence"
