"""The worker step, in-process (threads, the real database): claim, execute, heartbeat, complete, drain."""

import datetime as dt
import http.server
import queue
import threading

import pytest
from django.db import OperationalError
from django.utils import timezone

from jobs.models import JobDefinition, Tenant
from runs import enqueue, ledger, presence, transitions
from runs.models import Attempt, Run
from runs.worker import POOLS, SlotThreads, Worker
from tests.notify.receiver import Receiver, serve
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


@pytest.mark.parametrize("pool", POOLS)
def test_it_stores_what_a_task_returns_on_its_attempt(acme, make_job, pool):
    job = make_job(acme, "add", target_ref="tests.handlers.add", payload={"a": 2, "b": 3})
    later = make_job(acme, "add-later", target_ref="tests.handlers.add_later", payload={"a": 4, "b": 5})
    nothing = make_job(acme, "noop")
    runs = [enqueue.enqueue(j)[0] for j in (job, later, nothing)]
    worker = Worker(["default"], concurrency=2, heartbeat_seconds=1, pool=pool)
    try:
        drive(worker, lambda: Run.objects.filter(pk__in=[r.pk for r in runs], state="succeeded").count() == 3)
    finally:
        worker.drain(5)
    stored = {a.run_id: a.return_value for a in Attempt.objects.filter(run__in=runs)}
    assert stored == {runs[0].pk: {"sum": 5}, runs[1].pk: {"sum": 9}, runs[2].pk: None}


def test_it_announces_itself_as_a_consumer_of_its_kinds_and_queues_until_drained(acme, make_job):
    worker = Worker(["default", "reports"], concurrency=1)
    try:
        wait_until(lambda: presence.serving("python", "reports"), message="the worker's announcement")
        assert presence.serving("http", "default") and not presence.serving("external", "default")
        assert [c.pool for c in presence.running("python", "reports")] == ["threads"]
    finally:
        worker.drain(1)
    assert not presence.serving("python", "reports")


def test_a_processes_pool_worker_announces_its_pool(acme):
    worker = Worker(["default"], concurrency=1, pool="processes")
    try:
        wait_until(lambda: presence.serving("python", "default"), message="the worker's announcement")
        assert [c.pool for c in presence.running("python", "default")] == ["processes"]
    finally:
        worker.drain(1)


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


def test_a_long_run_does_not_hold_up_short_runs_due_with_it(acme, make_job, tmp_path):
    long_job = make_job(
        acme, "long", target_ref="tests.handlers.hold_then_report", payload={"report": str(tmp_path), "hold": 30}
    )
    short = make_job(acme, "short", overlap_policy="allow")
    enqueue.enqueue(long_job)
    worker = Worker(["default"], concurrency=10)  # the default batch (100) is larger than the slots
    try:
        drive(worker, lambda: (tmp_path / "1.started").exists())
        due = timezone.now()
        enqueue.insert_runs(enqueue.build_runs(short, [due + dt.timedelta(microseconds=i) for i in range(50)]))
        drive(worker, lambda: Run.objects.filter(job=short, state="succeeded").count() == 50, timeout=40)
        # All 50 finished while the long run still holds its slot: they did not wait for it.
        assert Run.objects.get(job=long_job).state == "leased", "the long run is still running"
    finally:
        worker.drain(0.2)  # releases the long run, whose handler then stops


def test_a_slot_its_completion_frees_under_a_tenants_cap_is_claimed_again_in_the_same_tick(acme, make_job, tmp_path):
    """A tenant held at its max_concurrent_runs: the tick that completes its runs claims their slots back at once,
    not after a poll, and not after waiting for a whole batch of free slots (issue 26: work-conserving)."""
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=3)
    long_job = make_job(
        acme, "long", target_ref="tests.handlers.hold_then_report", payload={"report": str(tmp_path), "hold": 30}
    )
    short = make_job(acme, "short", overlap_policy="allow")
    enqueue.enqueue(long_job)
    due = timezone.now()
    enqueue.insert_runs(enqueue.build_runs(short, [due + dt.timedelta(microseconds=i) for i in range(6)]))
    # Four slots, claims of four: after the two short runs complete, three slots are free, fewer than a batch.
    worker = Worker(["default"], concurrency=4, batch=4)
    waited = []
    worker.wait = lambda seconds: waited.append(seconds)  # the loop's rest, counted instead of slept
    try:
        first = worker.tick()
        assert (first.claimed, first.held) == (3, True), "the long run and two short ones: the cap of 3 is full"
        worker.rest(first, 0.05)
        assert waited == [0.05], "a claim that stopped at the cap rests until a run finishes: claiming again is futile"
        wait_until(lambda: worker.finished.qsize() == 2, message="the two short runs to finish")
        second = worker.tick()
        assert (second.completed, second.claimed) == (2, 2), "the freed slots are claimed in the completing tick"
        assert Run.objects.filter(tenant=acme, state="leased").count() == 3, "never more than the cap"
    finally:
        del worker.wait
        worker.drain(0.2)  # releases the long run, whose handler then stops


