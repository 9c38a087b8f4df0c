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
(scheduler_project.admin.scoping), or the all-tenants group for superusers,
and every frame is checked again as it is sent: the user is read afresh, a
tenant they left is dropped from the frame (and its group left), and a user
who may no longer use the portal is disconnected (4403). A frame to a
tenant's group carries only that tenant's own watermark (the highest ids of
its own rows that moved); only superusers' frames carry the system-wide one,
which says how busy every other tenant is.
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
    """{tenant id: its own watermark} of the tenants with rows between watermarks `old` and `new`;
    None means "every tenant" (too many rows to look at, or a row of no tenant).

    A tenant's watermark has the Watermark's fields, each the highest id (fencing
    token) of that tenant's rows among those that moved, 0 where none did.
    """
    from django.db.models import Max

    from dlq.models import DeadLetter
    from jobs.models import AuditEntry
    from runs.models import Attempt, Run

    marks = {}
    sources = [  # (rows, their tenant, the Watermark field they move, from, to)
        (Run.objects, "tenant_id", "run", old.run, new.run),
        (Attempt.objects, "run__tenant_id", "attempt", old.attempt, new.attempt),
        (AuditEntry.objects, "tenant_id", "audit", old.audit, new.audit),
        (DeadLetter.objects, "tenant_id", "dead", old.dead, new.dead),
        # Attempts just folded into the rollups: the finished counts of their tenants moved.
        (Attempt.objects, "run__tenant_id", "folded", old.folded, new.folded),
    ]
    for manager, field, moved, low, high in sources:
        if high <= low:
            continue
        if high - low > MAX_SCAN:
            return None
        rows = manager.filter(id__gt=low, id__lte=high).order_by().values_list(field).annotate(top=Max("id"))
        for tenant, top in rows:
            if tenant is None:  # an audit entry of no tenant (e.g. a tenant's own change)
                return None
            _raise(marks, tenant, moved, top)
    if new.fencing > old.fencing:
        # Claims: runs leased since. Those already finished show up as attempts.
        leased = Run.objects.filter(state="leased", fencing_token__gt=old.fencing).order_by()
        for tenant, top in leased.values_list("tenant_id").annotate(top=Max("fencing_token"))[:MAX_SCAN]:
            _raise(marks, tenant, "fencing", top)
    return {tenant: Watermark(**mark) for tenant, mark in marks.items()}


def _raise(marks, tenant, field, value):
    mark = marks.setdefault(tenant, dict.fromkeys(Watermark._fields, 0))
    mark[field] = max(mark[field], value or 0)


def groups_for(user):
    """The groups a user's connection joins, or None if the user may not use the portal."""
    from scheduler_project.admin import scoping

    if not scoping.is_operator(user):
        return None
    ids = scoping.tenant_ids(user)
    return [GROUP_ALL] if ids is None else [group_for(t) for t in sorted(ids)]


def current_groups(user):
    """`groups_for` the user as the database has them now (None too when the user is gone)."""
    from django.contrib.auth import get_user_model

    fresh = get_user_model().objects.filter(pk=user.pk).first()
    return None if fresh is None else groups_for(fresh)


def scoped_frame(event, groups):
    """The frame `event` becomes for a connection in `groups`, or None when none of its tenants is the user's.

    A superuser's connection gets it whole; any other only its own tenants, and the watermark only when the
    event was sent to a tenant's group (whose watermark is that tenant's own), never the system-wide one.
    """
    if GROUP_ALL in groups:
        return {"type": "changed", "tenants": event["tenants"], "mark": event["mark"]}
    tenants = [t for t in event["tenants"] if group_for(t) in groups]
    if not tenants:
        return None
    mark = event["mark"] if event.get("scope") == "tenant" else None
    return {"type": "changed", "tenants": tenants, "mark": mark}


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
    """Send `runs.changed` to each changed tenant's group with its own watermark (`tenants`: {id: watermark};
    None: every tenant, with none) and to superusers with the system-wide `mark`."""
    if tenants is None:
        from jobs.models import Tenant

        every = await database_sync_to_async(lambda: list(Tenant.objects.values_list("pk", flat=True)))()
        tenants = dict.fromkeys(every)
    for tenant, own in sorted(tenants.items()):
        event = {"type": "runs.changed", "scope": "tenant", "tenants": [tenant], "mark": own and list(own)}
        await layer.group_send(group_for(tenant), event)
    event = {"type": "runs.changed", "scope": "all", "tenants": sorted(tenants), "mark": list(mark)}
    await layer.group_send(GROUP_ALL, event)


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
        """Checked as it is sent: the user's tenants now, not when the page connected."""
        groups = await database_sync_to_async(current_groups)(self.scope["user"])
        if groups is None:
            await self.close(code=4403)
            return
        await self._rejoin(groups)
        frame = scoped_frame(event, groups)
        if frame is not None:
            await self.send_json(frame)

    async def _rejoin(self, groups):
        """Leave the groups of tenants the user left; join those of tenants they joined."""
        for group in set(self.joined) - set(groups):
            await self.channel_layer.group_discard(group, self.channel_name)
        for group in set(groups) - set(self.joined):
            await self.channel_layer.group_add(group, self.channel_name)
        self.joined = groups


websocket_urlpatterns = [path("ws/live/", LiveConsumer.as_asgi())]
