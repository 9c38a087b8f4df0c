"""Every move of the run state machine, on both databases.

Time is pinned: each test passes `now` explicitly, so the database clock is
never consulted (PostgreSQL's now() cannot be frozen from Python).
"""

import datetime as dt
import random

import pytest
from django.db import connection, transaction

from dlq.models import DeadLetter
from runs import claims, transitions
from runs.models import Attempt, Run
from runs.transitions import TRANSITIONS, Completion, StaleLease
from tests.conftest import is_postgres  # noqa: F401 (the skipif conditions below)
from tests.runs import moving

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)


def at(seconds):
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def job(acme, make_job):
    return make_job(
        acme, "billing.export", overlap_policy="allow", max_attempts=3, retry_base_seconds=10, retry_max_seconds=60
    )


def lease_one(job, make_run, now=at(0), **fields):
    run = make_run(job, due_at=fields.pop("due_at", T0), **fields)
    (lease,) = claims.claim(["default"], 1, "w-alice", now=now)
    assert lease.run_id == run.pk
    return run, lease


def state(run):
    run.refresh_from_db()
    return run.state


def test_it_leases_a_due_run_with_a_fresh_token_and_a_lease_expiry(job, make_run):
    run, lease = lease_one(job, make_run, now=at(1))
    run.refresh_from_db()
    assert run.state == "leased" and run.attempt == 1
    assert run.fencing_token == lease.fencing_token
    assert run.lease_expires_at == at(31)
    assert run.started_at == at(1)


def test_leases_come_back_in_the_order_the_claim_chose_whatever_plan_the_database_picks(job, make_run):
    """The claim's order (priority, round-robin, due) is the order a worker starts them and a dispatcher
    publishes them. An UPDATE returns its rows in the order of its plan: under load the planner picked
    another join, and a dispatcher published a backlog out of due order."""
    runs = [make_run(job, due_at=at(-60 + i)) for i in range(6)]
    chosen = [run.pk for run in reversed(runs)]
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL enable_nestloop = off")  # another join, as the planner may pick
        leases = transitions.lease_runs(chosen, "w-alice", 30, now=at(0))
    assert [lease.run_id for lease in leases] == chosen


def test_it_never_leases_a_run_before_it_is_available(job, make_run):
    make_run(job, due_at=at(10))
    assert claims.claim(["default"], 10, "w", now=at(9.999)) == []
    assert len(claims.claim(["default"], 10, "w", now=at(10))) == 1


def test_it_succeeds_and_records_the_attempt_in_the_same_transaction(job, make_run):
    run, lease = lease_one(job, make_run)
    assert transitions.complete(run.pk, lease.fencing_token, "succeeded", now=at(2)) == "succeeded"
    run.refresh_from_db()
    assert run.finished_at == at(2) and run.lease_expires_at is None
    (attempt,) = Attempt.objects.filter(run=run)
    assert (attempt.outcome, attempt.fencing_token, attempt.started_at, attempt.ended_at) == (
        "succeeded",
        lease.fencing_token,
        at(0),
        at(2),
    )
    assert attempt.lateness == dt.timedelta(0)


def test_it_retries_a_failure_after_a_backoff_and_keeps_the_due_time(job, make_run):
    run, lease = lease_one(job, make_run)
    assert transitions.complete(run.pk, lease.fencing_token, "failed", "boom", now=at(5)) == "retry_wait"
    run.refresh_from_db()
    assert run.due_at == T0
    assert at(5) <= run.available_at <= at(5 + 10)  # full jitter before retry 1: uniform(0, 10)
    assert run.last_error == "boom"
    assert claims.claim(["default"], 1, "w", now=run.available_at - dt.timedelta(milliseconds=1)) == []
    (again,) = claims.claim(["default"], 1, "w", now=run.available_at)
    assert again.attempt == 2 and again.fencing_token > lease.fencing_token


def test_it_dead_letters_a_run_that_exhausts_its_attempts(job, make_run):
    run = make_run(job, due_at=T0)
    clock = 0
    for attempt in (1, 2, 3):
        clock += 100
        (lease,) = claims.claim(["default"], 1, "w", now=at(clock))
        assert lease.attempt == attempt
        moved = transitions.complete(run.pk, lease.fencing_token, "failed", f"boom {attempt}", now=at(clock + 1))
    assert moved == "dead"
    letter = DeadLetter.objects.get(run=run)
    assert letter.last_error == "boom 3" and letter.is_open
    assert Attempt.objects.filter(run=run).count() == 3


def test_it_skips_the_remaining_attempts_on_a_permanent_error(job, make_run):
    run, lease = lease_one(job, make_run)
    assert (
        transitions.complete(run.pk, lease.fencing_token, "failed", "bad input", retryable=False, now=at(1)) == "dead"
    )
    assert DeadLetter.objects.filter(run=run).exists()


