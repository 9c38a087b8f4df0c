"""Scheduled starts per minute across a tenant's jobs, and how much jitter would flatten them.

Cron schedules herd: most people write `0 * * * *` or `0 2 * * *`, so
minute :00 gets every job at once while the other 59 minutes idle. `heatmap()`
counts the starts (due time plus each job's fixed jitter offset) of the next
24 hours per UTC minute, finds the busiest minute of the hour, and `advice()`
says how many jobs herd there and which jitter would spread them.
"""

import dataclasses
import datetime as dt
import math
from collections import Counter, defaultdict

from jobs import cron, jitter

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
    """Starts in the 24 hours from the hour of `now`, per minute (UTC). `jobs`: active cron jobs.

    `held(job, instants) -> instants`: where the job's maintenance windows put
    these starts (a skipped one left out, a held one at its window's end), for
    the jobs it knows windows of (`held.jobs`, a set of pks); the portal's page
    passes calendars' rules, which this module does not import.
    """
    start = now.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    counts = [0] * MINUTES
    groups = defaultdict(list)
    windowed = getattr(held, "jobs", set()) if held else set()
    for job in jobs:
        # A job with windows of its own (or its tenant's) is counted alone: its starts are its own.
        groups[(job.cron_expr, job.time_zone, job.pk if job.pk in windowed else None)].append(job)
    herd = defaultdict(set)
    for (expr, zone, alone), members in groups.items():
        try:
            minutes = _starts(expr, zone, start)
        except (cron.CronError, cron.ZoneError):
            continue
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
    return Heatmap(start, counts, {m: len(ids) for m, ids in herd.items()})


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
