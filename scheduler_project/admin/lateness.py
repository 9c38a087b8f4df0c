"""Lateness percentiles as the portal shows them, read from the rollups (runs.rollups).

Lateness is start − due of first attempts. The job list's p99 column, the job
page and the lateness dashboard all summarise rollup rows here, never raw
attempts, so they stay fast with millions of runs.
"""

import datetime as dt

from runs.models import JobHour
from runs.rollups import merge, percentile

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
