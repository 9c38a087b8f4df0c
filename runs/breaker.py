"""The tenant-wide failure breaker: a tenant whose attempts keep failing stops retrying for a while.

When more than DUETIME_BREAKER_FAILURE_PERCENT of a tenant's attempts failed
(failed, timed out or lease expired), over the last
DUETIME_BREAKER_WINDOW_SECONDS and at least DUETIME_BREAKER_MIN_ATTEMPTS of
them, its breaker opens (`Tenant.breaker_opened_at`): claims lease none of
its retries (runs in `retry_wait`; runs/sql: lock_ready_tenants,
claim_candidates), while its first attempts still run, so a tenant whose
downstream is down stops hammering it (and the shared workers) with retries
but new work still gets its chance to show the downstream is back.

It closes by itself once it has been open a whole window and the window's
rate is at or below the threshold, or the window holds fewer attempts than the
minimum (the retries held back are then let go; if they fail again it opens
again). An operator may close it at once (`close`, audited); attempts before
that close no longer count, so it does not reopen on the failures that opened it.

The rates are read from the per-tenant minute rollups (runs.rollups), never
from raw attempts, so a pass reads a few rows per active tenant; the window is
rounded out to whole minutes. `tick(now)` is one of the scheduler's steps and
runs at most every EVERY per process. Every open and close is an audit entry
of the tenant; the owners hear of an opening from notify.events.
"""

import dataclasses
import datetime as dt

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from jobs import audit
from jobs.models import Tenant
from runs.models import TenantMinute

FAILED = ("failed", "timed_out", "lease_expired")  # a stale completion is a worker's problem, not the tenant's
COUNTED = ("succeeded", *FAILED)
EVERY = dt.timedelta(seconds=10)
SYSTEM = "system:breaker"


@dataclasses.dataclass(frozen=True)
class Rate:
    attempts: int
    failures: int

    @property
    def percent(self):
        return 100 * self.failures / self.attempts if self.attempts else 0.0

    def trips(self):
        """True when this rate opens a breaker (more than the threshold, over enough attempts)."""
        threshold = settings.DUETIME_BREAKER_FAILURE_PERCENT
        enough = self.attempts >= settings.DUETIME_BREAKER_MIN_ATTEMPTS
        return threshold > 0 and enough and self.failures * 100 > threshold * self.attempts

    def __str__(self):
        minutes = settings.DUETIME_BREAKER_WINDOW_SECONDS / 60
        return f"{self.percent:.0f} % of {self.attempts} attempts failed over {minutes:g} min"


def window_start(now):
    """The first minute row the window reads (the window rounded out to whole minutes)."""
    start = now - dt.timedelta(seconds=settings.DUETIME_BREAKER_WINDOW_SECONDS)
    return start.replace(second=0, microsecond=0)


def rates(now, tenants=None):
    """{tenant id: Rate} over the window, counting only minutes that began at or after an operator's close.

    `tenants` (ids) limits the read; None reads every tenant with attempts in the window.
    """
    rows = TenantMinute.objects.filter(minute__gte=window_start(now)).filter(
        Q(tenant__breaker_reset_at__isnull=True) | Q(minute__gte=F("tenant__breaker_reset_at"))
    )
    if tenants is not None:
        rows = rows.filter(tenant_id__in=tenants)
    sums = {name: Sum(name) for name in COUNTED}
    found = {}
    for row in rows.values("tenant_id").annotate(**sums).order_by():
        failures = sum(row[name] or 0 for name in FAILED)
        found[row["tenant_id"]] = Rate(failures + (row["succeeded"] or 0), failures)
    return found


def tenant_rate(tenant, now):
    """One tenant's Rate over the window (none in it: 0 of 0)."""
    return rates(now, [tenant.pk]).get(tenant.pk, Rate(0, 0))


def tick(now):
    """Open the breakers the window's rates trip, close those that recovered. Returns how many moved."""
    last = _last_pass["at"]
    if last is not None and dt.timedelta(0) <= now - last < EVERY:
        return 0
    _last_pass["at"] = now
    moved = 0
    window = dt.timedelta(seconds=settings.DUETIME_BREAKER_WINDOW_SECONDS)
    opened = dict(Tenant.objects.filter(breaker_opened_at__isnull=False).values_list("pk", "breaker_opened_at"))
    current = rates(now)  # every tenant with attempts in the window: a ripe one missing had none
    for tenant_id, rate in current.items():
        if tenant_id not in opened and rate.trips():
            moved += open_breaker(tenant_id, rate, now)
    ripe = [pk for pk, since in opened.items() if now - since >= window]
    for tenant_id in ripe:
        rate = current.get(tenant_id, Rate(0, 0))
        if not rate.trips():
            moved += close(Tenant(pk=tenant_id), actor=SYSTEM, note=f"recovered: {rate}", expected=opened[tenant_id])
    return moved


_last_pass = {"at": None}


def open_breaker(tenant_id, rate, now):
    """Open one tenant's breaker (compare-and-set: 0 if it was open already); audited. Returns 1 or 0."""
    with transaction.atomic():
        changed = Tenant.objects.filter(pk=tenant_id, breaker_opened_at__isnull=True).update(
            breaker_opened_at=now, breaker_detail=str(rate)[:200]
        )
        if changed:
            tenant = Tenant.objects.get(pk=tenant_id)
            detail = {"attempts": rate.attempts, "failures": rate.failures, "percent": round(rate.percent, 1)}
            audit.record(SYSTEM, "breaker_open", tenant, tenant=tenant, detail=detail, note=str(rate))
    return changed


def close(tenant, *, actor, note="", now=None, expected=None):
    """Close `tenant`'s breaker: its retries are claimed again. Returns 1, or 0 if it was not open.

    `expected` (the opening instant) makes it a compare-and-set on that opening (the automatic close);
    an operator's close (any other actor) also restarts the window at `now`, audited with the note.
    """
    now = now or timezone.now()
    opened = Tenant.objects.filter(pk=tenant.pk, breaker_opened_at__isnull=False)
    if expected is not None:
        opened = opened.filter(breaker_opened_at=expected)
    values = {"breaker_opened_at": None, "breaker_detail": ""}
    if actor != SYSTEM:
        values["breaker_reset_at"] = now
    with transaction.atomic():
        before = opened.select_for_update().values_list("breaker_opened_at", "breaker_detail").first()
        changed = opened.update(**values)
        if changed:
            fresh = Tenant.objects.get(pk=tenant.pk)
            detail = {"opened_at": before[0].isoformat(), "opened_for": before[1]}
            audit.record(actor, "breaker_close", fresh, tenant=fresh, detail=detail, note=note)
    return changed


def describe(tenant):
    """One line for the portal and the API: the breaker's state."""
    if tenant.breaker_opened_at is None:
        return "closed"
    return f"open since {tenant.breaker_opened_at:%Y-%m-%d %H:%M} UTC: retries wait ({tenant.breaker_detail})"
