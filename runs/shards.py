"""Scheduler shard ownership: lease rows with an epoch, renewed by compare-and-set on the database clock.

Jobs live on `SHARDS` shards (`hash(tenant, name) mod SHARDS`). Each
scheduler process owns a fair share of them: it renews what it holds, takes
shards whose lease expired (a crashed node's), and gives back what exceeds
its share when another node joins. A new owner gets a fresh epoch from the
fencing sequence. No advisory locks: they vanish or orphan behind poolers.

Every lease is judged by the database's clock (`Now()`: statement_timestamp()
on PostgreSQL), never a node's, so a node whose clock is off neither keeps a
lease past its expiry nor takes one early. Tests pin `now` instead.

A lease lasts DUETIME_SHARD_LEASE_SECONDS and is renewed on every scheduler
pass (at most RENEW_EVERY_SECONDS apart when idle), so a dead node's shards
are owned again within `failover_seconds()`. Materialising a shard is fenced
by its epoch (`holds`): a node that lost a shard writes nothing for it, even
if it has not noticed yet. Materialising is idempotent as well (compare-and-set
on next_due_at, unique (job, due_at)).
"""

import datetime as dt
import math

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Value
from django.db.models.functions import Now
from django.utils import timezone

from jobs.models import SHARDS
from runs import leases, sql

EPOCH_START = leases.EPOCH_START
# run_scheduler sleeps at most this long between idle passes, and every pass renews the leases.
RENEW_EVERY_SECONDS = 1.0


def lease_ttl():
    return dt.timedelta(seconds=settings.DUETIME_SHARD_LEASE_SECONDS)


def failover_seconds():
    """The longest a dead node's shards stay unowned: the lease its last pass renewed, then at
    most one idle sleep until a survivor's next pass takes them (the pass itself comes on top)."""
    return settings.DUETIME_SHARD_LEASE_SECONDS + RENEW_EVERY_SECONDS


def database_now():
    """The database's clock: statement_timestamp() on PostgreSQL; SQLite is a file on this host,
    whose clock is the database's."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def _clock(now):
    """The instant leases are judged by, in SQL: the pinned `now` of a test, else the database's."""
    return Now() if now is None else Value(now)


def next_fencing_tokens(n):
    """The next_fencing_tokens query: `n` fresh, strictly increasing values of the one global
    fencing source (runs take theirs in transitions.lease_runs; shard owners their epochs here)."""
    return [row[0] for row in sql.execute("next_fencing_tokens", {"n": n})]


def shard_name(shard):
    return f"shard-{shard:02d}"


def ensure_rows():
    leases.ensure(shard_name(n) for n in range(SHARDS))


def node_name(owner):
    return f"node:{owner}"[:40]


def live_nodes(owner, now=None):
    """Renew this node's membership row; returns how many nodes are alive (itself included)."""
    clock, until = _clock(now), _clock(now) + lease_ttl()
    leases.stamp(node_name(owner), owner, until=until, epoch=lambda: next_fencing_tokens(1)[0])
    return leases.alive("node:", clock=clock)


def own_shards(owner, now=None):
    """Renew, take and release shard leases for `owner`; returns {shard number: epoch} it owns now.

    The epoch is what `holds` checks before this node writes for the shard.
    """
    # At least this node, even if its membership row vanished under it (a flush, an operator).
    share = math.ceil(SHARDS / max(1, live_nodes(owner, now)))
    clock, until = _clock(now), _clock(now) + lease_ttl()
    with transaction.atomic():
        mine = leases.held(owner, "shard-", clock=clock)
        keep, extra = dict(mine[:share]), [name for name, _ in mine[share:]]
        leases.renew(keep, owner, until=until)
        if extra:  # another node joined: hand these back
            leases.give_back(extra, owner, at=clock)
        for name in leases.free("shard-", clock=clock, limit=share - len(keep)):
            (epoch,) = next_fencing_tokens(1)
            if leases.take(name, owner, clock=clock, until=until, epoch=epoch):
                keep[name] = epoch
    return {int(name.split("-")[1]): epoch for name, epoch in keep.items()}


def holds(owner, shard, epoch):
    """True when `owner` still holds `shard` with `epoch`; call it inside the transaction that writes
    for the shard, and write nothing for it when False.

    On PostgreSQL the lease row stays locked until that transaction ends, so no
    other node can take the shard (which bumps its epoch) in between: writers
    of one shard are fenced, whatever each believes. SQLite's writers take
    turns (immediate transactions), which does the same. An expired lease that
    nobody took yet still holds: nobody else writes for the shard before taking it.
    """
    return leases.holds(shard_name(shard), owner, epoch)


def release(owner):
    """Give every shard back at once (graceful shutdown), so another node takes over without waiting."""
    leases.give_back_all(owner, "shard-")
    leases.forget(node_name(owner))
