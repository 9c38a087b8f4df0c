"""Rollups of finished attempts, so dashboards stay fast with millions of runs.

The portal never computes a percentile over raw attempts: `tick(now)` folds
attempts written since its cursor into per-tenant minute rows and per-job
hour rows (counts by outcome, and a lateness histogram of first attempts),
kept RETENTION, and per-job day rows (the hours added up), kept
DAY_RETENTION (400 days: long after runs.retention dropped the runs), and
the dashboards read those few hundred rows. It runs as one of the
scheduler's periodic steps (runs.scheduler.STEPS), never on the claim or
complete paths.

Exactly once: the cursor row is locked for the whole pass, and rows and cursor
move in one transaction, so two scheduler nodes never count an attempt twice
and a crash halfway counts nothing. Attempts are read in id order, skipping
those that ended less than `SETTLE` ago: an attempt id is taken when its row
is inserted, and a completion still committing could otherwise be passed
over by the cursor. (One held open longer than SETTLE is missed by the
rollup; the run's own history stays exact.)

Lateness of a run is the time from when it could first have started to its
first attempt's start: from its available time (due plus jitter), or from its
creation when it was created after that (a one-off `at` in the past, a
backfilled occurrence): a run cannot be late for a time before it existed.

Histograms: lateness in milliseconds falls in log-spaced bins 25 % wide, so a
percentile read back is within about 12 % of the true value, whatever the
volume. Bin 0 holds lateness under 1 ms.

The rollup tables (RollupCursor, TenantMinute, JobHour, JobDay) are models of
runs/models.py; this module fills and prunes them, and reads them back as
lateness percentiles (`summary`, `job_lateness`, `jobs_lateness`,
`tenant_lateness`) for the portal's pages and the API's stats alike.
"""

import datetime as dt
import math

from django.db import transaction

from runs import sql
from runs.models import Attempt, JobDay, JobHour, RollupCursor, TenantMinute

BATCH = 20_000
SETTLE = dt.timedelta(seconds=2)
RETENTION = dt.timedelta(days=8)
# Per-job days outlive the runs (runs.retention drops those after DUETIME_RETENTION_DAYS): the job page's history.
DAY_RETENTION = dt.timedelta(days=400)
GROWTH = 1.25
MAX_BIN = 120  # 1.25**119 ms is far beyond any lateness (about 10^11 ms)
OUTCOMES = ("succeeded", "failed", "timed_out", "lease_expired", "stale")


def lateness_bin(ms):
    if ms < 1:
        return 0
    return min(MAX_BIN, 1 + int(math.log(ms) / math.log(GROWTH)))


def bin_value(index):
    """A bin's representative lateness in ms: the geometric middle of its bounds."""
    if index == 0:
        return 0.0
    return GROWTH ** (index - 1) * math.sqrt(GROWTH)


def percentile(histogram, q, cap=None):
    """The q-th percentile (0 < q <= 100) in ms of a {bin: count} histogram; None if empty.

    `cap` (the largest lateness seen) keeps a percentile from exceeding reality.
    """
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = math.ceil(total * q / 100), 0
    for index in sorted(histogram, key=int):
        seen += histogram[index]
        if seen >= rank:
            value = bin_value(int(index))
            return min(value, cap) if cap is not None else value
    return None


def merge(into, histogram):
    for index, count in histogram.items():
        key = str(index)
        into[key] = into.get(key, 0) + count
    return into


def _floor(at, unit):
    if unit == "minute":
        return at.replace(second=0, microsecond=0)
    return at.replace(minute=0, second=0, microsecond=0)


def _blank():
    return {
        "first_attempts": 0,
        "lateness_ms_sum": 0,
        "lateness_ms_max": 0,
        "histogram": {},
        **dict.fromkeys(OUTCOMES, 0),
    }


