"""Where runs, attempts and dead letters live (runs/partitions.py): open while pending, then a day of history.

Both databases keep history_day; PostgreSQL also keeps the rows in that
day's partition (checked by tableoid), and its hot queries never read any
partition but the open ones (checked on their plans).
"""

import datetime as dt

import pytest
from django.db import connection

from dlq.models import DeadLetter
from runs import claims, partitions, sql, transitions
from runs.models import OPEN_DAY, Attempt, Run
from tests.conftest import is_postgres

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
postgres_only = pytest.mark.skipif("not is_postgres()", reason="history is partitioned on PostgreSQL only")


def at(seconds):
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def job(acme, make_job):
    return make_job(acme, "billing.export", overlap_policy="allow", max_attempts=2, retry_base_seconds=5)


def lease(run, now):
    (leased,) = claims.claim([run.queue], 1, "w-alice", now=now)
    assert leased.run_id == run.pk
    return leased


def partition_of(table, pk):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def where(table, day):
    return f"{table}_open" if day == OPEN_DAY else partitions.partition_name(table, day)


def test_a_run_that_succeeds_goes_into_its_days_history_with_every_attempt(job, make_run):
    run = make_run(job, due_at=T0)
    transitions.complete(run.pk, lease(run, at(0)).fencing_token, "failed", "flaky", now=at(1))
    assert Attempt.objects.get(run=run).history_day == OPEN_DAY, "a run waiting to retry is still open"
    transitions.complete(run.pk, lease(run, at(10)).fencing_token, "succeeded", now=at(11))
    run.refresh_from_db()
    day = partitions.history_day(at(11))
    assert run.history_day == day != OPEN_DAY
    assert list(Attempt.objects.filter(run=run).values_list("history_day", flat=True)) == [day, day]
    if is_postgres():
        assert partition_of("runs_run", run.pk) == where("runs_run", day)
        assert {partition_of("runs_attempt", a.pk) for a in Attempt.objects.filter(run=run)} == {
            where("runs_attempt", day)
        }


def test_a_dead_run_stays_open_with_its_letter_until_the_letter_is_discarded(job, make_run):
    run = make_run(job, due_at=T0)
    transitions.complete(run.pk, lease(run, at(0)).fencing_token, "failed", "bad input", retryable=False, now=at(1))
    letter = DeadLetter.objects.get(run=run)
    run.refresh_from_db()
    assert run.state == "dead" and run.history_day == OPEN_DAY == letter.history_day
    assert transitions.discard(letter, actor="user:alice", now=at(60))
    day = partitions.history_day(at(60))
    run.refresh_from_db()
    letter.refresh_from_db()
    assert run.history_day == letter.history_day == Attempt.objects.get(run=run).history_day == day
    if is_postgres():
        assert partition_of("dlq_deadletter", letter.pk) == where("dlq_deadletter", day)
        assert partition_of("runs_run", run.pk) == where("runs_run", day)


def test_a_replayed_dead_run_moves_back_to_the_open_partition_and_is_claimable(job, make_run):
    run = make_run(job, due_at=T0)
    transitions.complete(run.pk, lease(run, at(0)).fencing_token, "failed", "outage", retryable=False, now=at(1))
    # A dead run left in history (one that died before its letter kept it open) comes back all the same.
    day = partitions.history_day(at(1))
    Run.objects.filter(pk=run.pk).update(history_day=day)
    Attempt.objects.filter(run=run).update(history_day=day)
    assert transitions.replay(DeadLetter.objects.get(run=run), actor="user:alice", now=at(30))
    run.refresh_from_db()
    assert run.state == "scheduled" and run.history_day == OPEN_DAY
    assert Attempt.objects.get(run=run).history_day == OPEN_DAY
    assert DeadLetter.objects.get(run=run).history_day == partitions.history_day(at(30))
    transitions.complete(run.pk, lease(run, at(30)).fencing_token, "succeeded", now=at(31))
    assert list(Attempt.objects.filter(run=run).values_list("history_day", flat=True)) == [day, day]


def test_a_cancelled_run_goes_into_history_with_the_attempts_it_had(job, make_run):
    run = make_run(job, due_at=T0)
    transitions.complete(run.pk, lease(run, at(0)).fencing_token, "failed", "flaky", now=at(1))
    assert transitions.cancel_run(run, reason="job deleted", now=at(2))
    run.refresh_from_db()
    day = partitions.history_day(at(2))
    assert run.state == "cancelled" and run.history_day == day == Attempt.objects.get(run=run).history_day


def test_a_run_inserted_finished_goes_straight_into_history(job):
    from runs.enqueue import insert_runs, skipped_rows

    (row,) = insert_runs(skipped_rows(job, [(T0, None, 1, "missed while no scheduler ran")], at(5)))
    assert Run.objects.get(pk=row.pk).history_day == partitions.history_day(at(5)) != OPEN_DAY


