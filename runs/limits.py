"""Every quota, cap and limit that applies to a tenant, with what it uses now.

The one list the API (`GET /v1/tenant`) and the portal's tenant page show, so a
tenant can see what holds it back: the quotas jobs/quotas.py checks at the
doors (definitions, pending runs, the API's enqueue rate), the caps the claim
enforces (runs/claims.py: concurrent runs, each job's `concurrency`) and the
failure breaker (runs/breaker.py). Each count stops at its limit where the
table could be large (pending runs), so reading the list costs the same for a
tenant with ten runs or ten million.
"""

import dataclasses

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from jobs import quotas
from jobs.models import AuditEntry, JobDefinition
from runs import breaker
from runs.models import Run


@dataclasses.dataclass(frozen=True)
class Usage:
    name: str  # the limit's name: a Tenant field, or a limit kind (job_concurrency, breaker, ...)
    scope: str  # what it applies to: "tenant", "job NAME", ...
    limit: int | None  # None: no limit set
    used: int
    enforced_by: str  # where: "API and portal doors", "claim", ...
    description: str

    @property
    def at_limit(self):
        return self.limit is not None and self.used >= self.limit


def usage(tenant, now=None):
    """[Usage] of `tenant`: every quota, cap and limit, in a stable order."""
    now = now or timezone.now()
    leased = Run.objects.filter(tenant=tenant, state=Run.State.LEASED).order_by()
    rows = [
        Usage(
            "max_definitions",
            "tenant",
            tenant.max_definitions,
            JobDefinition.objects.filter(tenant=tenant).exclude(status=JobDefinition.Status.CANCELLED).count(),
            "doors",
            "Job definitions not cancelled.",
        ),
        Usage(
            "max_pending_runs",
            "tenant",
            tenant.max_pending_runs,
            tenant.max_pending_runs - quotas.pending_room(tenant),
            "doors and materialisation",
            "Runs waiting or running (scheduled, retry_wait, leased); counted up to the limit.",
        ),
        Usage(
            "enqueue_rate_per_minute",
            "tenant",
            tenant.enqueue_rate_per_minute,
            _enqueued_last_minute(tenant, now),
            "API doors",
            "Runs created through the API (one-off runs, triggers) over the last 60 s.",
        ),
        Usage(
            "max_concurrent_runs",
            "tenant",
            tenant.max_concurrent_runs,
            leased.count(),
            "claim",
            "Runs leased at once, across every worker.",
        ),
    ]
    rows += _job_concurrency(tenant, leased)
    rows.append(_breaker(tenant, now))
    return rows


def _enqueued_last_minute(tenant, now):
    recent = AuditEntry.objects.filter(
        tenant=tenant, at__gt=now - quotas.RATE_WINDOW, action__in=quotas.ENQUEUE_ACTIONS
    ).order_by()
    return recent.values("pk")[: tenant.enqueue_rate_per_minute].count()


def _job_concurrency(tenant, leased):
    """One row per job with a `concurrency` limit (at most 100, those most used first)."""
    limited = JobDefinition.objects.filter(tenant=tenant, concurrency__isnull=False).exclude(
        status=JobDefinition.Status.CANCELLED
    )
    jobs = list(limited.values_list("pk", "name", "concurrency")[:100])
    running = dict(
        leased.filter(job_id__in=[pk for pk, _n, _c in jobs])
        .values("job_id")
        .annotate(n=Count("pk"))
        .values_list("job_id", "n")
    )
    rows = [
        Usage("job_concurrency", f"job {name}", limit, running.get(pk, 0), "claim", "Runs of this job leased at once.")
        for pk, name, limit in jobs
    ]
    return sorted(rows, key=lambda row: (-row.used, row.scope))


def _breaker(tenant, now):
    rate = breaker.rates(now, [tenant.pk]).get(tenant.pk, breaker.Rate(0, 0))
    percent = settings.DUETIME_BREAKER_FAILURE_PERCENT
    state = breaker.describe(tenant)
    return Usage(
        "failure_breaker",
        "tenant",
        percent or None,
        round(rate.percent),
        "claim (retries only)",
        f"Failed attempts, % of {rate.attempts} over the last {settings.DUETIME_BREAKER_WINDOW_SECONDS} s "
        f"(opens above {percent} % of at least {settings.DUETIME_BREAKER_MIN_ATTEMPTS}); {state}.",
    )
