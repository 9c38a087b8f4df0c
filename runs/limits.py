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
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from jobs import quotas
from jobs.models import AuditEntry, JobDefinition, QueueLimit
from runs import breaker, shards
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


def usage(tenant, now=None, rate=None):
    """[Usage] of `tenant`: every quota, cap and limit, in a stable order.

    `rate`: the tenant's breaker.Rate over the window, when the caller read it already (read here if None).
    """
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
    rows += _queue_limits(tenant, now)
    rows += _groups(tenant, leased)
    rows.append(_breaker(tenant, breaker.tenant_rate(tenant, now) if rate is None else rate))
    return rows


def _queue_limits(tenant, now):
    """The tenant's queue limits and the platform's: running now and starts in the current window."""
    rows = []
    applying = QueueLimit.objects.filter(Q(tenant=tenant) | Q(tenant__isnull=True)).order_by("queue", "tenant_id")
    for limit in applying[:100]:
        own = limit.tenant_id is not None
        scope = f"queue {limit.queue}" if own else f"queue {limit.queue} (every tenant together)"
        if limit.max_running is not None:
            running = Run.objects.filter(state=Run.State.LEASED, queue=limit.queue).order_by()
            running = running.filter(tenant=tenant) if own else running
            name = "queue_concurrency" if own else "platform_queue_concurrency"
            what = "Runs of the queue leased at once" + ("." if own else ", every tenant's together.")
            rows.append(Usage(name, scope, limit.max_running, running.count(), "claim", what))
        if limit.max_starts is not None:
            current = limit.window_start == window_of(now, limit.rate_per)
            name = "queue_rate" if own else "platform_queue_rate"
            what = f"Starts on the queue this calendar {limit.rate_per}" + ("." if own else ", every tenant's.")
            rows.append(Usage(name, scope, limit.max_starts, limit.window_starts if current else 0, "claim", what))
    return rows


def _groups(tenant, leased):
    """One row per concurrency group of the tenant's jobs: its runs leased now against its smallest limit."""
    jobs = JobDefinition.objects.filter(tenant=tenant).exclude(concurrency_group="")
    jobs = jobs.exclude(status=JobDefinition.Status.CANCELLED)
    members = {}
    for key, name, limit in jobs.values_list("concurrency_group", "name", "concurrency_group_limit")[:1000]:
        members.setdefault(key, []).append((name, limit))
    running = dict(
        leased.filter(job__concurrency_group__in=list(members))
        .values("job__concurrency_group")
        .annotate(n=Count("pk"))
        .values_list("job__concurrency_group", "n")
    )
    rows = []
    for key, named in sorted(members.items()):
        names = ", ".join(sorted(name for name, _limit in named)[:10])
        what = f"Runs of the group's jobs ({names}) leased at once; each job starts only below its own limit."
        rows.append(
            Usage(
                "concurrency_group",
                f"group {key}",
                min(limit for _name, limit in named),
                running.get(key, 0),
                "claim",
                what,
            )
        )
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


def _breaker(tenant, rate):
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


# --- enforced in the claim ------------------------------------------------------------------------

GROUP_LOCK = "duetime-group:{tenant}:{key}"


@dataclasses.dataclass
class Bound:
    """One limit as a claim sees it: how many more runs it lets start in this claim (None: unbounded)."""

    name: str  # the limit, as duetime_tenant_capped_seconds_total labels it
    running_room: int | None = None  # a queue limit's max_running less what runs now
    starts_room: int | None = None  # a rate limit's starts left in the current window
    group_running: int | None = None  # a concurrency group: its runs leased now
    held: bool = False  # another claim holds its lock: full for this claim
    row: QueueLimit | None = None
    taken: int = 0  # let through by this claim so far

    def allows(self, c):
        if self.held:
            return False
        if self.group_running is not None and self.group_running + self.taken >= c.group_limit:
            return False  # each job of a group starts only while fewer than its own limit run
        rooms = [room for room in (self.running_room, self.starts_room) if room is not None]
        return all(self.taken < room for room in rooms)


