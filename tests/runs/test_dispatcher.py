"""run_dispatcher's step (runs.dispatcher) and the Celery task it feeds (runs.celery_task), in process.

The broker here is kombu's in-memory transport, read back by the test; the
real RabbitMQ and Redis brokers and real Celery workers are in
tests/acceptance/test_celery.py. The clock is pinned (`now=`) for the claim.
"""

import datetime as dt
import json

import pytest
from celery import Celery

from jobs.models import Tenant
from runs import celery_task, presence, transitions
from runs.dispatcher import (
    BATCH_GRACE_SECONDS,
    BATCH_TASK_NAME,
    LINGER_SECONDS,
    TASK_NAME,
    Dispatcher,
    TickResult,
    broker_app,
    message,
    pack,
    task_id,
)
from runs.loop import RETRY_SECONDS
from runs.models import Attempt, Run


@pytest.fixture
def broker():
    """A Celery app on a fresh in-memory broker, with duetime.execute installed (run eagerly by the tests)."""
    app = Celery("test-dispatcher", broker="memory://", set_as_current=False)
    app.conf.task_ignore_result = True
    celery_task.install(app)
    yield app
    published(app, "billing")  # the in-memory broker outlives the test: leave its queue empty


def published(app, queue):
    """The messages waiting in `queue` as (headers, kwargs), taken off the broker."""
    found = []
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue(queue, no_ack=True)
        while simple.qsize():
            msg = simple.get(timeout=1)
            args, kwargs, _embed = msg.payload
            found.append((msg.headers, kwargs))
        simple.close()
    return found


@pytest.fixture
def export(acme, make_job):
    return make_job(
        acme,
        "billing.export",
        target_kind="celery",
        target_ref="tests.handlers.noop",
        queue="billing",
        overlap_policy="allow",
    )


def test_it_publishes_each_due_celery_run_once_with_no_delay(broker, export, make_run, clock):
    runs = [make_run(export, due_at=clock.ago(seconds=s)) for s in (3, 2, 1)]
    dispatcher = Dispatcher(["billing"], dispatcher_id="d-1", app=broker)
    result = dispatcher.tick(now=clock.now)
    assert (result.claimed, result.published, result.released) == (3, 3, 0)
    messages = published(broker, "billing")
    assert sorted(kwargs["run_id"] for _, kwargs in messages) == sorted(run.pk for run in runs)
    for headers, kwargs in messages:
        run = Run.objects.get(pk=kwargs["run_id"])
        assert headers["task"] == TASK_NAME
        assert headers["id"] == f"duetime-{run.pk}-{run.fencing_token}"
        assert headers["eta"] is None and headers["expires"] is None and "countdown" not in headers
        assert headers["timelimit"] == [export.timeout_seconds, None]  # [hard, soft]: Celery kills past it
        assert kwargs["fencing_token"] == run.fencing_token and kwargs["dispatched_by"] == "d-1"
        assert kwargs["idempotency_key"] == run.idempotency_key
        assert run.state == "leased" and run.worker_id == "d-1"
    assert dispatcher.tick(now=clock.now).claimed == 0  # each run is published once


def test_it_leaves_runs_not_yet_due_and_other_kinds_to_their_consumers(broker, acme, export, make_job, make_run, clock):
    python = make_job(acme, "billing.python", target_ref="tests.handlers.noop", queue="billing")
    later = make_run(export, due_at=clock.ahead(seconds=1))
    other = make_run(python, due_at=clock.ago(seconds=5))
    assert Dispatcher(["billing"], dispatcher_id="d-1", app=broker).tick(now=clock.now).claimed == 0
    assert published(broker, "billing") == []
    assert {r.state for r in Run.objects.filter(pk__in=[later.pk, other.pk])} == {"scheduled"}


