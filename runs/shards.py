"""Scheduler shard ownership: lease rows with an epoch, renewed by compare-and-set.

Jobs live on `SHARDS` shards (`hash(tenant, name) mod SHARDS`). Each
scheduler process owns a fair share of them: it renews what it holds, takes
shards whose lease expired (a crashed node's), and gives back what exceeds
its share when another node joins. A new owner gets a fresh epoch from the
fencing sequence. No advisory locks: they vanish or orphan behind poolers.

Ownership is an optimisation, not a correctness guard: materialising is
idempotent (compare-and-set on next_due_at, unique (job, due_at)), so two
nodes that briefly both think they own a shard do no harm.
"""

import datetime as dt
import math

from django.db import transaction
from django.db.models import Q

from jobs.models import SHARDS
from runs import sql
from runs.models import ShardLease

LEASE_TTL = dt.timedelta(seconds=15)
EPOCH_START = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def next_fencing_tokens(n):
    """The next_fencing_tokens query: `n` fresh, strictly increasing values of the one global
    fencing source (runs take theirs in transitions.lease_runs; shard owners their epochs here)."""
    return [row[0] for row in sql.execute("next_fencing_tokens", {"n": n})]


def shard_name(shard):
    return f"shard-{shard:02d}"


def ensure_rows():
    ShardLease.objects.bulk_create(
        [ShardLease(name=shard_name(n), owner="", epoch=0, expires_at=EPOCH_START) for n in range(SHARDS)],
        ignore_conflicts=True,
    )


def node_name(owner):
    return f"node:{owner}"[:40]


def live_nodes(owner, now):
    """Renew this node's membership row; returns how many nodes are alive (itself included)."""
    until = now + LEASE_TTL
    if not ShardLease.objects.filter(name=node_name(owner)).update(owner=owner, expires_at=until):
        (epoch,) = next_fencing_tokens(1)
        ShardLease.objects.get_or_create(
            name=node_name(owner), defaults={"owner": owner, "epoch": epoch, "expires_at": until}
        )
    return ShardLease.objects.filter(name__startswith="node:", expires_at__gt=now).count()


def own_shards(owner, now):
    """Renew, take and release shard leases for `owner`; returns the shard numbers it owns now."""
    # At least this node, even if its membership row vanished under it (a flush, an operator).
    share = math.ceil(SHARDS / max(1, live_nodes(owner, now)))
    until = now + LEASE_TTL
    with transaction.atomic():
        mine = list(
            ShardLease.objects.filter(owner=owner, expires_at__gt=now, name__startswith="shard-")
            .order_by("name")
            .values_list("name", flat=True)
        )
        keep, extra = mine[:share], mine[share:]
        ShardLease.objects.filter(name__in=keep, owner=owner).update(expires_at=until)
        if extra:  # another node joined: hand these back
            ShardLease.objects.filter(name__in=extra, owner=owner).update(expires_at=now)
        for name in _free(now, share - len(keep)):
            (epoch,) = next_fencing_tokens(1)
            taken = ShardLease.objects.filter(Q(expires_at__lte=now) | Q(owner=""), name=name).update(
                owner=owner, epoch=epoch, expires_at=until
            )
            if taken:
                keep.append(name)
    return {int(name.split("-")[1]) for name in keep}


def _free(now, wanted):
    if wanted <= 0:
        return []
    free = ShardLease.objects.filter(Q(expires_at__lte=now) | Q(owner=""), name__startswith="shard-")
    return list(free.order_by("name").values_list("name", flat=True)[:wanted])


def release(owner):
    """Give every shard back at once (graceful shutdown), so another node takes over without waiting."""
    ShardLease.objects.filter(owner=owner).update(expires_at=EPOCH_START)
    ShardLease.objects.filter(name=node_name(owner)).delete()
