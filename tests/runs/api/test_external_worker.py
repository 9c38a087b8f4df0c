"""examples/external_worker.py against a live server: Acme's report renderer runs outside Duetime."""

import threading

import pytest

from examples.external_worker import LeaseLost, PermanentError, Worker
from runs import transitions
from runs.models import Run
from tests.fixtures.api import on_demand
from tests.waiting import wait_until


@pytest.fixture
def render_job(api, acme_team):
    body = on_demand(retry={"max_attempts": 3, "base_seconds": 0, "max_seconds": 0})
    assert api.put("/v1/jobs/reports.render", token=acme_team, json=body).status_code == 201


def enqueue(api, token, n=1):
    return [
        api.post("/v1/jobs/reports.render/runs", token=token, json={"payload": {"page": i}}).json()["id"]
        for i in range(n)
    ]


def worker(live_server, token, name, handler, lease_seconds=5):
    return Worker(live_server.url, token, ["reports"], worker_id=name, lease_seconds=lease_seconds, handler=handler)


def test_it_leases_heartbeats_while_working_and_completes(live_server, api, acme_team, acme_worker, render_job):
    (run_id,) = enqueue(api, acme_team)
    seen = []

    def render(job):
        seen.append(job)
        wait_until(lambda: job.heartbeats >= 2, message="two heartbeats while the handler works")

    w = worker(live_server, acme_worker, "renderer-1", render)
    w.heartbeat_every = 0.3
    (lease,) = w.lease(wait_seconds=2)

    assert w.work(lease) == "succeeded"

    run = Run.objects.get(pk=run_id)
    assert run.state == "succeeded"
    (job,) = seen
    assert (job["payload"], job["idempotency_key"]) == ({"page": 0}, run.idempotency_key)
    assert job.heartbeats >= 2
    attempt = run.attempts.get()
    assert (attempt.outcome, attempt.worker_id, attempt.fencing_token) == (
        "succeeded",
        "renderer-1",
        lease["fencing_token"],
    )


def test_it_reports_failures_for_retry_and_permanent_ones_for_the_dlq(
    live_server, api, acme_team, acme_worker, render_job
):
    flaky, broken = enqueue(api, acme_team, 2)

    def render(job):
        if job["run_id"] == flaky:
            raise ConnectionError("printer offline")
        raise PermanentError("page does not exist")

    w = worker(live_server, acme_worker, "renderer-1", render)
    states = {lease["run_id"]: w.work(lease) for lease in w.lease(max_runs=2, wait_seconds=2)}

    assert states == {flaky: "retry_wait", broken: "dead"}
    assert Run.objects.get(pk=flaky).last_error == "ConnectionError: printer offline"


def test_it_drains_the_queue_in_its_loop(live_server, api, acme_team, acme_worker, render_job):
    ids = enqueue(api, acme_team, 3)
    w = worker(live_server, acme_worker, "renderer-1", lambda job: None)
    loop = threading.Thread(target=w.run_forever, kwargs={"max_runs": 2, "wait_seconds": 0.5})
    loop.start()
    try:
        wait_until(lambda: Run.objects.filter(pk__in=ids, state="succeeded").count() == 3, message="the loop to drain")
    finally:
        w.stopping.set()
        loop.join(timeout=30)

    assert not loop.is_alive()
    assert Run.objects.filter(pk__in=ids, state="succeeded").count() == 3


def test_it_loses_an_expired_lease_to_a_second_worker(live_server, api, acme_team, acme_worker, render_job):
    """Worker A stalls without heartbeats (a long GC pause); its lease expires and worker B
    takes the run with a higher fencing token. A's late heartbeat and completion get 409."""
    (run_id,) = enqueue(api, acme_team)
    a_may_finish = threading.Event()
    outcome = {}
    a = worker(live_server, acme_worker, "renderer-a", lambda job: a_may_finish.wait(30))
    a.heartbeat_every = 60  # a paused process sends no heartbeats
    (a_lease,) = a.lease(wait_seconds=2)
    stalled = threading.Thread(target=lambda: outcome.setdefault("a", a.work(a_lease)))
    stalled.start()

    # The lease runs out on the database's clock: poll the reaper until it takes the run.
    reaped = wait_until(transitions.reap, interval=0.2, message="A's lease to expire and be reaped")
    assert reaped == {run_id: "retry_wait"}
    b = worker(live_server, acme_worker, "renderer-b", lambda job: None)
    (b_lease,) = b.lease(wait_seconds=2)
    b_state = b.work(b_lease)
    with pytest.raises(LeaseLost):
        a.heartbeat(a_lease)
    a_may_finish.set()
    stalled.join(timeout=10)

    assert b_lease["run_id"] == run_id
    assert b_lease["fencing_token"] > a_lease["fencing_token"]
    assert b_lease["attempt"] == 2
    assert b_lease["idempotency_key"] == a_lease["idempotency_key"]
    assert b_state == "succeeded"
    assert outcome == {"a": None}  # A's completion was refused: 409 stale-lease
    run = Run.objects.get(pk=run_id)
    assert run.state == "succeeded"
    assert [(t.worker_id, t.outcome) for t in run.attempts.order_by("attempt")] == [
        ("renderer-a", "lease_expired"),
        ("renderer-b", "succeeded"),
    ]
