"""The numbers behind the dashboards, each read so it stays fast with 10 million runs.

- Lateness percentiles come from the rollups (runs.rollups, which also
  summarises them), never from raw attempts.
- Live states (scheduled, ready, leased, retry_wait) are counted through the
  partial indexes run_claimable and run_leased_by_owner, which hold only
  unfinished runs, with the portal's one capped count
  (scheduler_project.admin.counts: "100,000+").
- Finished states over the last 24 hours come from the rollups (succeeded),
  the dead letters (dead) and run_skipped_cancelled (cancelled, skipped).
- Dead letters per job read deadletter_by_job and deadletter_open_by_tenant.

Every function takes the tenant (already scoped by the caller through
scheduler_project.admin.scoping) and `now`.
"""

import datetime as dt

from django.db.models import Count, Min, Q

from dlq.models import DeadLetter
from jobs.models import SYSTEM_TENANT, JobDefinition, Tenant
from runs.models import Attempt, JobDay, Run, TenantMinute
from runs.rollups import summary
from scheduler_project.admin.counts import capped_count

HOUR, DAY = dt.timedelta(hours=1), dt.timedelta(days=1)


def lateness_series(tenant, now, window, step):
    """Points of p50/p95/p99 lateness (ms) for `tenant`, one per `step` over the last `window`.

    Returns {"points": [{"at", "p50", "p95", "p99", "count"}], "overall": {...}}.
    """
    start = (now - window).replace(second=0, microsecond=0)
    rows = list(
        TenantMinute.objects.filter(tenant=tenant, minute__gte=start, minute__lte=now)
        .only("minute", "histogram", "first_attempts", "lateness_ms_max")
        .order_by("minute")
    )
    buckets = {}
    for row in rows:
        index = int((row.minute - start) / step)
        buckets.setdefault(index, []).append(row)
    points = []
    for index in range(int(window / step) + 1):
        points.append({"at": start + index * step, **summary(buckets.get(index, []))})
    return {"points": points, "overall": summary(rows)}


def outcomes(tenant, now, window):
    """Attempt outcomes of `tenant` in the last `window`, from the rollups."""
    rows = TenantMinute.objects.filter(tenant=tenant, minute__gte=now - window)
    totals = dict.fromkeys(("succeeded", "failed", "timed_out", "lease_expired", "stale"), 0)
    for row in rows.only(*totals):
        for key in totals:
            totals[key] += getattr(row, key)
    return totals


def state_counts(tenant, now):
    """Runs by state (the run states of docs/api.md) plus the derived `ready`.

    Unfinished states are counted now, through the indexes of unfinished runs.
    Finished ones cover the last 24 hours, each from where it is cheapest:
    succeeded from the rollups (a run succeeds once, with its last attempt),
    dead from the dead letters written when runs died, cancelled and skipped
    (few) among the runs due in that window (index run_skipped_cancelled).
    """
    runs = Run.objects.filter(tenant=tenant)
    live = {}
    for state in ("scheduled", "retry_wait"):
        live[state] = capped_count(runs.filter(state=state))
    live["ready"] = capped_count(runs.ready(now))
    live["leased"] = capped_count(runs.filter(state="leased"))
    finished = {
        "succeeded": (outcomes(tenant, now, DAY)["succeeded"], False),
        "dead": (_dead_letters(tenant, now - DAY).count(), False),
    }
    for state in ("cancelled", "skipped"):
        finished[state] = capped_count(runs.filter(state=state, due_at__gte=now - DAY, due_at__lte=now))
    return {"live": live, "finished": finished}


def _dead_letters(tenant, since):
    """A tenant's dead letters since `since`, read per job through deadletter_by_job (job, dead_at)."""
    job_ids = list(JobDefinition.objects.filter(tenant=tenant).values_list("pk", flat=True))
    return DeadLetter.objects.filter(job_id__in=job_ids, dead_at__gte=since)


def backlog_by_queue(tenant, now):
    """Per queue: ready runs (capped) and the age of the oldest one, one index probe per priority."""
    queues = set(JobDefinition.objects.filter(tenant=tenant).values_list("queue", flat=True).distinct())
    rows = []
    for queue in sorted(queues):
        count, capped, oldest = 0, False, None
        for priority in (0, 1, 2):
            ready = Run.objects.ready(now).filter(tenant=tenant, queue=queue, priority=priority)
            n, cut = capped_count(ready)
            count, capped = count + n, capped or cut
            first = ready.order_by("available_at").values_list("available_at", flat=True).first()
            if first and (oldest is None or first < oldest):
                oldest = first
        rows.append(
            {"queue": queue, "ready": count, "capped": capped, "oldest_age": (now - oldest) if oldest else None}
        )
    return rows


def lease_expiries(tenant, now):
    """Leases lost (expired or timed out) in the last hour and day, and leases overdue right now."""
    hour, day = outcomes(tenant, now, HOUR), outcomes(tenant, now, DAY)
    overdue = Run.objects.filter(tenant=tenant, state="leased", lease_expires_at__lt=now).count()
    return {
        "hour": hour["lease_expired"] + hour["timed_out"],
        "day": day["lease_expired"] + day["timed_out"],
        "overdue": overdue,
    }


