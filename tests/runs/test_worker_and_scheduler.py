"""The worker step and the scheduler step, in-process (threads, the real database)."""

import datetime as dt
import time

import pytest
from django.utils import timezone

from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs import enqueue, scheduler, shards
from runs.models import Attempt, Run, ShardLease
from runs.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def drive(worker, until, timeout=20):
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "worker did not get there"
        if not worker.tick().claimed:
            worker.wait(0.05)


def test_it_claims_executes_and_completes_in_batches(acme, make_job):
    job = make_job(acme, "batch", overlap_policy="allow")
    runs = [enqueue.enqueue(job)[0] for _ in range(25)]
    worker = Worker(["default"], concurrency=10, batch=10, heartbeat_seconds=1)
    try:
        drive(worker, lambda: Run.objects.filter(job=job, state="succeeded").count() == 25)
    finally:
        worker.drain(5)
    assert Attempt.objects.filter(run__in=runs, outcome="succeeded").count() == 25


def test_it_heartbeats_long_runs_past_the_lease(acme, make_job, tmp_path):
    job = make_job(
        acme, "long", target_ref="tests.handlers.hold_then_report", payload={"report": str(tmp_path), "hold": 3}
    )
    run, _ = enqueue.enqueue(job)
    worker = Worker(["default"], concurrency=2, lease_seconds=2, heartbeat_seconds=0.5)
    try:
        drive(worker, lambda: Run.objects.get(pk=run.pk).state == "succeeded")
    finally:
        worker.drain(5)
    assert list(Attempt.objects.filter(run=run).values_list("outcome", flat=True)) == ["succeeded"]


def test_it_releases_what_it_holds_when_drained(acme, make_job, tmp_path):
    job = make_job(
        acme, "held", target_ref="tests.handlers.hold_then_report", payload={"report": str(tmp_path), "hold": 30}
    )
    run, _ = enqueue.enqueue(job)
    worker = Worker(["default"], concurrency=1)
    drive(worker, lambda: (tmp_path / "1.started").exists())
    assert worker.drain(grace_seconds=0.2) == 1
    run.refresh_from_db()
    assert (run.state, run.attempt) == ("scheduled", 0), "the attempt is given back, not spent"


def test_the_scheduler_step_materialises_and_reaps(acme):
    job = JobDefinition(
        tenant=acme,
        name="tick",
        schedule_kind="cron",
        cron_expr="* * * * *",
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    save_definition(job, "test")
    shards.ensure_rows()
    result = scheduler.tick("node-a", now=timezone.now())
    assert result.shards == 64 and result.inserted >= 1
    assert Run.objects.filter(job=job, state="scheduled").exists()


def test_two_scheduler_nodes_share_the_shards_and_take_over_a_dead_one(db):
    shards.ensure_rows()
    t0 = timezone.now()
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


def test_a_scheduler_node_whose_membership_row_vanished_still_owns_shards(db):
    shards.ensure_rows()
    now = timezone.now()
    shards.own_shards("node-a", now)
    ShardLease.objects.filter(name__startswith="node:").delete()  # a flush or an operator, mid-tick
    original = shards.live_nodes
    shards.live_nodes = lambda owner, now: 0  # the count taken just after the row went
    try:
        assert len(shards.own_shards("node-a", now + dt.timedelta(seconds=1))) == 64
    finally:
        shards.live_nodes = original