def test_it_releases_the_runs_the_broker_did_not_take(export, make_run, clock):
    run = make_run(export, due_at=clock.ago(seconds=1))
    nowhere = broker_app("amqp://guest:guest@127.0.0.1:1//")  # nothing listens there
    result = Dispatcher(["billing"], dispatcher_id="d-1", app=nowhere).tick(now=clock.now)
    assert (result.claimed, result.published, result.released, result.failed) == (1, 0, 1, True)
    run.refresh_from_db()
    # Claimable again at once, the attempt not counted: the broker's failure is not the handler's.
    assert (run.state, run.attempt, run.lease_expires_at) == ("scheduled", 0, None)
    assert "broker did not take the message" in run.last_error


def test_it_keeps_at_most_its_ahead_published_and_not_yet_started(broker, export, make_run, clock):
    for s in range(5):
        make_run(export, due_at=clock.ago(seconds=s + 1))
    dispatcher = Dispatcher(["billing"], dispatcher_id="d-1", ahead=2, app=broker)
    assert dispatcher.tick(now=clock.now).claimed == 2
    assert dispatcher.tick(now=clock.now).claimed == 0  # two wait for a Celery worker
    first = Run.objects.filter(worker_id="d-1").first()
    transitions.start_attempt(first.pk, first.fencing_token, "celery@h/t", 30, dispatched_by="d-1", now=clock.now)
    assert dispatcher.tick(now=clock.now).claimed == 1


def test_it_waits_for_half_its_room_ahead_before_claiming_again(broker, export, make_run, clock):
    # Celery workers that are behind free the room ahead one run at a time: the dispatcher does not
    # spend a claim and a broker confirm on each run, it claims again once half the room is free.
    for s in range(6):
        make_run(export, due_at=clock.ago(seconds=s + 1))
    dispatcher = Dispatcher(["billing"], dispatcher_id="d-1", ahead=4, app=broker)
    assert dispatcher.tick(now=clock.now).claimed == 4
    published = list(Run.objects.filter(worker_id="d-1"))
    for run in published[:2]:
        transitions.start_attempt(run.pk, run.fencing_token, "celery@h/t", 30, dispatched_by="d-1", now=clock.now)
        result = dispatcher.tick(now=clock.now)
        if run is published[0]:
            assert (result.claimed, result.waiting) == (0, 3)  # one free of four: not worth a claim
    assert result.claimed == 2  # two free: both remaining runs claimed in one go


def test_it_claims_again_at_once_after_a_full_batch_and_lingers_after_a_smaller_one(broker, export, make_run, clock):
    # Runs falling due one after another are claimed a few dozen at a time, not each as it falls due.
    for s in range(5):
        make_run(export, due_at=clock.ago(seconds=s + 1))
    dispatcher = Dispatcher(["billing"], dispatcher_id="d-1", batch=3, app=broker)
    full, partial, idle = (dispatcher.tick(now=clock.now) for _ in range(3))
    assert (full.claimed, partial.claimed, idle.claimed) == (3, 2, 0)
    assert dispatcher.rest(full, poll=0.5) == 0  # more may be due: claim again at once
    assert dispatcher.rest(partial, poll=0.5) == LINGER_SECONDS > 0
    assert dispatcher.rest(partial, poll=0.01) == 0.01  # never longer than the poll
    assert dispatcher.rest(idle, poll=0.5) == 0.5
    assert dispatcher.rest(TickResult(claimed=3, published=1, released=2), poll=0.5) == RETRY_SECONDS


def test_it_lets_one_executor_take_over_a_lease_once(export, make_run, clock):
    run = make_run(export, due_at=clock.ago(seconds=1))
    [lease] = transitions.lease_runs([run.pk], "d-1", 30, now=clock.now)
    token = lease.fencing_token
    with pytest.raises(transitions.StaleLease):  # a message of an older lease
        transitions.start_attempt(run.pk, token - 1, "celery@a/x", 30, dispatched_by="d-1", now=clock.now)
    later = clock.now + dt.timedelta(seconds=2)
    expires = transitions.start_attempt(run.pk, token, "celery@a/x", 30, dispatched_by="d-1", now=later)
    assert expires == later + dt.timedelta(seconds=30)
    run.refresh_from_db()
    assert (run.worker_id, run.started_at) == ("celery@a/x", later)
    with pytest.raises(transitions.StaleLease):  # the same message delivered again
        transitions.start_attempt(run.pk, token, "celery@b/x", 30, dispatched_by="d-1", now=later)


