"""Live updates over Channels: tell open portal pages that their tenant's runs changed.

The scheduler and the workers are separate processes that write only to the
database, so the web process learns of changes itself: while at least one
page is connected, one asyncio task per web process (`Poller`) reads a cheap
watermark every DUETIME_LIVE_POLL_SECONDS (default 1 s): the highest run,
attempt, dead-letter and audit ids, the fencing-token source and how far the
lateness rollups have folded attempts, six index or sequence reads. The last
one matters because the overview counts finished runs from the rollups, which
the scheduler folds in a little after each attempt: without it a page would
re-read before the fold and show a count one change behind. When it moves, the poller asks which tenants the new rows
belong to and sends `runs.changed` to those tenants' groups on the channel
layer; pages then re-fetch themselves over HTTP, where the normal tenant-scoped
views decide what they show. Nothing is pushed on the claim or complete paths.

Works on the in-memory layer (one web process, the embedded default) and on
channels_redis (REDIS_URL): there every web process polls, and a page may hear
the same change more than once, which its debounce absorbs.

Scoping: a connection joins only the groups of its user's tenants
(scheduler_project.admin.scoping), or the all-tenants group for superusers; a
user whose membership changes sees it on the next connection.
"""

import asyncio
import logging
from typing import NamedTuple

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.urls import path

log = logging.getLogger(__name__)
GROUP_ALL = "live.all"
MAX_SCAN = 50_000  # past this many new rows, say "every tenant changed" rather than look


def group_for(tenant_id):
    return f"live.tenant.{tenant_id}"


class Watermark(NamedTuple):
    run: int
    attempt: int
    fencing: int
    audit: int
    dead: int
    folded: int  # the rollup cursor: the last attempt id folded into the dashboards' counts


def read_watermark():
    """The current watermark: one round trip of max(id) reads and the fencing source."""
    from dlq.models import DeadLetter
    from jobs.models import AuditEntry
    from runs.models import Attempt, RollupCursor, Run

    q = connection.ops.quote_name
    tables = [m._meta.db_table for m in (Run, Attempt, AuditEntry, DeadLetter)]
    if connection.vendor == "postgresql":
        fencing = "(SELECT last_value FROM runs_fencing_token_seq)"
    else:
        fencing = "(SELECT value FROM runs_counter WHERE name = 'fencing_token')"
    maxes = [f"(SELECT max(id) FROM {q(t)})" for t in tables]
    folded = f"(SELECT last_id FROM {q(RollupCursor._meta.db_table)} WHERE name = 'attempts')"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {maxes[0]}, {maxes[1]}, {fencing}, {maxes[2]}, {maxes[3]}, {folded}")
        row = cursor.fetchone()
    return Watermark(*(value or 0 for value in row))


def changed_tenants(old, new):
    """Tenant ids with rows between watermarks `old` and `new`; None means "every tenant"."""
    from dlq.models import DeadLetter
    from jobs.models import AuditEntry
    from runs.models import Attempt, Run

    tenants = set()
    sources = [
        (Run.objects, "tenant_id", old.run, new.run),
        (Attempt.objects, "run__tenant_id", old.attempt, new.attempt),
        (AuditEntry.objects, "tenant_id", old.audit, new.audit),
        (DeadLetter.objects, "tenant_id", old.dead, new.dead),
        # Attempts just folded into the rollups: the finished counts of their tenants moved.
        (Attempt.objects, "run__tenant_id", old.folded, new.folded),
    ]
    for manager, field, low, high in sources:
        if high <= low:
            continue
        if high - low > MAX_SCAN:
            return None
        values = manager.filter(id__gt=low, id__lte=high).order_by().values_list(field, flat=True).distinct()
        for value in values:
            if value is None:  # an audit entry of no tenant (e.g. a tenant's own change)
                return None
            tenants.add(value)
    if new.fencing > old.fencing:
        # Claims: runs leased since. Those already finished show up as attempts.
        leased = Run.objects.filter(state="leased", fencing_token__gt=old.fencing).order_by()
        tenants.update(leased.values_list("tenant_id", flat=True).distinct()[:MAX_SCAN])
    return tenants


def groups_for(user):
    """The groups a user's connection joins, or None if the user may not use the portal."""
    from scheduler_project.admin import scoping

    if not scoping.is_operator(user):
        return None
    ids = scoping.tenant_ids(user)
    return [GROUP_ALL] if ids is None else [group_for(t) for t in sorted(ids)]


class Poller:
    """One per web process and event loop: polls while someone listens."""

    def __init__(self):
        self.listeners = 0
        self.task = None
        self.last = None
        self.loop = None

    def subscribe(self):
        self.listeners += 1
        loop = asyncio.get_running_loop()
        if self.task is None or self.task.done() or self.loop is not loop:
            self.loop, self.last = loop, None
            self.task = loop.create_task(self.run())

    def unsubscribe(self):
        self.listeners = max(0, self.listeners - 1)

    async def run(self):
        layer = get_channel_layer()
        while self.listeners > 0:
            try:
                await self.poll_once(layer)
            except Exception:  # a database hiccup must not end live updates for good
                log.exception("live updates: polling the watermark failed")
            await asyncio.sleep(getattr(settings, "DUETIME_LIVE_POLL_SECONDS", 1.0))

    async def poll_once(self, layer):
        """Read the watermark and announce what moved. Returns the tenants announced (None: all)."""
        mark = await database_sync_to_async(read_watermark)()
        previous, self.last = self.last, mark
        if previous is None or mark == previous:
            return set()
        tenants = await database_sync_to_async(changed_tenants)(previous, mark)
        await announce(layer, tenants, mark)
        return tenants


async def announce(layer, tenants, mark):
    """Send `runs.changed` to each changed tenant's group (None: to every tenant) and to superusers."""
    if tenants is None:
        from jobs.models import Tenant

        tenants = set(await database_sync_to_async(lambda: list(Tenant.objects.values_list("pk", flat=True)))())
    for tenant in sorted(tenants):
        await layer.group_send(group_for(tenant), {"type": "runs.changed", "tenants": [tenant], "mark": list(mark)})
    await layer.group_send(GROUP_ALL, {"type": "runs.changed", "tenants": sorted(tenants), "mark": list(mark)})


poller = Poller()


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """/ws/live/: pushes {"type": "changed", "tenants": [...]} to portal pages."""

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        groups = await database_sync_to_async(groups_for)(user)
        if groups is None:
            await self.close(code=4403)
            return
        self.joined = groups
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        poller.subscribe()

    async def disconnect(self, code):
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        if getattr(self, "joined", None) is not None:
            poller.unsubscribe()

    async def runs_changed(self, event):
        await self.send_json({"type": "changed", "tenants": event["tenants"], "mark": event["mark"]})


websocket_urlpatterns = [path("ws/live/", LiveConsumer.as_asgi())]
