"""Scheduler shard ownership: lease rows with an epoch, shared fairly, taken over when a node dies."""

import datetime as dt

from runs import shards
from runs.models import ShardLease


def test_two_scheduler_nodes_share_the_shards_and_take_over_a_dead_one(db, clock):
    shards.ensure_rows()
    t0 = clock.now
    assert len(shards.own_shards("node-a", t0)) == 64
    b = shards.own_shards("node-b", t0 + dt.timedelta(seconds=1))
    a = shards.own_shards("node-a", t0 + dt.timedelta(seconds=2))  # gives back its extra half
    b = shards.own_shards("node-b", t0 + dt.timedelta(seconds=3))
    assert len(a) == 32 and len(b) == 32 and not a & b
    # node-a dies: its leases expire and node-b takes everything, with new epochs.
    epochs_before = dict(ShardLease.objects.values_list("name", "epoch"))
    later = t0 + dt.timedelta(seconds=60)
    assert len(shards.own_shards("node-b", later)) == 64
    taken = [n for n in ShardLease.objects.filter(owner="node-b") if n.epoch > epochs_before[n.name]]
    assert len(taken) >= 32


def test_a_scheduler_node_whose_membership_row_vanished_still_owns_shards(db, clock):
    shards.ensure_rows()
    now = clock.now
    shards.own_shards("node-a", now)
    ShardLease.objects.filter(name__startswith="node:").delete()  # a flush or an operator, mid-tick
    original = shards.live_nodes
    shards.live_nodes = lambda owner, now: 0  # the count taken just after the row went
    try:
        assert len(shards.own_shards("node-a", now + dt.timedelta(seconds=1))) == 64
    finally:
        shards.live_nodes = original


def test_it_draws_epochs_from_the_one_fencing_source_always_increasing(db):
    first = shards.next_fencing_tokens(3)
    second = shards.next_fencing_tokens(2)
    assert len(first) == 3 and len(second) == 2
    assert first == sorted(first) and len(set(first)) == 3
    assert min(second) > max(first)


def test_a_node_that_stops_gives_its_shards_back_at_once(db, clock):
    shards.ensure_rows()
    assert len(shards.own_shards("node-a", clock.now)) == 64
    shards.release("node-a")
    # No waiting for node-a's leases to expire: node-b takes every shard within the same second.
    assert len(shards.own_shards("node-b", clock.ahead(seconds=1))) == 64
    assert not ShardLease.objects.filter(name="node:node-a").exists()


def test_a_new_owner_gets_a_newer_epoch(db, clock):
    shards.ensure_rows()
    shards.own_shards("node-a", clock.now)
    before = ShardLease.objects.get(name=shards.shard_name(0)).epoch
    shards.own_shards("node-b", clock.ahead(seconds=60))  # node-a's leases have expired
    lease = ShardLease.objects.get(name=shards.shard_name(0))
    assert lease.owner == "node-b" and lease.epoch > before