def test_it_runs_the_handler_with_the_duetime_context_and_completes(broker, acme, make_job, make_run, tmp_path):
    job = make_job(
        acme, "billing.echo", target_kind="celery", target_ref="tests.handlers.echo", payload={"report": "x"}
    )
    report = tmp_path / "seen.json"
    run = make_run(job, payload={"report": str(report), "invoice": 7})
    [lease] = transitions.lease_runs([run.pk], "d-1", 30)
    assert broker.tasks[TASK_NAME].apply(kwargs=message(lease, "d-1"), task_id=task_id(lease)).get() == "succeeded"
    run.refresh_from_db()
    assert run.state == "succeeded"
    seen = json.loads(report.read_text())
    assert seen["payload"] == {"invoice": 7}
    assert (seen["idempotency_key"], seen["fencing_token"]) == (run.idempotency_key, lease.fencing_token)
    attempt = Attempt.objects.get(run=run)
    assert celery_task.executor(attempt.worker_id)[1] == f"duetime-{run.pk}-{lease.fencing_token}"


@pytest.mark.parametrize("carries_the_tenant", [True, False])  # False: a message published by an older dispatcher
def test_it_fails_a_run_whose_module_prefix_the_tenant_lost_without_calling_it(
    broker, acme, make_job, make_run, tmp_path, carries_the_tenant
):
    job = make_job(
        acme, "billing.echo", target_kind="celery", target_ref="tests.handlers.echo", payload={"report": "x"}
    )
    report = tmp_path / "seen.json"
    run = make_run(job, payload={"report": str(report)})
    [lease] = transitions.lease_runs([run.pk], "d-1", 30)
    Tenant.objects.filter(pk=acme.pk).update(task_module_prefixes="billing.tasks")  # a superuser's edit
    kwargs = message(lease, "d-1")
    if not carries_the_tenant:
        del kwargs["tenant_id"]

    assert broker.tasks[TASK_NAME].apply(kwargs=kwargs, task_id=task_id(lease)).get() == "dead"  # no retry

    run.refresh_from_db()
    assert run.state == "dead" and not report.exists()
    assert run.last_error.startswith("permission revoked: its tenant may no longer run tasks from 'tests.handlers'")


def test_it_drops_a_message_whose_lease_was_reaped(broker, export, make_run, clock):
    run = make_run(export)
    [old] = transitions.lease_runs([run.pk], "d-1", 30)
    transitions.reap(now=old.lease_expires_at + dt.timedelta(seconds=1))
    [new] = transitions.lease_runs([run.pk], "d-1", 30)
    assert broker.tasks[TASK_NAME].apply(kwargs=message(old, "d-1")).get() == "stale"
    assert Run.objects.get(pk=run.pk).worker_id == "d-1"  # the current lease still waits for its own message
    assert new.fencing_token > old.fencing_token


def test_it_refuses_a_completion_once_the_lease_is_gone(export, make_run):
    run = make_run(export)
    [lease] = transitions.lease_runs([run.pk], "d-1", 30)
    transitions.start_attempt(run.pk, lease.fencing_token, "celery@a/x", 30, dispatched_by="d-1")
    transitions.cancel_run(run, reason="operator")
    assert celery_task.complete([transitions.Completion(run.pk, lease.fencing_token, "succeeded")]) == {}
    assert not Attempt.objects.filter(run=run, outcome="succeeded").exists()


@pytest.mark.parametrize(
    "worker_id, expected",
    [
        ("celery@billing-1/duetime-12-345", ("celery@billing-1", "duetime-12-345")),
        ("celery@billing-1/duetime-12-345+15", ("celery@billing-1", "duetime-12-345+15")),  # a batch message
        ("billing-1:4242", None),  # a run_worker
        ("", None),
    ],
)
def test_it_tells_a_celery_execution_from_the_worker_id(worker_id, expected):
    assert celery_task.executor(worker_id) == expected


