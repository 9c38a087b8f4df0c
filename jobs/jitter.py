"""The default jitter: a fixed start offset for every new job whose owner states none.

Schedules written by people pile up at :00 (the portal's heatmap shows the
herd). So a new cron or `every` job whose owner does not state `jitter_seconds` gets
DUETIME_DEFAULT_JITTER_PERCENT (10) % of its schedule's shortest interval (an
`every` job's period),
at most DUETIME_DEFAULT_JITTER_MAX_SECONDS (300): an every-minute job 6 s,
every five minutes 30 s, hourly and slower 300 s. The run's offset inside
that range is `stable_hash(tenant, name) mod jitter_seconds`
(`stable_jitter`): deterministic, the same for every occurrence of
the job, and only ever a delay (a run never starts before its due time).
`at` and on-demand jobs have no interval and get none.

The owner's word wins: `jitter_seconds=0` opts out, any other number is
kept as stated. A jitter Duetime chose is marked (`jitter_is_default`) and
chosen again when the schedule changes, so an hourly job made every-minute
does not keep a 300 s offset. Jobs created before the default keep theirs.

The doors (API, portal, schedules as code) say what the owner stated with
`state(job, seconds)`, None meaning "nothing"; `settle` (called by
jobs.definitions.save_definition, the one save path) fills in the rest.
"""

import hashlib

from django.conf import settings

from jobs import cron
from jobs.choices import ScheduleKind

# Occurrences looked at for the shortest interval: a day of an hourly job, enough for any
# regular schedule; an irregular one (`0,1 * * * *`) shows its shortest gap within a few.
INTERVAL_SAMPLE = 24


def stable_hash(tenant: str, name: str) -> int:
    """A 64-bit hash of (tenant, job name) that never changes between processes or releases."""
    digest = hashlib.sha256(f"{tenant}\x00{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def stable_jitter(tenant: str, name: str, jitter_seconds: int) -> int:
    """The job's fixed offset in [0, jitter_seconds): stable_hash mod jitter_seconds."""
    if jitter_seconds < 0:
        raise ValueError(f"jitter_seconds must be 0 or more, got {jitter_seconds}")
    return stable_hash(tenant, name) % jitter_seconds if jitter_seconds else 0


def shortest_interval(expression, time_zone, now):
    """Seconds between the two closest of the schedule's next occurrences after `now`; None for fewer than two."""
    try:
        times = cron.occurrences(expression, time_zone, now, INTERVAL_SAMPLE)
    except (cron.CronError, cron.ZoneError):
        return None  # validation reports it; no jitter is chosen for a schedule that does not parse
    gaps = [(later - earlier).total_seconds() for earlier, later in zip(times, times[1:])]
    return min(gaps) if gaps else None


def default_for(job, now):
    """The jitter Duetime chooses for `job`'s schedule: a share of its shortest interval, capped; 0 without one."""
    most, share = settings.DUETIME_DEFAULT_JITTER_MAX_SECONDS, settings.DUETIME_DEFAULT_JITTER_PERCENT
    if job.schedule_kind == ScheduleKind.EVERY and job.every_seconds and share:
        return min(most, int(job.every_seconds * share / 100))  # the period is the one interval
    if job.schedule_kind != ScheduleKind.CRON or not job.cron_expr or not share:
        return 0
    interval = shortest_interval(job.cron_expr, job.time_zone, now)
    if interval is None:
        return most
    return min(most, int(interval * share / 100))


def state(job, seconds):
    """Record what the owner stated: None (nothing: Duetime chooses or keeps) or a number of seconds.

    Restating the jitter Duetime chose changes nothing (it stays Duetime's,
    chosen again on a schedule change); any other number is the owner's.
    """
    if seconds is None:
        job.jitter_seconds = None
    elif not (job.jitter_is_default and seconds == job.jitter_seconds):
        job.jitter_seconds, job.jitter_is_default = seconds, False


def settle(job, *, rescheduled, now):
    """Fill in `job.jitter_seconds` where the owner stated none (unsaved; before validation).

    A new job gets the default; an existing one keeps what it has, except a
    jitter Duetime chose, which follows a schedule change.
    """
    chooses = job.jitter_seconds is None and (job.pk is None or job.jitter_is_default)
    follows = job.jitter_is_default and rescheduled
    if chooses or follows:
        job.jitter_seconds, job.jitter_is_default = default_for(job, now), True
    elif job.jitter_seconds is None:
        stored = type(job).objects.filter(pk=job.pk).values_list("jitter_seconds", flat=True).first()
        job.jitter_seconds = stored or 0


def describe(job):
    """What the job's jitter is and who chose it, in words for the API and the portal."""
    seconds = job.jitter_seconds or 0
    offset = stable_jitter(job.tenant.name, job.name, seconds) if job.tenant_id else 0
    if not seconds:
        why = "its schedule has no interval to spread" if job.jitter_is_default else "jitter_seconds is 0"
        return f"no jitter ({why}): runs become available at their due time"
    chosen = (
        f"chosen by Duetime ({settings.DUETIME_DEFAULT_JITTER_PERCENT} % of the schedule's shortest interval, "
        f"at most {settings.DUETIME_DEFAULT_JITTER_MAX_SECONDS} s)"
        if job.jitter_is_default
        else "stated by the owner"
    )
    return f"{seconds} s, {chosen}; this job's runs start {offset} s after their due time"