def fold(groups):
    """Aggregate the fold_attempts groups into ({(tenant, minute): counts}, {(job, tenant, hour): counts}).

    A group is the attempts of one tenant and job that started in one minute
    and ended in one minute with one outcome (and, for first attempts, one
    lateness bin): its lateness counts where it started, its outcome where it ended.
    """
    minutes, hours = {}, {}
    for tenant, job, started, ended, outcome, bin_, attempts, first, ms_sum, ms_max, _last in groups:
        started, ended = sql.aware(started), sql.aware(ended)
        if first:
            for bucket in (
                minutes.setdefault((tenant, _floor(started, "minute")), _blank()),
                hours.setdefault((job, tenant, _floor(started, "hour")), _blank()),
            ):
                bucket["first_attempts"] += first
                bucket["lateness_ms_sum"] += int(ms_sum)
                bucket["lateness_ms_max"] = max(bucket["lateness_ms_max"], int(ms_max))
                merge(bucket["histogram"], {bin_: first})
        if outcome in OUTCOMES:
            minutes.setdefault((tenant, _floor(ended, "minute")), _blank())[outcome] += attempts
            hours.setdefault((job, tenant, _floor(ended, "hour")), _blank())[outcome] += attempts
    return minutes, hours


def by_day(hours):
    """{(job, tenant, day): counts} from folded hours: a day's counts are its hours' (UTC days)."""
    days = {}
    for (job, tenant, hour), counts in hours.items():
        day = days.setdefault((job, tenant, hour.replace(hour=0)), _blank())
        day["first_attempts"] += counts["first_attempts"]
        day["lateness_ms_sum"] += counts["lateness_ms_sum"]
        day["lateness_ms_max"] = max(day["lateness_ms_max"], counts["lateness_ms_max"])
        merge(day["histogram"], counts["histogram"])
        for outcome in OUTCOMES:
            day[outcome] += counts[outcome]
    return days


def _store(model, keys, folded, key_fields):
    """Add `folded` counts into existing rows of `model`, creating the missing ones."""
    lookup = {f"{key_fields[0]}_id__in": {k[0] for k in keys}, f"{key_fields[-1]}__in": {k[-1] for k in keys}}
    existing = {}
    for row in model.objects.select_for_update().filter(**lookup):
        key = tuple(getattr(row, f"{f}_id") for f in key_fields[:-1]) + (getattr(row, key_fields[-1]),)
        existing[key] = row
    fresh, changed = [], []
    for key, counts in folded.items():
        row = existing.get(key)
        if row is None:
            ids = {f"{f}_id": v for f, v in zip(key_fields[:-1], key[:-1])}
            fresh.append(model(**ids, **{key_fields[-1]: key[-1]}, **counts))
            continue
        row.first_attempts += counts["first_attempts"]
        row.lateness_ms_sum += counts["lateness_ms_sum"]
        row.lateness_ms_max = max(row.lateness_ms_max, counts["lateness_ms_max"])
        row.histogram = merge(dict(row.histogram), counts["histogram"])
        for outcome in OUTCOMES:
            setattr(row, outcome, getattr(row, outcome) + counts[outcome])
        changed.append(row)
    model.objects.bulk_create(fresh, batch_size=1000)
    fields = ["first_attempts", "lateness_ms_sum", "lateness_ms_max", "histogram", *OUTCOMES]
    model.objects.bulk_update(changed, fields, batch_size=1000)


def _start_cursor(now):
    """Where a first pass starts: about the first attempt of the retention window, not all of
    history. Attempt ids grow with time, so a binary search over the primary key finds it in
    a few dozen index probes, however long the table."""
    cutoff = now - RETENTION
    low = Attempt.objects.order_by("id").values_list("id", flat=True).first()
    high = Attempt.objects.order_by("-id").values_list("id", flat=True).first()
    if low is None:
        return 0
    while low < high:
        middle = (low + high) // 2
        row = Attempt.objects.filter(id__gte=middle).order_by("id").values_list("id", "started_at").first()
        if row[1] < cutoff:
            low = row[0] + 1
        else:
            high = middle
    return low - 1