def test_it_announces_that_it_takes_celery_runs_and_withdraws_on_stop(broker, export, clock):
    dispatcher = Dispatcher(["billing"], dispatcher_id="d-1", app=broker)
    dispatcher.tick(now=clock.now)
    assert presence.serving("celery", "billing")
    assert not presence.serving("python", "billing") and not presence.serving("celery", "reports")
    dispatcher.forget()
    assert not presence.serving("celery", "billing")


# --- batches: several runs of one queue per message once a backlog forms ------------------------------


def test_it_packs_runs_of_one_queue_only_once_more_wait_than_the_workers_take_ahead():
    leases = [transitions_lease(i, "billing" if i % 3 else "reports") for i in range(1, 13)]
    singles = pack(leases[:8], waiting=0, prefetch=8, most=16)
    assert [len(m) for m in singles] == [1] * 8  # the workers take each as it comes: one run per message
    packed = pack(leases, waiting=20, prefetch=8, most=16)  # 32 waiting or coming for 8 taken ahead: 4 a message
    assert all(len({lease.queue for lease in m}) == 1 for m in packed)  # one queue per message
    assert [lease.run_id for m in packed for lease in m if lease.queue == "billing"] == [
        lease.run_id for lease in leases if lease.queue == "billing"
    ]  # claim order kept
    assert max(len(m) for m in packed) == 4
    assert max(len(m) for m in pack(leases, waiting=1000, prefetch=8, most=5)) == 5  # never past `most`
    assert [len(m) for m in pack(leases, waiting=1000, prefetch=8, most=1)] == [1] * 12  # packing off


def transitions_lease(run_id, queue):
    """A Lease with only what `pack` reads filled in."""
    return transitions.Lease(run_id, 1, 1, "j", "celery", "t", queue, 1, 1, "k", run_id, {}, *[None] * 4, 60)


def test_it_publishes_a_backlog_as_batch_messages_each_run_with_its_own_token(
    broker, export, make_run, clock, settings
):
    settings.DUETIME_DISPATCH_PREFETCH = 2
    runs = [make_run(export, due_at=clock.ago(seconds=20 - s)) for s in range(10)]
    result = Dispatcher(["billing"], dispatcher_id="d-1", pack=4, app=broker).tick(now=clock.now)
    assert (result.claimed, result.published, result.released) == (10, 10, 0)
    messages = published(broker, "billing")
    assert [len(kwargs["runs"]) for _, kwargs in messages] == [4, 4, 2]  # 10 for 2 taken ahead: 4 a message
    assert [r["run_id"] for _, kwargs in messages for r in kwargs["runs"]] == [run.pk for run in runs]  # due order
    for headers, kwargs in messages:
        first = kwargs["runs"][0]
        assert headers["task"] == BATCH_TASK_NAME and kwargs["dispatched_by"] == "d-1"
        assert headers["id"] == f"duetime-{first['run_id']}-{first['fencing_token']}+{len(kwargs['runs']) - 1}"
        assert headers["eta"] is None and headers["expires"] is None
        assert headers["timelimit"] == [export.timeout_seconds * len(kwargs["runs"]) + BATCH_GRACE_SECONDS, None]
        for r in kwargs["runs"]:
            assert r["fencing_token"] == Run.objects.get(pk=r["run_id"]).fencing_token


def test_a_batch_takes_its_runs_over_at_once_runs_each_and_completes_each_with_its_own_token(
    broker, export, make_run, clock, settings
):
    settings.DUETIME_DISPATCH_PREFETCH = 1
    runs = [make_run(export, due_at=clock.ago(seconds=5 - s)) for s in range(4)]
    Dispatcher(["billing"], dispatcher_id="d-1", pack=4, app=broker).tick(now=clock.now)
    [(headers, kwargs)] = published(broker, "billing")
    assert broker.tasks[BATCH_TASK_NAME].apply(kwargs=kwargs, task_id=headers["id"]).get() == {
        run.pk: "succeeded" for run in runs
    }
    for run, sent in zip(runs, kwargs["runs"], strict=True):
        run.refresh_from_db()
        [attempt] = Attempt.objects.filter(run=run)
        assert run.state == "succeeded" and attempt.fencing_token == sent["fencing_token"]
        assert celery_task.executor(attempt.worker_id)[1] == headers["id"]  # the batch's task, on every run
    # The same message delivered again (a worker lost before its ack) runs nothing twice.
    assert broker.tasks[BATCH_TASK_NAME].apply(kwargs=kwargs, task_id=headers["id"]).get() == {}
    assert Attempt.objects.filter(run__in=runs).count() == 4


