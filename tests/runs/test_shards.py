"""Scheduler shard ownership: lease rows with an epoch, shared fairly, taken over when a node dies."""

import datetime as dt
import threading

import pytest
from django.db import OperationalError, connection, transaction
from django.db.models.functions import Now

from runs import shards
from runs.models import ShardLease
from tests.conftest import is_postgres


def test_two_scheduler_nodes_share_the_shards_and_take_over_a_dead_one(db, clock):
    shards.ensure_rows()
    t0 = clock.now
    assert len(shards.own_shards("node-a", t0)) == 64
    b = shards.own_shards("node-b", t0 + dt.timedelta(seconds=1))
    a = shards.own_shards("node-a", t0 + dt.timedelta(seconds=2))  # gives back its extra half
    b = shards.own_shards("node-b", t0 + dt.timedelta(seconds=3))
    assert len(a) == 32 and len(b) == 32 and not a.keys() & b.keys()
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


def test_it_says_with_which_epoch_it_holds_each_shard(db, clock):
    shards.ensure_rows()
    owned = shards.own_shards("node-a", clock.now)
    rows = dict(ShardLease.objects.filter(name__startswith="shard-").values_list("name", "epoch"))
    assert {shards.shard_name(n): epoch for n, epoch in owned.items()} == rows
    assert owned == shards.own_shards("node-a", clock.ahead(seconds=1))  # a renewal keeps the epoch


def test_a_node_holds_a_shard_until_another_takes_it_over(db, clock):
    shards.ensure_rows()
    a = shards.own_shards("node-a", clock.now)
    assert shards.holds("node-a", 7, a[7])
    assert not shards.holds("node-b", 7, a[7]) and not shards.holds("node-a", 7, a[7] - 1)
    b = shards.own_shards("node-b", clock.ahead(seconds=60))  # node-a paused past its lease
    assert not shards.holds("node-a", 7, a[7])
    assert shards.holds("node-b", 7, b[7])


def test_leases_are_judged_by_the_database_clock_not_the_nodes(db, monkeypatch):
    shards.ensure_rows()
    # node-a holds shard 0 for an hour by the database's clock, shard 1 expired a minute ago.
    ShardLease.objects.filter(name="shard-00").update(owner="node-a", epoch=1, expires_at=Now() + dt.timedelta(hours=1))
    ShardLease.objects.filter(name="shard-01").update(
        owner="node-a", epoch=1, expires_at=Now() - dt.timedelta(minutes=1)
    )
    # node-b's own clock runs two hours fast: by it, every lease has expired.
    fast = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    monkeypatch.setattr("django.utils.timezone.now", lambda: fast)
    owned = shards.own_shards("node-b")
    assert 0 not in owned and 1 in owned
    lease = ShardLease.objects.get(name="shard-01")
    # Its lease runs DUETIME_SHARD_LEASE_SECONDS from the database's now, not from node-b's.
    assert lease.owner == "node-b" and lease.expires_at < fast - dt.timedelta(hours=1)


def test_the_default_lease_lets_a_dead_nodes_shards_go_within_ten_seconds(settings):
    assert shards.failover_seconds() == settings.DUETIME_SHARD_LEASE_SECONDS + shards.RENEW_EVERY_SECONDS <= 10


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not is_postgres(), reason="SQLite's writers take turns; PostgreSQL's row lock is what is tested")
def test_a_shard_being_written_cannot_be_taken_over_until_the_write_commits(clock):
    shards.ensure_rows()
    a = shards.own_shards("node-a", clock.now)
    holding, done = threading.Event(), threading.Event()

    def node_a_materialising():
        try:
            with transaction.atomic():
                assert shards.holds("node-a", 0, a[0])
                holding.set()
                done.wait(30)
        finally:
            connection.close()

    writer = threading.Thread(target=node_a_materialising)
    writer.start()
    try:
        assert holding.wait(30)
        later = clock.ahead(seconds=60)  # node-a's lease has expired by then: only the lock stops node-b
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            shards.own_shards("node-b", later)
    finally:
        done.set()
        writer.join(30)
    assert 0 in shards.own_shards("node-b", later)  # once node-a's write committed
    with transaction.atomic():
        assert not shards.holds("node-a", 0, a[0])
