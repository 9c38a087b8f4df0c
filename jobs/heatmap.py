"""Scheduled starts per minute across a tenant's jobs, and how much jitter would flatten them.

Cron schedules herd: most people write `0 * * * *` or `0 2 * * *`, so
minute :00 gets every job at once while the other 59 minutes idle. `heatmap()`
counts the starts (due time plus each job's fixed jitter offset) of the next
24 hours per UTC minute, of every active scheduled job whatever its kind
(`cron`, `every`, `at`) and inside its bounds, finds the busiest minute of the
hour, and `advice()` says how many jobs herd there and which jitter would
spread them. An `every` job herds only when its period is whole hours (its
starts then fall on one minute of every hour); a shorter period spreads its
starts by design.
"""

import dataclasses
import datetime as dt
import math
from collections import Counter, defaultdict

from jobs import cron, jitter, occurrences

MINUTES = 24 * 60


@dataclasses.dataclass
class Heatmap:
    start: dt.datetime  # the UTC hour the grid starts at
    counts: list  # MINUTES counts, index = minutes after start
    herd_jobs: dict  # minute of the hour -> jobs without jitter starting then

    def grid(self):
        """24 rows (hours) of 60 counts."""
        return [self.counts[h * 60 : (h + 1) * 60] for h in range(24)]

    def by_minute_of_hour(self):
        totals = [0] * 60
        for i, n in enumerate(self.counts):
            totals[i % 60] += n
        return totals