def fold_attempts(after_id, now, batch):
    """The fold_attempts groups of the attempts after `after_id` that have settled (at most `batch`).

    Aggregated by the database: the scheduler reads a few hundred groups, not
    every attempt (folding 20,000 attempts in Python cost it about 0.6 s of CPU).
    """
    params = {
        "after": after_id,
        "batch": batch,
        "now": now,
        "settle": SETTLE.total_seconds(),
        "max_bin": MAX_BIN,
        "growth": GROWTH,
    }
    return sql.execute("fold_attempts", params)


def tick(now, *, batch=BATCH):
    """Fold the next attempts into the rollups. Returns how many attempts it folded in."""
    with transaction.atomic():
        cursor = RollupCursor.objects.select_for_update().filter(name="attempts").first()
        if cursor is None:
            RollupCursor.objects.bulk_create(
                [RollupCursor(name="attempts", last_id=_start_cursor(now))], ignore_conflicts=True
            )
            cursor = RollupCursor.objects.select_for_update().get(name="attempts")
        groups = fold_attempts(cursor.last_id, now, batch)
        if not groups:
            return 0
        minutes, hours = fold(groups)
        days = by_day(hours)
        _store(TenantMinute, list(minutes), minutes, ("tenant", "minute"))
        _store(JobHour, list(hours), hours, ("job", "tenant", "hour"))
        _store(JobDay, list(days), days, ("job", "tenant", "day"))
        RollupCursor.objects.filter(name="attempts").update(last_id=groups[0][-1])
    prune(now)
    return sum(group[6] for group in groups)


_last_prune = {"at": None}


def prune(now, *, every=dt.timedelta(minutes=10)):
    """Drop rollup rows past the retention, at most every ten minutes. Returns rows deleted."""
    if _last_prune["at"] and now - _last_prune["at"] < every:
        return 0
    _last_prune["at"] = now
    cutoff = now - RETENTION
    deleted, _ = TenantMinute.objects.filter(minute__lt=cutoff).delete()
    more, _ = JobHour.objects.filter(hour__lt=cutoff).delete()
    days, _ = JobDay.objects.filter(day__lt=now - DAY_RETENTION).delete()
    return deleted + more + days


# ------------------------------------------------------- reading them back

QUANTILES = (50, 95, 99)
DAY = dt.timedelta(days=1)


def summary(rows):
    """{"p50", "p95", "p99" (ms, None when empty), "count", "max"} of rollup rows of any grain."""
    histogram, count, top = {}, 0, 0
    for row in rows:
        merge(histogram, row.histogram)
        count += row.first_attempts
        top = max(top, row.lateness_ms_max)
    out = {f"p{q}": percentile(histogram, q, cap=top) for q in QUANTILES}
    out["count"] = count
    out["max"] = top if count else None
    return out


def job_lateness(job, now, window=DAY):
    """p50/p95/p99 (ms) of the first attempts of `job` started in the last `window`."""
    since = (now - window).replace(minute=0, second=0, microsecond=0)
    return summary(
        JobHour.objects.filter(job=job, hour__gte=since).only("histogram", "first_attempts", "lateness_ms_max")
    )


def jobs_lateness(job_ids, now, window=DAY):
    """{job id: p50/p95/p99 summary} for many jobs in one query (the job list's column)."""
    since = (now - window).replace(minute=0, second=0, microsecond=0)
    rows = {}
    for row in JobHour.objects.filter(job_id__in=list(job_ids), hour__gte=since).only(
        "job_id", "histogram", "first_attempts", "lateness_ms_max"
    ):
        rows.setdefault(row.job_id, []).append(row)
    return {job_id: summary(rows.get(job_id, [])) for job_id in job_ids}


def tenant_lateness(tenant_id, now, window=DAY):
    """p50/p95/p99 (ms) of a tenant's first attempts in the last `window`, from its minute rows."""
    since = (now - window).replace(second=0, microsecond=0)
    return summary(
        TenantMinute.objects.filter(tenant_id=tenant_id, minute__gte=since).only(
            "histogram", "first_attempts", "lateness_ms_max"
        )
    )