def test_it_refuses_a_stale_token_on_heartbeat_and_complete(job, make_run):
    run, lease = lease_one(job, make_run)
    with pytest.raises(StaleLease):
        transitions.heartbeat(run.pk, lease.fencing_token - 1, 30, now=at(1))
    with pytest.raises(StaleLease):
        transitions.complete(run.pk, lease.fencing_token - 1, "succeeded", now=at(1))
    assert state(run) == "leased"
    assert not Attempt.objects.exists()


def test_it_extends_a_lease_but_never_past_the_timeout(acme, make_job, make_run):
    job = make_job(acme, "short", overlap_policy="allow", timeout_seconds=40)
    run, lease = lease_one(job, make_run)
    assert transitions.heartbeat(run.pk, lease.fencing_token, 30, now=at(5)) == at(35)
    assert transitions.heartbeat(run.pk, lease.fencing_token, 30, now=at(20)) == at(40)


def test_it_reaps_an_expired_lease_into_a_retry_then_refuses_the_old_holder(job, make_run):
    run, lease = lease_one(job, make_run)
    assert transitions.reap(now=at(30)) == {}  # expires at 30, not before
    assert transitions.reap(now=at(31)) == {run.pk: "retry_wait"}
    assert Attempt.objects.get(run=run).outcome == "lease_expired"
    with pytest.raises(StaleLease):
        transitions.complete(run.pk, lease.fencing_token, "succeeded", now=at(32))


def test_it_reaps_the_last_attempt_into_the_dead_letter_queue(acme, make_job, make_run):
    job = make_job(acme, "once", overlap_policy="allow", max_attempts=1)
    run, _ = lease_one(job, make_run)
    assert transitions.reap(now=at(100)) == {run.pk: "dead"}
    assert DeadLetter.objects.get(run=run).last_error == "lease expired"


def test_it_records_a_timeout_when_the_lease_ran_out_at_the_timeout(acme, make_job, make_run):
    job = make_job(acme, "slow", overlap_policy="allow", timeout_seconds=10)
    run, lease = lease_one(job, make_run)
    assert lease.lease_expires_at == at(10)  # the lease never outlives the timeout
    transitions.reap(now=at(11))
    assert Attempt.objects.get(run=run).outcome == "timed_out"


def test_it_replays_a_dead_run_with_the_same_key_and_a_fresh_budget(acme, make_job, make_run):
    job = make_job(acme, "once", overlap_policy="allow", max_attempts=1)
    run, lease = lease_one(job, make_run)
    key = run.idempotency_key
    transitions.complete(run.pk, lease.fencing_token, "failed", "boom", now=at(1))
    letter = DeadLetter.objects.get(run=run)
    assert transitions.replay(letter, actor="user:alice", now=at(50))
    run.refresh_from_db()
    assert (run.state, run.idempotency_key, run.max_attempts, run.available_at) == ("scheduled", key, 2, at(50))
    (again,) = claims.claim(["default"], 1, "w", now=at(50))
    assert again.attempt == 2 and again.idempotency_key == key
    assert not transitions.replay(letter, actor="user:alice", now=at(51)), "a dead letter replays once"


def test_it_discards_a_dead_letter_once(acme, make_job, make_run):
    job = make_job(acme, "once", overlap_policy="allow", max_attempts=1)
    run, lease = lease_one(job, make_run)
    transitions.complete(run.pk, lease.fencing_token, "failed", "boom", now=at(1))
    letter = DeadLetter.objects.get(run=run)
    assert transitions.discard(letter, actor="user:alice")
    assert not transitions.discard(letter, actor="user:alice")
    assert not transitions.replay(letter, actor="user:alice")
    assert state(run) == "dead"


def test_it_cancels_a_scheduled_run_with_a_reason(job, make_run):
    run = make_run(job, due_at=at(60))
    assert transitions.cancel_run(run, reason="not needed", now=at(1))
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "not needed")
    assert claims.claim(["default"], 1, "w", now=at(61)) == []


def test_it_cancels_a_leased_run_so_its_holder_is_refused(job, make_run):
    run, lease = lease_one(job, make_run)
    assert transitions.cancel_run(run, reason="operator", now=at(1))
    with pytest.raises(StaleLease):
        transitions.heartbeat(run.pk, lease.fencing_token, 30, now=at(2))
    assert Attempt.objects.get(run=run).outcome == "stale"
    assert not transitions.cancel_run(run, reason="again", now=at(3)), "a finished run is not cancelled twice"


def test_it_releases_an_unfinished_lease_without_spending_the_attempt(job, make_run):
    run, lease = lease_one(job, make_run)
    assert transitions.release(run.pk, lease.fencing_token, now=at(2)) == 1
    run.refresh_from_db()
    assert (run.state, run.attempt) == ("scheduled", 0)
    (again,) = claims.claim(["default"], 1, "w", now=at(2))
    assert again.attempt == 1 and again.fencing_token > lease.fencing_token