def heatmap(jobs, now, *, held=None):
    """Starts in the 24 hours from the hour of `now`, per minute (UTC). `jobs`: active scheduled jobs of any kind.

    Each kind counts its starts inside its bounds [start_at, end_at) (a due
    time outside them is not a start): `cron` through `_starts`, `every`
    arithmetically (`_every`: never one instant at a time below a minute's
    period), `at` its one instant. A job that ran its count
    (`remaining_runs == 0`, occurrences.ended's "remaining_runs") counts
    nothing; the other reasons a job ends (its `end_at` passed, its `at`
    instant gone) leave no due time inside the bounds anyway. `on demand`
    (`none`) jobs have no schedule and count nothing.

    `held(job, instants) -> instants`: where the job's maintenance windows put
    these starts (a skipped one left out, a held one at its window's end), for
    the jobs it knows windows of (`held.jobs`, a set of pks); the portal's page
    passes calendars' rules, which this module does not import.
    """
    start = now.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    counts = [0] * MINUTES
    crons, timed = defaultdict(list), defaultdict(list)
    windowed = getattr(held, "jobs", set()) if held else set()
    for job in jobs:
        if job.remaining_runs == 0:
            continue  # ended: it ran its count
        # A job with windows of its own (or its tenant's) is counted alone: its starts are its own.
        alone = job.pk if job.pk in windowed else None
        bounds = (job.start_at, job.end_at)
        if job.schedule_kind == "cron":
            crons[(job.cron_expr, job.time_zone, bounds, alone)].append(job)
        elif job.schedule_kind in ("every", "at") and (job.every_seconds or job.schedule_kind == "at"):
            shift = jitter.stable_jitter(job.tenant.name, job.name, job.jitter_seconds)
            timed[(job.schedule_kind, job.every_seconds, job.run_at, bounds, shift, alone)].append(job)
    herd = defaultdict(set)
    for (expr, zone, (first, end), alone), members in crons.items():
        try:
            minutes = _starts(expr, zone, start)
        except (cron.CronError, cron.ZoneError):
            continue
        if first is not None or end is not None:
            schedule = occurrences.Schedule.of(members[0])
            minutes = [m for m in minutes if occurrences.within(schedule, start + dt.timedelta(minutes=m))]
        if alone is not None:
            minutes = _moved(members[0], minutes, start, held)
        offsets = Counter()
        for job in members:
            offsets[jitter.stable_jitter(job.tenant.name, job.name, job.jitter_seconds) // 60] += 1
        unjittered = [job.pk for job in members if not job.jitter_seconds]
        for base in minutes:
            for shift, n in offsets.items():
                if base + shift < MINUTES:
                    counts[base + shift] += n
            if unjittered:
                herd[base % 60].update(unjittered)
    for (kind, seconds, _at, _bounds, shift, alone), members in timed.items():
        schedule = occurrences.Schedule.of(members[0])
        found = _timed(schedule, start, shift, held if alone is not None else None, members[0])
        # An `every` job's starts are spread by design: it herds only when they all fall on one minute of
        # the hour (a period of whole hours, like an hourly cron); an `at` job's one start does.
        coincide = kind == "at" or seconds % 3600 == 0
        unjittered = [job.pk for job in members if not job.jitter_seconds] if coincide else []
        for minute, n in found.items():
            counts[minute] += n * len(members)
            if unjittered:
                herd[minute % 60].update(unjittered)
    return Heatmap(start, counts, {m: len(ids) for m, ids in herd.items()})


# Due instants of one windowed `every` job passed through `held` (a 1 s period has 86,400 a day);
# past them, its starts are counted arithmetically, as if no window held them.
HELD_MAX = 10_000
SECOND = 1_000_000  # µs
MINUTE = 60 * SECOND


def _timed(schedule, start, shift, held, job):
    """{minute index: starts} of an `every` or `at` schedule started `shift` seconds after each due time."""
    grid_end = start + dt.timedelta(minutes=MINUTES)
    offset = dt.timedelta(seconds=shift)
    if schedule.kind == "at":
        due = schedule.run_at
        instants = [due] if occurrences.within(schedule, due) else []
        if held is not None and instants:
            instants = held(job, instants)
        return Counter(_minute(t + offset, start) for t in instants if start <= t + offset < grid_end)
    if held is None:
        return _every(schedule, start, shift)
    # Windows: the due instants whose start falls in the 24 hours go through `held`, at most HELD_MAX.
    listed = occurrences.after(schedule, start - offset - occurrences.US, HELD_MAX)
    listed = [t for t in listed if t + offset < grid_end]
    found = Counter(_minute(t + offset, start) for t in held(job, listed) if start <= t + offset < grid_end)
    if len(listed) == HELD_MAX:  # the rest of the day, counted without windows
        found.update(_every(schedule, start, shift, after=listed[-1]))
    return found


def _every(schedule, start, shift, after=None):
    """{minute index: starts} of anchor + k * period (k >= 0) inside the bounds, each started `shift` s late.

    Exact, in integer microseconds from `start`. A period of a minute or more
    has at most 1,440 starts a day, listed one by one; a shorter one counts
    each minute's starts arithmetically (1,441 subtractions, whatever the
    period: 86,400 starts a day at 1 s are never listed). `after`: only due
    times after this instant.
    """
    period = schedule.every_seconds * SECOND
    anchor = _us(schedule.anchor, start)
    late = shift * SECOND
    k_min = 0  # k >= 0: nothing before the anchor
    if schedule.start_at is not None:
        k_min = max(k_min, _ceil(_us(schedule.start_at, start) - anchor, period))
    if after is not None:
        k_min = max(k_min, (_us(after, start) - anchor) // period + 1)
    k_end = None if schedule.end_at is None else _ceil(_us(schedule.end_at, start) - anchor, period)

    def starts_before(t):  # how many starts are before t (µs from `start`)
        k = _ceil(t - anchor - late, period)
        return max(0, (k if k_end is None else min(k_end, k)) - k_min)

    if period >= MINUTE:
        first = max(k_min, _ceil(-anchor - late, period))
        last = _ceil(MINUTES * MINUTE - anchor - late, period)
        if k_end is not None:
            last = min(last, k_end)
        return Counter((anchor + k * period + late) // MINUTE for k in range(first, last))
    before = [starts_before(m * MINUTE) for m in range(MINUTES + 1)]
    return {m: before[m + 1] - before[m] for m in range(MINUTES) if before[m + 1] != before[m]}


def _us(instant, start):
    return (instant - start) // dt.timedelta(microseconds=1)


def _ceil(a, b):
    return -(-a // b)


def _minute(instant, start):
    return int((instant - start) / dt.timedelta(minutes=1))


def _moved(job, minutes, start, held):
    instants = held(job, [start + dt.timedelta(minutes=m) for m in minutes])
    return sorted(
        int((t - start) / dt.timedelta(minutes=1))
        for t in instants
        if start <= t < start + dt.timedelta(minutes=MINUTES)
    )


def _starts(expr, zone, start):
    """Minutes after `start` (0 to 1439) at which `expr` fires in `zone`.

    A wildcard schedule fires at every real minute whose local wall time
    matches (docs/dst.md), so scanning the day's 1,440 UTC minutes is exact
    and much cheaper than listing up to 1,440 occurrences; a fixed schedule
    fires a few times a day and goes through cron.occurrences, which applies
    the DST moves.
    """
    spec = cron._parse(expr)  # the parsed fields: the cron module's own parser
    if not spec.wildcard:
        end = start + dt.timedelta(minutes=MINUTES)
        most = len(spec.values[0]) * len(spec.values[1]) * 2 + 2  # a day's worth, DST moves included
        times = cron.occurrences(expr, zone, start - dt.timedelta(microseconds=1), most)
        return [int((t - start) / dt.timedelta(minutes=1)) for t in times if t < end]
    tz = cron.get_zone(zone)
    minute, hour, day, month, weekday = (frozenset(v) for v in spec.values)
    found = []
    for i in range(MINUTES):
        wall = (start + dt.timedelta(minutes=i)).astimezone(tz)
        if wall.minute not in minute or wall.hour not in hour or wall.month not in month:
            continue
        dom, dow = wall.day in day, (wall.weekday() + 1) % 7 in weekday
        if (dom or dow) if spec.days_or else (dom and dow):
            found.append(i)
    return found


def advice(hm):
    """Plain words about the busiest minute of the hour and the jitter that would flatten it."""
    per_minute = hm.by_minute_of_hour()
    total = sum(per_minute)
    if not total:
        return {"peak_minute": None, "text": "No scheduled starts in the next 24 hours.", "suggested_jitter_seconds": 0}
    peak = max(range(60), key=lambda m: per_minute[m])
    others = [n for m, n in enumerate(per_minute) if m != peak]
    typical = max(1.0, sum(others) / len(others) / 24)  # starts per minute per hour, elsewhere
    herd = hm.herd_jobs.get(peak, 0)
    peak_per_hour = per_minute[peak] / 24
    ratio = per_minute[peak] / max(1.0, total / 60)
    text = (
        f"The busiest minute is :{peak:02d} with {per_minute[peak]} starts in the next 24 hours "
        f"({ratio:.1f}× an even spread)."
    )
    if herd and ratio >= 2:
        minutes = min(60, math.ceil(herd / typical))
        seconds = min(3600, minutes * 60)
        text += (
            f" {herd} job(s) without jitter start at :{peak:02d}"
            f"{' (the top-of-the-hour herd)' if peak == 0 else ''}. Setting jitter_seconds={seconds} on them would spread "
            f"that herd over {minutes} minute(s): about {math.ceil(peak_per_hour / minutes)} start(s) a minute instead of "
            f"{math.ceil(peak_per_hour)}."
        )
        return {"peak_minute": peak, "text": text, "suggested_jitter_seconds": seconds, "herd_jobs": herd}
    text += " Starts are spread well enough; no jitter needed."
    return {"peak_minute": peak, "text": text, "suggested_jitter_seconds": 0, "herd_jobs": herd}
