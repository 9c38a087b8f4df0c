"""Per-tenant quotas: what one team may put on the shared scheduler.

Each check raises `QuotaExceeded`, naming the quota and its limit, with the
seconds after which a retry may pass where waiting helps (the API answers
429 `quota-exceeded` with `Retry-After`):

- enqueue rate (`Tenant.enqueue_rate_per_minute`): runs created through the
  API (one-off runs, triggers) over the last 60 s, counted from the audit log,
  which records each of them anyway; its (tenant, at) index makes the count
  cost one short range scan. Retry after the oldest of them leaves the window.
- pending runs (`Tenant.max_pending_runs`): runs not yet finished
  (scheduled, retry_wait, leased). Retry after a minute, as runs finish.
- definitions (`Tenant.max_definitions`): jobs not cancelled. No retry time:
  waiting does not help; delete a job or ask for a larger quota.

The checks are advisory under races (two requests at the limit may both
pass): a quota bounds abuse, it is not an invariant.
"""

import datetime as dt
import math

from django.utils import timezone

from jobs.models import AuditEntry, JobDefinition

RATE_WINDOW = dt.timedelta(seconds=60)
ENQUEUE_ACTIONS = ("api", "trigger")
PENDING_RETRY_AFTER = 60


class QuotaExceeded(Exception):
    """A tenant reached `quota` (a Tenant field name) of `limit`.

    `retry_after` is the number of seconds after which the same request may
    pass, or None when waiting does not help. The message says what to do.
    """

    def __init__(self, message, *, tenant, quota, limit, retry_after=None):
        super().__init__(message)
        self.tenant, self.quota, self.limit, self.retry_after = tenant, quota, limit, retry_after


def check_enqueue(tenant, count=1, now=None):
    """Raise QuotaExceeded unless `tenant` may create `count` more runs now."""
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
    raise QuotaExceeded(
        f"Tenant {tenant.name} may create {limit} runs a minute through the API; try again in {wait} s.",
        tenant=tenant,
        quota="enqueue_rate_per_minute",
        limit=limit,
        retry_after=wait,
    )


def check_pending(tenant, count=1):
    limit = tenant.max_pending_runs
    # `tenant.runs` is the reverse side of runs.Run.tenant: runs depends on jobs,
    # never the other way, so jobs reaches runs only through the relation (and
    # its queryset's `pending`, runs.models.PENDING_STATES) that runs declared.
    pending = tenant.runs.pending().order_by()
    # OFFSET limit-count: stops counting at the limit instead of counting every pending run.
    if count > limit or pending.values("pk")[max(0, limit - count) : limit - count + 1].exists():
        raise QuotaExceeded(
            f"Tenant {tenant.name} may have {limit} runs waiting or running at once; "
            f"this would make more. Wait for runs to finish or cancel some.",
            tenant=tenant,
            quota="max_pending_runs",
            limit=limit,
            retry_after=PENDING_RETRY_AFTER,
        )


def pending_room(tenant):
    """How many more runs `tenant` may have waiting or running under max_pending_runs (0 at the cap)."""
    limit = tenant.max_pending_runs
    # Counts at most `limit` rows: the cost stops at the quota, not at the backlog.
    return limit - tenant.runs.pending().order_by().values("pk")[:limit].count()


def check_definitions(tenant):
    limit = tenant.max_definitions
    count = JobDefinition.objects.filter(tenant=tenant).exclude(status=JobDefinition.Status.CANCELLED).count()
    if count >= limit:
        raise QuotaExceeded(
            f"Tenant {tenant.name} may have {limit} job definitions; delete one or ask for a larger quota.",
            tenant=tenant,
            quota="max_definitions",
            limit=limit,
        )
