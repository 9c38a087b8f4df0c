"""Per-tenant quotas: what one team may put on the shared scheduler.

Each check raises a 429 `quota-exceeded` problem, with `Retry-After` where
waiting helps:

- enqueue rate (`Tenant.enqueue_rate_per_minute`): runs created through the
  API (one-off runs, triggers) over the last 60 s, counted from the audit log,
  which records each of them anyway; its (tenant, at) index makes the count
  cost one short range scan. Retry-After is when the oldest of them leaves
  the window.
- pending runs (`Tenant.max_pending_runs`): runs not yet finished
  (scheduled, retry_wait, leased). Retry-After: a minute, as runs finish.
- definitions (`Tenant.max_definitions`): jobs not cancelled. No Retry-After:
  waiting does not help; delete a job or ask for a larger quota.

The checks are advisory under races (two requests at the limit may both
pass): a quota bounds abuse, it is not an invariant.
"""

import datetime as dt
import math

from django.apps import apps
from django.utils import timezone

from jobs.models import AuditEntry, JobDefinition
from scheduler_project.api.problems import Problem

RATE_WINDOW = dt.timedelta(seconds=60)
ENQUEUE_ACTIONS = ("api", "trigger")
PENDING_STATES = ("scheduled", "retry_wait", "leased")
PENDING_RETRY_AFTER = 60


def check_enqueue(tenant, count=1, now=None):
    """Raise quota-exceeded unless `tenant` may create `count` more runs now."""
    check_rate(tenant, now)
    check_pending(tenant, count)


def check_rate(tenant, now=None):
    now = now or timezone.now()
    limit = tenant.enqueue_rate_per_minute
    recent = (
        AuditEntry.objects.filter(tenant=tenant, at__gt=now - RATE_WINDOW, action__in=ENQUEUE_ACTIONS)
        .order_by("-at")
        .values_list("at", flat=True)[:limit]
    )
    recent = list(recent)
    if len(recent) < limit:
        return
    wait = max(1, math.ceil((recent[-1] + RATE_WINDOW - now).total_seconds()))
    raise Problem(
        "quota-exceeded",
        f"Tenant {tenant.name} may create {limit} runs a minute through the API; try again in {wait} s.",
        headers={"Retry-After": str(wait)},
    )


def check_pending(tenant, count=1):
    limit = tenant.max_pending_runs
    Run = apps.get_model("runs", "Run")
    # OFFSET limit-count: stops counting at the limit instead of counting every pending run.
    pending = Run.objects.filter(tenant=tenant, state__in=PENDING_STATES).order_by()
    if count > limit or pending.values("pk")[max(0, limit - count) : limit - count + 1].exists():
        raise Problem(
            "quota-exceeded",
            f"Tenant {tenant.name} may have {limit} runs waiting or running at once; "
            f"this would make more. Wait for runs to finish or cancel some.",
            headers={"Retry-After": str(PENDING_RETRY_AFTER)},
        )


def check_definitions(tenant):
    limit = tenant.max_definitions
    count = JobDefinition.objects.filter(tenant=tenant).exclude(status=JobDefinition.Status.CANCELLED).count()
    if count >= limit:
        raise Problem(
            "quota-exceeded",
            f"Tenant {tenant.name} may have {limit} job definitions; delete one or ask for a larger quota.",
        )