def test_a_batch_skips_the_runs_cancelled_or_reaped_before_it_started(broker, export, make_run, clock, settings):
    settings.DUETIME_DISPATCH_PREFETCH = 1
    runs = [make_run(export, due_at=clock.ago(seconds=5 - s)) for s in range(3)]
    Dispatcher(["billing"], dispatcher_id="d-1", pack=3, app=broker).tick(now=clock.now)
    [(headers, kwargs)] = published(broker, "billing")
    transitions.cancel_run(Run.objects.get(pk=runs[1].pk), reason="operator")
    outcomes = broker.tasks[BATCH_TASK_NAME].apply(kwargs=kwargs, task_id=headers["id"]).get()
    assert outcomes == {runs[0].pk: "succeeded", runs[2].pk: "succeeded"}
    assert Run.objects.get(pk=runs[1].pk).state == "cancelled"
    assert not Attempt.objects.filter(run=runs[1], outcome="succeeded").exists()


def test_a_take_over_of_many_takes_each_lease_once_and_only_from_its_dispatcher(export, make_run, clock):
    runs = [make_run(export, due_at=clock.ago(seconds=s + 1)) for s in range(3)]
    leases = transitions.lease_runs([run.pk for run in runs], "d-1", 30, now=clock.now)
    pairs = [(lease.run_id, lease.fencing_token) for lease in leases]
    stale = [(pairs[0][0], pairs[0][1] - 1), *pairs[1:]]  # the first of an older lease
    later = clock.now + dt.timedelta(seconds=2)
    taken = transitions.start_attempts(stale, "celery@a/x", 30, dispatched_by="d-1", now=later)
    assert taken == {run_id: later + dt.timedelta(seconds=30) for run_id, _ in pairs[1:]}
    assert transitions.start_attempts(pairs, "celery@b/y", 30, dispatched_by="d-1", now=later) == {
        pairs[0][0]: later + dt.timedelta(seconds=30)
    }  # the others are held by celery@a/x now
    # Stamped again by its own holder: the start and the lease count from then.
    again = later + dt.timedelta(seconds=5)
    assert transitions.start_attempts(pairs[1:], "celery@a/x", 30, dispatched_by="celery@a/x", now=again) == {
        run_id: again + dt.timedelta(seconds=30) for run_id, _ in pairs[1:]
    }
    assert Run.objects.get(pk=pairs[1][0]).started_at == again


def test_a_batch_reads_its_tenants_prefixes_as_it_starts_and_fails_a_revoked_run_without_calling_it(
    broker, acme, make_job, make_run, clock, tmp_path, settings
):
    settings.DUETIME_DISPATCH_PREFETCH = 1
    job = make_job(
        acme, "billing.echo", target_kind="celery", target_ref="tests.handlers.echo", payload={"report": "x"},
        queue="billing", overlap_policy="allow",
    )  # fmt: skip
    reports = [tmp_path / f"seen-{s}.json" for s in range(2)]
    runs = [make_run(job, due_at=clock.ago(seconds=5 - s), payload={"report": str(r)}) for s, r in enumerate(reports)]
    Dispatcher(["billing"], dispatcher_id="d-1", pack=2, app=broker).tick(now=clock.now)
    [(headers, kwargs)] = published(broker, "billing")
    Tenant.objects.filter(pk=acme.pk).update(task_module_prefixes="billing.tasks")  # a superuser's edit
    assert broker.tasks[BATCH_TASK_NAME].apply(kwargs=kwargs, task_id=headers["id"]).get() == {
        run.pk: "dead" for run in runs
    }
    for run, report in zip(runs, reports, strict=True):
        run.refresh_from_db()
        assert run.last_error.startswith("permission revoked") and not report.exists()