def dead_letters_by_job(tenant, now, limit=20):
    """Jobs with dead letters: new in the last 24 h and still open, most first; open ones in all (capped)."""
    recent = (
        _dead_letters(tenant, now - DAY)
        .values("job", "job__name")
        .annotate(new=Count("id"), open=Count("id", filter=Q(replayed_at=None, discarded_at=None)))
        .order_by("-new")[:limit]
    )
    open_letters = capped_count(DeadLetter.objects.filter(tenant=tenant, replayed_at=None, discarded_at=None))
    return {"jobs": list(recent), "open": str(open_letters)}


def dead_letters_per_hour(tenant, now):
    """New dead letters per hour over the last day (DLQ growth)."""
    start = (now - DAY).replace(minute=0, second=0, microsecond=0)
    counts = [0] * 25
    for at in _dead_letters(tenant, start).order_by().values_list("dead_at", flat=True)[:100_000]:
        counts[min(24, int((at - start) / HOUR))] += 1
    return [{"at": start + i * HOUR, "count": c} for i, c in enumerate(counts)]


def job_days(job, now, days=400):
    """One point per UTC day of `job`'s last `days` (JobDay rollups, kept 400 days: longer than the runs).

    Returns {"points": [{"at", "p50", "p95", "p99", "count", "succeeded", "failed"}], "overall": {...}};
    `failed` counts every attempt that did not succeed.
    """
    start = (now - dt.timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = {row.day: row for row in JobDay.objects.filter(job=job, day__gte=start, day__lte=now)}
    points = []
    for index in range(days):
        at = start + dt.timedelta(days=index)
        row = rows.get(at)
        failed = row.failed + row.timed_out + row.lease_expired + row.stale if row else 0
        points.append(
            {"at": at, **summary([row] if row else []), "succeeded": row.succeeded if row else 0, "failed": failed}
        )
    overall = summary(rows.values())
    overall["succeeded"] = sum(p["succeeded"] for p in points)
    overall["failed"] = sum(p["failed"] for p in points)
    return {"points": points, "overall": overall}


def job_history(job, limit=30):
    """The newest runs of `job` (index run_history_by_job)."""
    return list(Run.objects.filter(job=job).order_by("-id")[:limit])


def last_failure(job, window=500):
    """The newest of `job`'s last `window` runs that failed (dead, or with an
    attempt that did not succeed), with its attempts; None if none did."""
    recent = list(Run.objects.filter(job=job).order_by("-id").values_list("id", "state")[:window])
    ids = [run_id for run_id, _ in recent]
    failed = (
        Attempt.objects.filter(run_id__in=ids)
        .exclude(outcome="succeeded")
        .order_by("-run_id")
        .values_list("run_id", flat=True)
        .first()
    )
    dead = next((run_id for run_id, state in recent if state == "dead"), None)
    run_id = max(filter(None, (failed, dead)), default=None)
    if run_id is None:
        return None
    run = Run.objects.get(pk=run_id)
    return {"run": run, "attempts": list(Attempt.objects.filter(run=run).order_by("attempt"))}


def tenants_at_a_glance(tenant_ids, now, limit=100):
    """Every tenant of `tenant_ids` (None: all) that has something to look at, worst first.

    Per tenant: ready runs and the age of the oldest one (now), p99 lateness
    and failed or lost attempts over the last hour (rollups), and dead letters
    new in the last 24 hours. Quiet tenants (none of these) are left out, so
    the page costs what the active tenants cost, not what all of them do.
    Sorted by the oldest ready run's age, then p99 lateness, then new dead
    letters: the tenant whose work waits longest comes first.
    """

    def scoped(queryset, field="tenant_id"):
        return queryset if tenant_ids is None else queryset.filter(**{f"{field}__in": tenant_ids})

    rows = {}

    def row(tenant_id):
        return rows.setdefault(
            tenant_id, {"tenant_id": tenant_id, "ready": 0, "oldest_age": None, "dead_new": 0, "failed_hour": 0}
        )

    ready = scoped(Run.objects.ready(now)).order_by().values("tenant_id")
    for r in ready.annotate(n=Count("id"), oldest=Min("available_at")):
        row(r["tenant_id"]).update(ready=r["n"], oldest_age=now - r["oldest"])
    minutes = {}
    for m in scoped(TenantMinute.objects.filter(minute__gte=now - HOUR, minute__lte=now)):
        minutes.setdefault(m.tenant_id, []).append(m)
    for tenant_id, ms in minutes.items():
        lost = sum(m.failed + m.timed_out + m.lease_expired for m in ms)
        late = summary(ms)
        if lost or late["count"]:
            row(tenant_id).update(failed_hour=lost, p99=late["p99"], first_attempts=late["count"])
    dead = scoped(DeadLetter.objects.filter(dead_at__gte=now - DAY)).order_by().values("tenant_id")
    for d in dead.annotate(n=Count("id")):
        row(d["tenant_id"])["dead_new"] = d["n"]
    names = dict(Tenant.objects.filter(pk__in=rows).values_list("pk", "name"))
    for tenant_id, name in names.items():
        if name == SYSTEM_TENANT:  # the canaries (runs/canary.py) are the engine's, not a tenant's
            del rows[tenant_id]
    for r in rows.values():
        r["name"] = names.get(r["tenant_id"], "?")
    zero = dt.timedelta(0)
    ordered = sorted(
        rows.values(),
        key=lambda r: (-(r["oldest_age"] or zero).total_seconds(), -(r.get("p99") or 0), -r["dead_new"], r["name"]),
    )
    return ordered[:limit]
