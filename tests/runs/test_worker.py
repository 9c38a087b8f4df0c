"""The worker step, in-process (threads, the real database): claim, execute, heartbeat, complete, drain."""

import pytest

from runs import enqueue
from runs.models import Attempt, Run
from runs.worker import Worker
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def drive(worker, until, timeout=60):
    """Tick the worker until `until()` holds, resting between ticks that claimed nothing."""

    def step():
        if until():
            return True
        if not worker.tick().claimed:
            worker.wait(0.05)
        return False

    wait_until(step, timeout=timeout, interval=0, message="the worker to get there")


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
