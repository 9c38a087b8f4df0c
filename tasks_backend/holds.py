"""Who holds a unique enqueue key (tasks_backend.unique): (tenant, key) -> a run, until the hold expires.

`hold` takes a key in the caller's transaction, right after the run's
insert. The unique index on (tenant, key) decides between two enqueues at
once: on PostgreSQL the second insert waits for the first's transaction, then
fails and reads the first's row; an expired hold is taken over by
compare-and-set on its expiry, so two enqueues after the TTL still make one
run. The loser raises Held with the holder's run; the backend rolls its own
run back with its savepoint and answers with the holder's. A hold is
released only by expiring (or by the caller's rollback, which takes it
along), and pruned PRUNE_AFTER later, now and then (PRUNE_EVERY).
"""

import datetime as dt
import random

from django.db import IntegrityError, transaction
from django.db.models import Q

from tasks_backend.models import UniqueEnqueue

PRUNE_AFTER = dt.timedelta(days=1)  # an expired hold is deleted this long after it expired
PRUNE_EVERY = 100  # one new hold in about this many prunes (a delete per enqueue would contend for nothing)
PRUNE_BATCH = 500


class Held(Exception):
    """Another run holds the key; `run_id` is that run."""

    def __init__(self, run_id):
        super().__init__(f"the key is held by run {run_id}")
        self.run_id = run_id


def holder(tenant_id, key, now):
    """The run id holding `key` at `now`, or None (no hold, or an expired one)."""
    return (
        UniqueEnqueue.objects.filter(tenant_id=tenant_id, key=key, expires_at__gt=now)
        .values_list("run_id", flat=True)
        .first()
    )


def hold(tenant_id, key, run_id, ttl, now, *, replacing=None):
    """Make run `run_id` the key's holder until `now + ttl`, in the caller's transaction; raises Held.

    A new key is inserted; an expired hold, or one on run `replacing` (a holder whose run is gone), is taken
    over by compare-and-set. Anything else means another enqueue got there first: Held names its run.
    """
    expires_at = now + ttl
    taken_over = Q(expires_at__lte=now) | (Q(run_id=replacing) if replacing is not None else Q(pk__in=[]))
    for _ in range(3):  # a hold pruned between two of these statements: try again
        try:
            with transaction.atomic():
                UniqueEnqueue.objects.create(tenant_id=tenant_id, key=key, run_id=run_id, expires_at=expires_at)
        except IntegrityError:
            pass
        else:
            if random.randrange(PRUNE_EVERY) == 0:
                prune(now)
            return
        if UniqueEnqueue.objects.filter(taken_over, tenant_id=tenant_id, key=key).update(
            run_id=run_id, expires_at=expires_at
        ):
            return
        held = UniqueEnqueue.objects.filter(tenant_id=tenant_id, key=key).values_list("run_id", flat=True).first()
        if held is not None:
            raise Held(held)
    raise IntegrityError(f"unique key {key!r}: neither free nor held after three tries")


def prune(now):
    """Delete up to PRUNE_BATCH holds expired for longer than PRUNE_AFTER; returns how many."""
    old = UniqueEnqueue.objects.filter(expires_at__lt=now - PRUNE_AFTER).values_list("pk", flat=True)
    deleted, _ = UniqueEnqueue.objects.filter(pk__in=list(old[:PRUNE_BATCH])).delete()
    return deleted