def test_it_keeps_the_idempotency_key_across_attempts_reaps_and_replays(acme, make_job, make_run):
    job = make_job(acme, "keyed", overlap_policy="allow", max_attempts=2, retry_base_seconds=0, retry_max_seconds=0)
    run = make_run(job, due_at=T0)
    keys = []
    (lease,) = claims.claim(["default"], 1, "w", now=at(1))
    keys.append(lease.idempotency_key)
    transitions.reap(now=at(100))  # attempt 1 lost its lease
    (lease,) = claims.claim(["default"], 1, "w", now=at(100))
    keys.append(lease.idempotency_key)
    transitions.complete(run.pk, lease.fencing_token, "failed", "boom", now=at(101))  # attempt 2 fails: dead
    transitions.replay(DeadLetter.objects.get(run=run), actor="user:alice", now=at(200))
    (lease,) = claims.claim(["default"], 1, "w", now=at(200))
    keys.append(lease.idempotency_key)
    assert keys == [run.idempotency_key] * 3


def test_it_draws_backoff_from_full_jitter():
    rng = random.Random(7)
    draws = [transitions.backoff_seconds(4, base=30, most=1800, rng=rng) for _ in range(2000)]
    assert 0 <= min(draws) < 20 and 220 < max(draws) <= 240  # uniform(0, 30 * 2**3)
    capped = [transitions.backoff_seconds(20, base=30, most=1800, rng=rng) for _ in range(200)]
    assert max(capped) <= 1800


def test_every_listed_transition_leaves_a_known_state():
    states = set(Run.State.values)
    assert {a for a, _ in TRANSITIONS} | {b for _, b in TRANSITIONS} <= states
    finals = {"succeeded", "cancelled", "skipped"}
    assert not any(source in finals for source, _ in TRANSITIONS), "terminal states have no way out"


def test_it_completes_a_batch_and_reports_the_stale_ones(job, make_run):
    runs = [make_run(job, due_at=at(i)) for i in range(3)]
    leases = claims.claim(["default"], 3, "w", now=at(10))
    stale = Completion(leases[0].run_id, leases[0].fencing_token - 100, "succeeded")
    moved = transitions.complete_many(
        [stale] + [Completion(lease.run_id, lease.fencing_token, "succeeded") for lease in leases[1:]], now=at(11)
    )
    assert moved == {leases[1].run_id: "succeeded", leases[2].run_id: "succeeded"}
    assert {state(r) for r in runs} == {"leased", "succeeded"}


def test_a_move_not_in_the_table_raises_before_anything_moves(job, make_run):
    run = make_run(job, state="succeeded", due_at=T0)
    with pytest.raises(transitions.IllegalMove, match="succeeded -> scheduled"):
        transitions._move(Run.objects.filter(pk=run.pk), Run.State.SUCCEEDED, Run.State.SCHEDULED, available_at=at(1))
    assert state(run) == "succeeded"


def test_a_function_cannot_declare_a_move_not_in_the_table():
    with pytest.raises(transitions.IllegalMove, match="skipped -> leased"):
        transitions.moves((Run.State.SKIPPED, Run.State.LEASED))


def test_every_listed_move_is_made_by_a_declared_function_and_nothing_else():
    declared = set()
    for function in vars(transitions).values():
        declared |= getattr(function, "moves", frozenset())
    assert declared == set(TRANSITIONS)


def test_it_stores_a_handlers_error_with_its_credentials_redacted(job, make_run):
    run, lease = lease_one(job, make_run)
    error = "Traceback ...\nOperationalError: postgres://billing:hunter2@db.internal/x refused AKIAIOSFODNN7EXAMPLE"
    assert transitions.complete(run.pk, lease.fencing_token, "failed", error, retryable=False, now=at(1)) == "dead"
    expected = "Traceback ...\nOperationalError: postgres://billing:[REDACTED]@db.internal/x refused [REDACTED]"
    run.refresh_from_db()
    assert run.last_error == expected
    assert Attempt.objects.get(run=run).error == expected
    assert DeadLetter.objects.get(run=run).last_error == expected


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif("not is_postgres()", reason="rows move between partitions on PostgreSQL only")
@pytest.mark.parametrize("racer", ["heartbeat", "complete"])
def test_a_call_that_waited_for_the_completion_moving_its_run_into_history_is_told_stale(job, make_run, racer):
    # PostgreSQL refuses to lock a row that moved partitions under it (a serialization error); the
    # transition runs once more, finds the run gone from the open partition, and says stale.
    run, lease = lease_one(job, make_run)

    def racing():
        if racer == "heartbeat":
            transitions.heartbeat(run.pk, lease.fencing_token, 30, now=at(3))
        else:
            transitions.complete(run.pk, lease.fencing_token, "succeeded", now=at(3))

    told = moving.race_a_completion(
        run.pk, lease.fencing_token, at(2), racing, waiting_for="the second call to wait for the completion's row lock"
    )
    assert told == "stale"
    assert Run.objects.get(pk=run.pk).state == "succeeded"
    assert Attempt.objects.filter(run=run).count() == 1