def test_a_claim_not_held_by_a_limit_is_followed_by_the_next_at_once(acme, make_job):
    job = make_job(acme, "short", overlap_policy="allow")
    due = timezone.now()
    enqueue.insert_runs(enqueue.build_runs(job, [due + dt.timedelta(microseconds=i) for i in range(6)]))
    worker = Worker(["default"], concurrency=10, batch=4)
    waited = []
    worker.wait = lambda seconds: waited.append(seconds)
    try:
        first = worker.tick()
        assert (first.claimed, first.held) == (4, False)
        worker.rest(first, 0.05)
        assert waited == [], "more may be due: the next claim follows at once"
    finally:
        del worker.wait
        worker.drain(1)


def test_it_leaves_external_runs_to_their_own_consumers(acme, make_job):
    external = make_job(acme, "pulled", target_kind="external", target_ref="")
    python = make_job(acme, "pushed")
    outside, _ = enqueue.enqueue(external)
    enqueue.enqueue(python)
    worker = Worker(["default"], concurrency=2)
    try:
        drive(worker, lambda: Run.objects.filter(job=python, state="succeeded").exists())
        assert worker.tick().claimed == 0
    finally:
        worker.drain(1)
    outside.refresh_from_db()
    assert (outside.state, outside.attempt) == ("scheduled", 0)


def failing_first(function, times, error=OperationalError("server closed the connection unexpectedly")):
    """`function`, except that its first `times` calls raise `error`."""
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            raise error
        return function(*args, **kwargs)

    flaky.calls = calls
    return flaky


def test_a_completion_that_fails_on_the_database_is_reported_again_not_lost(acme, make_job, monkeypatch):
    run, _ = enqueue.enqueue(make_job(acme, "ping"))
    monkeypatch.setattr(transitions, "complete_many", failing_first(transitions.complete_many, times=2))
    worker = Worker(["default"], concurrency=1)
    failures = []

    def tick_through_errors():
        try:
            worker.tick()
        except OperationalError as exc:  # what run_loop catches, logs and tries again a second later
            failures.append(exc)
        worker.wait(0.05)
        return Run.objects.get(pk=run.pk).state == "succeeded"

    try:
        wait_until(tick_through_errors, interval=0, message="the completion to land")
    finally:
        worker.drain(5)
    assert len(failures) == 2
    assert list(Attempt.objects.filter(run=run).values_list("outcome", flat=True)) == ["succeeded"]
    assert worker.inflight == {}


def test_heartbeats_outlive_database_errors_and_the_handler_never_sees_them(acme, make_job, monkeypatch):
    job = make_job(acme, "long", target_ref="tests.handlers.beat", payload={"seconds": 3})
    run, _ = enqueue.enqueue(job)
    # The first beats fail, whether the heartbeat thread sends them or the handler (ctx.heartbeat()).
    monkeypatch.setattr(transitions, "heartbeat", failing_first(transitions.heartbeat, times=4))
    worker = Worker(["default"], concurrency=1, lease_seconds=2, heartbeat_seconds=0.5)
    try:
        drive(worker, lambda: Run.objects.get(pk=run.pk).state == "succeeded")
        assert worker._heartbeat_thread.is_alive()
    finally:
        worker.drain(5)
        worker.pool.join(5)  # its thread closes its database connection as it ends
    assert list(Attempt.objects.filter(run=run).values_list("outcome", flat=True)) == ["succeeded"]


def test_the_heartbeat_thread_outlives_any_failure(acme, make_job, monkeypatch):
    worker = Worker(["default"], concurrency=1, heartbeat_seconds=0.1)
    beat = failing_first(worker._beat, times=3, error=RuntimeError("a bug"))
    monkeypatch.setattr(worker, "_beat", beat)
    try:
        wait_until(lambda: len(beat.calls) > 4, message="beats after the failures")
        assert worker._heartbeat_thread.is_alive()
    finally:
        worker.drain(1)