class Gates:
    """The queue and group limits of one claim: built (and their rows locked) before `choose`, asked per
    candidate while it decides, and told what was leased so the rate windows move.

    Race-free: the limit rows (jobs.QueueLimit) are locked FOR UPDATE SKIP LOCKED and each group takes a
    transaction advisory lock on PostgreSQL (SQLite's IMMEDIATE transaction already serialises claims),
    and the running counts are read after the lock, so they include every lease committed before it. A
    row or group another claim holds right now counts as full for this claim: never a wait.
    """

    def __init__(self):
        self.queues = {}  # (tenant id or None, queue) -> Bound
        self.groups = {}  # (tenant id, key) -> Bound

    def bounds(self, c):
        found = [self.queues.get((c.tenant_id, c.queue)), self.queues.get((None, c.queue))]
        if c.group:
            found.append(self.groups.get((c.tenant_id, c.group)))
        return [b for b in found if b is not None]

    def verdict(self, c):
        """None if the queue and group limits let `c` start, else the name of the limit that holds it."""
        for bound in self.bounds(c):
            if not bound.allows(c):
                return bound.name
        return None

    def take(self, c):
        for bound in self.bounds(c):
            bound.taken += 1

    def record(self, leases):
        """Move the rate windows of the locked rows by the starts this claim made."""
        for (tenant_id, queue), bound in self.queues.items():
            row = bound.row
            if row is None or row.max_starts is None:
                continue
            started = [lease for lease in leases if lease.queue == queue and tenant_id in (None, lease.tenant_id)]
            if not started:
                continue
            window = window_of(started[0].started_at, row.rate_per)
            count = (row.window_starts if row.window_start == window else 0) + len(started)
            QueueLimit.objects.filter(pk=row.pk).update(window_start=window, window_starts=count)


def window_of(instant, per):
    """The calendar second or minute `instant` falls in (a rate limit's window)."""
    instant = instant.replace(microsecond=0)
    return instant.replace(second=0) if per == QueueLimit.Per.MINUTE else instant


def gates(candidates, now=None):
    """The Gates of a claim's candidates: the queue limits and concurrency groups that apply, locked."""
    found = Gates()
    tenants = {c.tenant_id for c in candidates}
    queues = {c.queue for c in candidates}
    # claim_candidates tells whether a limit may apply: a claim where none does (most) reads none here.
    if any(c.queue_limited for c in candidates):
        applying = QueueLimit.objects.filter(queue__in=queues).filter(Q(tenant__isnull=True) | Q(tenant_id__in=tenants))
        _queue_bounds(found, applying, now)
    groups = {(c.tenant_id, c.group) for c in candidates if c.group}
    for tenant_id, key in sorted(groups):
        found.groups[(tenant_id, key)] = _group_bound(tenant_id, key)
    return found


def _queue_bounds(found, applying, now):
    listed = list(applying.values_list("pk", "tenant_id", "queue"))  # every row that applies, held or not
    if not listed:
        return
    locked = {row.pk: row for row in applying.select_for_update(skip_locked=True).order_by("pk")}
    clock = None
    for pk, tenant_id, queue in listed:
        name = "queue_concurrency" if tenant_id else "platform_queue_concurrency"
        row = locked.get(pk)
        if row is None:  # another claim holds it: full for this one
            found.queues[(tenant_id, queue)] = Bound(name, held=True)
            continue
        bound = Bound(name, row=row)
        if row.max_running is not None:
            leased = Run.objects.filter(state=Run.State.LEASED, queue=queue)
            if tenant_id:
                leased = leased.filter(tenant_id=tenant_id)
            bound.running_room = max(0, row.max_running - leased.order_by().count())
        if row.max_starts is not None:
            clock = clock or now or shards.database_now()
            started = row.window_starts if row.window_start == window_of(clock, row.rate_per) else 0
            bound.starts_room = max(0, row.max_starts - started)
            if bound.running_room is None or bound.starts_room < bound.running_room:
                bound.name = "queue_rate" if tenant_id else "platform_queue_rate"
        found.queues[(tenant_id, queue)] = bound


def _group_bound(tenant_id, key):
    """A group's bound, its runs counted after taking its lock (PostgreSQL: a transaction advisory lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            lock = GROUP_LOCK.format(tenant=tenant_id, key=key)
            cursor.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", [lock])
            if not cursor.fetchone()[0]:
                return Bound("concurrency_group", held=True)
    running = Run.objects.filter(state=Run.State.LEASED, tenant_id=tenant_id, job__concurrency_group=key)
    return Bound("concurrency_group", group_running=running.order_by().count())
