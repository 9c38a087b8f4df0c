"""The restore generation: tokens after a restore exceed every earlier one, and older ones are stale.

Time is pinned where a lease is taken (`now`); the bump itself is the
database's. The restore drills (tests/acceptance/test_restore.py,
test_backups.py, test_ha.py) restore and promote for real.
"""

import datetime as dt
import threading

import pytest
from django.core.management import call_command
from django.db import connection

from runs import claims, generations, transitions
from runs.models import Generation, Run
from runs.transitions import Completion, StaleLease
from tests.runs import moving

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="a server to follow is PostgreSQL's")


@pytest.fixture
def job(acme, make_job):
    return make_job(acme, "billing.export", overlap_policy="allow", max_attempts=3)


def lease_one(job, make_run, due_at=T0):
    run = make_run(job, due_at=due_at)
    (lease,) = claims.claim(["default"], 1, "w-alice", now=T0)
    assert lease.run_id == run.pk
    return run, lease


def test_it_issues_every_token_after_a_bump_above_every_token_before(job, make_run):
    _, before = lease_one(job, make_run)
    number, reason = generations.bump_generation("restored last night's backup")
    _, after = lease_one(job, make_run, due_at=T0 - dt.timedelta(minutes=1))
    assert number >= 1 and reason == "restored last night's backup"
    assert after.fencing_token >= generations.first_token(number) > before.fencing_token
    assert generations.generation_of(after.fencing_token) == number == generations.current()


def test_it_moves_on_from_the_highest_token_issued_even_past_the_recorded_generation(job, make_run):
    first, _ = generations.bump_generation("one")
    second, _ = generations.bump_generation("two")
    assert second == first + 1


def test_it_refuses_the_heartbeat_and_the_completion_of_a_token_of_an_older_generation(job, make_run):
    run, lease = lease_one(job, make_run)
    generations.bump_generation("promoted the standby")
    with pytest.raises(StaleLease):
        transitions.heartbeat(run.pk, lease.fencing_token, 30, now=T0)
    assert transitions.complete_many([Completion(run.pk, lease.fencing_token, "succeeded")], now=T0) == {}
    assert transitions.release(run.pk, lease.fencing_token, now=T0) == 0
    run.refresh_from_db()
    assert (run.state, run.fencing_token) == ("leased", lease.fencing_token)


def test_after_restore_gives_the_older_leases_back_and_they_run_again_with_their_key(job, make_run, capsys):
    run, lease = lease_one(job, make_run)
    call_command("after_restore", reason="pgBackRest restore")
    run.refresh_from_db()
    assert (run.state, run.attempt, run.lease_expires_at) == ("scheduled", 0, None)
    assert "released by after_restore" in run.last_error
    (again,) = claims.claim(["default"], 1, "w-bob")  # available again from the real now: the command's clock
    assert again.run_id == run.pk and again.idempotency_key == lease.idempotency_key and again.attempt == 1
    assert again.fencing_token > lease.fencing_token
    assert transitions.complete(run.pk, again.fencing_token, "succeeded") == "succeeded"
    out = capsys.readouterr().out
    assert f"restore generation {generations.current()}" in out and "1 lease(s) of earlier generations released" in out
    assert Generation.objects.get().reason == "pgBackRest restore"


def test_after_restore_puts_a_later_attempt_back_to_retry_wait(job, make_run):
    run, lease = lease_one(job, make_run)
    Run.objects.filter(pk=run.pk).update(attempt=2)
    assert claims.claim(["default"], 1, "w-bob") == []  # nothing claimable: the claim settles the ready set
    call_command("after_restore", stdout=None)
    run.refresh_from_db()
    assert (run.state, run.attempt) == ("retry_wait", 1)
    (again,) = claims.claim(["default"], 1, "w-bob")  # claimable again: the claims' ready set has it
    assert (again.run_id, again.attempt) == (run.pk, 2)


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_connection_to_another_server_starts_a_generation_once_however_many_connect(job, make_run, caplog):
    _, before = lease_one(job, make_run)
    Generation.objects.filter(pk=1).update(server="6000000000000000000/00000001/1")  # as a restore leaves it
    was = generations.current()
    seen = []

    def connect():
        from django.db import connection as own

        seen.append(generations.current())  # its first query: the connection is new
        own.close()

    threads = [threading.Thread(target=connect) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One of them bumped (past the highest token issued: at least was + 1), the others found it done.
    assert len(set(seen)) == 1 and seen[0] > was
    assert [r.message for r in caplog.records if r.name == "duetime.generations"] == [
        f"restore generation {seen[0]}: {generations.SERVER_CHANGED} (server was 6000000000000000000/00000001/1); "
        f"fencing tokens from {generations.first_token(seen[0])} on"
    ]
    row = Generation.objects.get()
    assert row.server != "6000000000000000000/00000001/1" and "server was 6000000000000000000" in row.reason
    _, after = lease_one(job, make_run, due_at=T0 - dt.timedelta(minutes=1))
    assert after.fencing_token >= generations.first_token(seen[0]) > before.fencing_token


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_new_connection_to_the_same_server_changes_nothing(job, make_run):
    connection.close()
    was = Generation.objects.get()  # a new connection: it checked
    connection.close()
    assert Generation.objects.get().number == was.number


@pytest.mark.concurrency
@postgres_only
@pytest.mark.django_db(transaction=True)
def test_after_restore_releases_every_older_lease_when_a_completion_moves_one_into_history_under_it(
    job, make_run, capsys, caplog
):
    # The worker keeps running through a restore: a completion begun before the bump moves its run into
    # history while after_restore waits on that row. PostgreSQL refuses the lock (a serialization error,
    # "moved to another partition"); the command tries again and releases the rest, run once.
    finished, _ = lease_one(job, make_run)
    held, held_lease = lease_one(job, make_run, due_at=T0 - dt.timedelta(minutes=1))
    finished_lease = Run.objects.get(pk=finished.pk).fencing_token
    told = moving.race_a_completion(
        finished.pk,
        finished_lease,
        T0,
        lambda: call_command("after_restore", reason="pgBackRest restore"),
        waiting_for="after_restore to wait for the completion's row lock",
    )
    assert told == "went through"
    assert "1 lease(s) of earlier generations released" in capsys.readouterr().out
    (retried,) = [r.getMessage() for r in caplog.records if r.name == "duetime.transitions"]
    assert "moved to another partition" in retried and retried.endswith("trying again")
    assert Run.objects.get(pk=finished.pk).state == "succeeded"
    held.refresh_from_db()
    assert (held.state, held.attempt, held.fencing_token) == ("scheduled", 0, held_lease.fencing_token)