def test_it_never_heartbeats_a_run_whose_completion_is_being_committed(acme, make_job, monkeypatch):
    """A beat racing the completion would be refused (the run is no longer leased) and read as a lost lease."""
    run, _ = enqueue.enqueue(make_job(acme, "ping"))
    worker = Worker(["default"], concurrency=1, heartbeat_seconds=600)  # the thread's own beats never fall due
    beaten, complete_many, heartbeat = [], transitions.complete_many, transitions.heartbeat
    monkeypatch.setattr(
        transitions, "heartbeat", lambda run_id, *a, **k: beaten.append(run_id) or heartbeat(run_id, *a, **k)
    )

    def completing(completions):
        worker.heartbeat_seconds = 0.001  # every attempt is due for a beat now
        worker._beat()  # what the heartbeat thread would do at this moment
        worker.heartbeat_seconds = 600
        return complete_many(completions)

    monkeypatch.setattr(transitions, "complete_many", completing)
    try:
        drive(worker, lambda: Run.objects.get(pk=run.pk).state == "succeeded")
    finally:
        worker.drain(5)
    assert beaten == []
    assert not worker.inflight


@pytest.mark.parametrize("pool", POOLS)
def test_it_stops_calling_a_private_network_at_the_next_execution_once_it_is_removed(acme, make_job, make_run, pool):
    """Checked when used: the tenant's allowance as it is at each call, in both pools."""
    acme.private_networks = "127.0.0.1/32"
    acme.save()
    with serve() as url:
        job = make_job(acme, "push", cron_expr="* * * * *", target_kind="http", target_ref=url, payload={})
        minute = timezone.now().replace(second=0, microsecond=0)
        JobDefinition.objects.filter(pk=job.pk).update(created_at=minute - dt.timedelta(minutes=10))
        job.refresh_from_db()  # the ledger owes the occurrences since the job was created
        first = make_run(job, due_at=minute - dt.timedelta(minutes=2))
        worker = Worker(["default"], concurrency=1, heartbeat_seconds=1, pool=pool)
        try:
            drive(worker, lambda: Run.objects.get(pk=first.pk).state == "succeeded")
            Tenant.objects.filter(pk=acme.pk).update(private_networks="")  # a superuser removes it
            second = make_run(job, due_at=minute - dt.timedelta(minutes=1))
            drive(worker, lambda: Run.objects.get(pk=second.pk).state == "dead")
        finally:
            worker.drain(5)
        assert len(Receiver.seen) == 1, "the second run sent nothing"
    refused = "refused: not a public address (Duetime calls public addresses only, unless an operator allows"
    assert refused in Run.objects.get(pk=second.pk).last_error
    entries = ledger.ledger(job, minute - dt.timedelta(minutes=2), minute, timezone.now()).entries
    assert [(e.fate, refused in e.detail) for e in entries] == [("ran", False), ("dead", True)]


def test_a_pool_thread_outlives_whatever_its_task_raises_and_the_pool_keeps_its_size():
    pool = SlotThreads(2)
    met = queue.SimpleQueue()
    barrier = threading.Barrier(2, timeout=10)

    def ends():
        raise SystemExit(1)  # the worker's _execute never raises: the pool's own last line of defence

    try:
        for _ in range(3):
            pool.submit(ends)
        for _ in range(2):  # two tasks that can only finish together: both slots are still there
            pool.submit(lambda: met.put(barrier.wait()))
        assert sorted(met.get(timeout=15) for _ in range(2)) == [0, 1]
    finally:
        pool.shutdown()
        pool.join(5)


@pytest.mark.parametrize("pool", POOLS)
def test_it_calls_an_http_job_as_defined_and_signed_in_both_pools(acme, pool, settings):
    """The worker reads the batch's calls with the attempts (a child process gets them with its attempt):
    the method, the job's headers, the bearer secret's value and the signature a receiver verifies."""
    from jobs.definitions import save_definition
    from tests.runs.test_targets_http import Receiver as Signed
    from tests.runs.test_targets_http import Recipe, stamp

    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-acme"}}
    acme.private_networks = "127.0.0.1/32"
    acme.save()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Signed)
    Signed.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fields = dict(http_method="PUT", http_headers={"X-Team": "billing"}, http_bearer_secret="billing-api")
    url = f"http://127.0.0.1:{server.server_port}/hooks/export"
    job = JobDefinition(
        tenant=acme, name="push", schedule_kind="none", target_kind="http", target_ref=url, payload={"a": 1}, **fields
    )
    job, _ = save_definition(job, "test")
    run, _ = enqueue.enqueue(job)
    worker = Worker(["default"], concurrency=1, heartbeat_seconds=1, pool=pool)
    try:
        drive(worker, lambda: Run.objects.get(pk=run.pk).state == "succeeded")
    finally:
        worker.drain(5)
        server.shutdown()
        server.server_close()
    (request,) = Signed.seen
    headers = request["headers"]
    assert (request["method"], request["body"]) == ("PUT", b'{"a": 1}')
    assert (headers["X-Team"], headers["Authorization"]) == ("billing", "Bearer tok-acme")
    assert headers["X-Duetime-Run-Id"] == str(run.pk) and headers["Idempotency-Key"] == run.idempotency_key
    assert Recipe().verify(job.issued_signing_secret, request, now=stamp(request))
