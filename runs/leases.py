"""Named leases: the one module that writes `ShardLease` rows (runs/models.py), whatever they hold.

A row is a named lease held by one process until `expires_at`:

- `shard-NN`: a scheduler shard (runs/shards.py), its `epoch` from the
  fencing sequence, so a node that lost the shard is known by an old epoch;
- `node:<owner>`: a scheduler node's membership, renewed each pass
  (runs/shards.py counts the live ones to size each node's share);
- `retention`: the singleton pass of runs/retention.py;
- `last-pass`: the dead-man's switch, stamped by each materialising pass
  (runs/canary.py); its `expires_at` is the instant of that pass.

Every write is a compare-and-set on the row's owner and expiry, judged by the
clock its caller passes (the database's `Now()` in the engine, a pinned
instant in tests), so two processes never both believe they hold a lease.
"""

import datetime as dt

from django.db.models import Q

from runs.models import ShardLease

# The expiry of a lease nobody holds: long past.
EPOCH_START = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def ensure(names):
    """Create the rows of `names` that do not exist yet, unheld."""
    ShardLease.objects.bulk_create(
        [ShardLease(name=name, owner="", epoch=0, expires_at=EPOCH_START) for name in names], ignore_conflicts=True
    )


def take(name, owner, *, clock, until, epoch):
    """Take `name` for `owner` with `epoch` until `until`, if it is free (unheld or expired by `clock`)."""
    free = Q(expires_at__lte=clock) | Q(owner="")
    return bool(ShardLease.objects.filter(free, name=name).update(owner=owner, epoch=epoch, expires_at=until))


def renew(names, owner, *, until, due=None):
    """Move the expiry of `owner`'s leases among `names` to `until` (only those expiring by `due`, if given).

    Returns how many it renewed: 0 means `owner` no longer holds them (or none was due).
    """
    held = ShardLease.objects.filter(name__in=list(names), owner=owner)
    if due is not None:
        held = held.filter(expires_at__lte=due)
    return held.update(expires_at=until)


def give_back(names, owner, *, at=EPOCH_START):
    """End `owner`'s leases among `names` at `at` (default: at once), so another process may take them."""
    return ShardLease.objects.filter(name__in=list(names), owner=owner).update(expires_at=at)


def give_back_all(owner, prefix, *, at=EPOCH_START):
    """`give_back` for every lease of `owner` whose name starts with `prefix`."""
    return ShardLease.objects.filter(owner=owner, name__startswith=prefix).update(expires_at=at)


def stamp(name, owner, *, until, epoch=0):
    """Upsert `name` as `owner`'s until `until` (a membership row, the last-pass stamp): no contest, last writer wins.

    `epoch` may be a callable, asked only when the row is created.
    """
    if ShardLease.objects.filter(name=name).update(owner=owner, expires_at=until):
        return
    first = epoch() if callable(epoch) else epoch
    ShardLease.objects.get_or_create(name=name, defaults={"owner": owner, "epoch": first, "expires_at": until})


def forget(name):
    ShardLease.objects.filter(name=name).delete()


def held(owner, prefix, *, clock):
    """[(name, epoch)] of the unexpired leases of `owner` whose name starts with `prefix`, by name."""
    rows = ShardLease.objects.filter(owner=owner, expires_at__gt=clock, name__startswith=prefix)
    return list(rows.order_by("name").values_list("name", "epoch"))


def free(prefix, *, clock, limit):
    """The names of up to `limit` leases starting with `prefix` that nobody holds at `clock`, by name."""
    if limit <= 0:
        return []
    rows = ShardLease.objects.filter(Q(expires_at__lte=clock) | Q(owner=""), name__startswith=prefix)
    return list(rows.order_by("name").values_list("name", flat=True)[:limit])


def alive(prefix, *, clock):
    """How many leases starting with `prefix` are held past `clock`."""
    return ShardLease.objects.filter(name__startswith=prefix, expires_at__gt=clock).count()


def holds(name, owner, epoch):
    """True when `owner` holds `name` with `epoch`, locking the row until the transaction ends (PostgreSQL)."""
    row = ShardLease.objects.select_for_update(no_key=True).filter(name=name, owner=owner, epoch=epoch)
    return bool(list(row.values_list("epoch", flat=True)))


def stamped_at(name):
    """The instant stamped on `name` (its expires_at), or None."""
    return ShardLease.objects.filter(name=name).values_list("expires_at", flat=True).first()


def seize(name, owner, *, until, epoch):
    """Take `name` for `owner` whoever holds it (an operator's override: the benchmarks hold retention so)."""
    return ShardLease.objects.filter(name=name).update(owner=owner, epoch=epoch, expires_at=until)