def test_nothing_pending_can_be_written_into_history(job, make_run):
    run = make_run(job, due_at=T0)
    with pytest.raises(Exception, match="run_pending_is_open"):
        Run.objects.filter(pk=run.pk).update(history_day=partitions.history_day(T0))


def test_a_day_expires_once_the_next_listed_day_is_past_the_retention():
    d = dt.date(2026, 11, 1)
    days = [d + dt.timedelta(days=n) for n in range(5)]
    # Day d holds rows up to d + 1: it goes once d + 1 is 30 days old, never sooner.
    assert partitions.expired(d + dt.timedelta(days=30), 30, days) == []
    assert partitions.expired(d + dt.timedelta(days=31), 30, days) == [d]
    # A gap (no scheduler created partitions for a week): d holds everything up to the next listed day.
    gap = [d, d + dt.timedelta(days=8)]
    assert partitions.expired(d + dt.timedelta(days=37), 30, gap) == []
    assert partitions.expired(d + dt.timedelta(days=38), 30, gap) == [d]
    # The newest day never expires: rows of any later day go there until a partition of its own exists.
    assert partitions.expired(d + dt.timedelta(days=400), 30, days) == days[:-1]


@postgres_only
def test_a_day_without_a_partition_of_its_own_shares_the_previous_one(db):
    listed = partitions.days()
    assert partitions.history_day(T0) == listed[0], "before the oldest: the oldest"
    later = dt.datetime.combine(listed[-1], dt.time(12), dt.UTC) + dt.timedelta(days=3)
    assert partitions.history_day(later) == listed[-1], "after the newest: the newest"


@postgres_only
def test_partitions_are_created_ahead_after_the_newest_and_never_before_it(db):
    newest = partitions.days()[-1]
    assert partitions.ensure_ahead(newest - dt.timedelta(days=30)) == [], "a past day gets no partition"
    # Two days late (no scheduler ran): from today on; the day missed stays with the one before it.
    created = partitions.ensure_ahead(newest + dt.timedelta(days=2), ahead=1)
    assert created == [newest + dt.timedelta(days=n) for n in (2, 3)]
    assert partitions.days()[-3:] == [newest, *created]
    missed = dt.datetime.combine(newest + dt.timedelta(days=1), dt.time(12), dt.UTC)
    assert partitions.history_day(missed) == newest
    for table in partitions.TABLES:
        assert set(created) <= set(partitions.attached(table))
    assert not partitions.create(created[0]), "a listed day is not created twice"


# Every hot query, with the parameters its function passes. insert_runs is not here: it probes every
# partition on purpose (a key whose run is already history; see runs/sql/postgres.sql).
HOT = {
    "lock_ready_tenants": {
        "queues": ["default"],
        "tenant": None,
        "only_tenants": None,
        "except_tenants": [],
        "now": None,
        "lock_timeout": "1s",
        "idle_timeout": "5s",
    },
    "wait_for_ready_tenants": {
        "queues": ["default"],
        "tenant": None,
        "only_tenants": None,
        "except_tenants": [],
        "now": None,
    },
    "claim_candidates": {"tenants": [1], "queues": ["default"], "kinds": None, "per_tenant": 10, "now": None},
    "lease_runs": {"ids": [1, 2], "worker": "w", "now": None, "lease": 30},
    "heartbeat": {"id": 1, "token": 1, "lease": 30, "now": None},
    "start_attempt": {"id": 1, "token": 1, "worker": "w", "dispatched_by": "d", "lease": 30, "now": None},
    "complete_runs": {
        "ids": [1],
        "tokens": [1],
        "outcomes": ["succeeded"],
        "errors": [""],
        "retryable": [False],
        "results": [None],
        "now": None,
    },
    "expire_leases": {"now": None, "n": 1000},
}


READS_NO_RUNS = {"wait_for_ready_tenants"}  # the ready marks and the tenants only


def scanned(plan):
    """The relations a plan reads (scans), its subplans' included; writes name the parent and are left out."""
    found = set()
    if "Scan" in plan["Node Type"] and "Relation Name" in plan:
        found.add(plan["Relation Name"])
    for child in plan.get("Plans", []):
        found |= scanned(child)
    return found


@postgres_only
@pytest.mark.parametrize("name", sorted(HOT))
def test_a_hot_query_reads_only_the_open_partitions(db, name):
    history = set()
    with connection.cursor() as cursor:
        for statement in sql.load("postgres")[name]:  # lock_ready_tenants reads runs while settling the marks
            cursor.execute("EXPLAIN (FORMAT JSON) " + statement, HOT[name])
            (plan,) = cursor.fetchone()[0]
            history |= {
                r for r in scanned(plan["Plan"]) if r.startswith(("runs_run", "runs_attempt", "dlq_deadletter"))
            }
    assert all(r.endswith("_open") for r in history), history
    assert history or name in READS_NO_RUNS
