"""Retention (runs/retention.py): history past DUETIME_RETENTION_DAYS goes, nothing before it, one scheduler at a time.

PostgreSQL drops whole days (real DDL, so those tests commit: transaction=True,
and put the partitions back as they were); SQLite deletes in batches.
"""

import datetime as dt
import threading

import pytest
from django.db import OperationalError, connection, transaction

from dlq.models import DeadLetter
from jobs.models import AuditEntry
from runs import claims, partitions, retention, scheduler, transitions
from runs.models import OPEN_DAY, Attempt, Run, ShardLease
from tests.conftest import is_postgres  # noqa: F401 (the skipif conditions below)

NOW = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
postgres_only = pytest.mark.skipif("not is_postgres()", reason="history is partitioned on PostgreSQL only")
sqlite_only = pytest.mark.skipif("is_postgres()", reason="PostgreSQL drops partitions instead")


@pytest.fixture
def job(acme, make_job):
    return make_job(acme, "billing.export", overlap_policy="allow", max_attempts=1)


def finish(job, make_run, when, outcome="succeeded"):
    """A run of `job` leased and finished at `when` (dead if `outcome` is not succeeded)."""
    run = make_run(job, due_at=when - dt.timedelta(seconds=1))
    (lease,) = claims.claim([job.queue], 1, "w-alice", now=when)
    assert lease.run_id == run.pk
    transitions.complete(run.pk, lease.fencing_token, outcome, "boom", retryable=False, now=when)
    run.refresh_from_db()
    return run


def test_it_is_a_scheduler_step():
    assert retention.tick in scheduler.STEPS


def test_one_scheduler_at_a_time_does_the_pass(db):
    assert retention.take_lease("node-a", NOW)
    assert not retention.take_lease("node-b", NOW), "node-a holds it"
    assert not retention.take_lease("node-a", NOW + dt.timedelta(minutes=1)), "not due yet"
    assert retention.take_lease("node-a", NOW + retention.EVERY)
    epoch = ShardLease.objects.get(name="retention").epoch
    later = NOW + retention.EVERY + retention.LEASE  # node-a stopped renewing: its lease ran out
    assert not retention.take_lease("node-b", later - dt.timedelta(seconds=1))
    assert retention.take_lease("node-b", later)
    lease = ShardLease.objects.get(name="retention")
    assert lease.owner == "node-b" and lease.epoch > epoch
    assert retention.tick(later, owner="node-a") == 0, "node-a does nothing once node-b holds it"


def test_it_deletes_audit_entries_older_than_a_year(db, acme, monkeypatch):
    monkeypatch.setattr(retention, "BATCH", 2)
    old = [AuditEntry.objects.create(tenant=acme, actor="user:alice", action="pause") for _ in range(3)]
    AuditEntry.objects.filter(pk__in=[a.pk for a in old]).update(at=NOW - dt.timedelta(days=366))
    kept = AuditEntry.objects.create(tenant=acme, actor="user:alice", action="resume")
    AuditEntry.objects.filter(pk=kept.pk).update(at=NOW - dt.timedelta(days=364))
    assert retention.delete_old_audit(NOW) == 2, "a batch at a time"
    assert retention.delete_old_audit(NOW) == 1
    assert list(AuditEntry.objects.values_list("pk", flat=True)) == [kept.pk]


@sqlite_only
def test_sqlite_deletes_history_past_the_retention_in_batches(job, make_run, settings, monkeypatch):
    settings.DUETIME_RETENTION_DAYS = 30
    monkeypatch.setattr(retention, "BATCH", 1)
    gone = [finish(job, make_run, NOW - dt.timedelta(days=31, minutes=n)) for n in range(2)]
    discarded = finish(job, make_run, NOW - dt.timedelta(days=60), outcome="failed")
    transitions.discard(DeadLetter.objects.get(run=discarded), actor="user:alice", now=NOW - dt.timedelta(days=40))
    kept = finish(job, make_run, NOW - dt.timedelta(days=29, hours=23))  # finished less than 30 days ago
    dead = finish(job, make_run, NOW - dt.timedelta(days=90), outcome="failed")  # its letter is still open
    today = NOW.date()
    # At most one row of each table per pass: letters and attempts first, never after their run.
    assert 3 <= retention.delete_expired(today) <= 4  # a run's delete counts an attempt it takes with it
    assert not DeadLetter.objects.filter(run=discarded).exists()
    while retention.delete_expired(today):
        pass
    assert set(Run.objects.values_list("pk", flat=True)) == {kept.pk, dead.pk}
    assert set(Attempt.objects.values_list("run_id", flat=True)) == {kept.pk, dead.pk}
    assert DeadLetter.objects.get(run=dead).history_day == OPEN_DAY
    assert all(not Run.objects.filter(pk=run.pk).exists() for run in gone)


@sqlite_only
def test_sqlite_retention_pass_runs_through_the_step(job, make_run, settings):
    settings.DUETIME_RETENTION_DAYS = 30
    finish(job, make_run, NOW - dt.timedelta(days=45))
    assert retention.tick(NOW, owner="node-a") == 2  # the run and its attempt
    assert not Run.objects.exists()


@pytest.fixture
def old_days(transactional_db):
    """Two listed days 40 and 39 days before today, with their partitions; dropped again afterwards."""
    today = dt.datetime.now(dt.UTC).date()
    days = [today - dt.timedelta(days=40), today - dt.timedelta(days=39)]
    for day in days:
        partitions.create(day)
    yield days
    for day in days:
        if day in partitions.days() or day in partitions.attached():
            partitions.drop(day)


def noon(day):
    return dt.datetime.combine(day, dt.time(12), dt.UTC)


@postgres_only
def test_postgres_drops_a_day_past_the_retention_and_keeps_what_must_stay(job, make_run, old_days, settings):
    settings.DUETIME_RETENTION_DAYS = 30
    first, second = old_days
    gone = finish(job, make_run, noon(first))
    discarded = finish(job, make_run, noon(first), outcome="failed")
    transitions.discard(DeadLetter.objects.get(run=discarded), actor="user:alice", now=noon(first))
    dead = finish(job, make_run, noon(first), outcome="failed")  # its letter stays open
    kept = finish(job, make_run, noon(second))  # its day holds rows up to today's: not past the retention
    assert gone.history_day == first and kept.history_day == second
    today = noon(dt.datetime.now(dt.UTC).date())
    assert retention.tick(today, owner="node-a") >= 1
    assert first not in partitions.days() and first not in partitions.attached("runs_attempt")
    assert set(Run.objects.values_list("pk", flat=True)) == {dead.pk, kept.pk}
    assert not Attempt.objects.filter(run_id__in=[gone.pk, discarded.pk]).exists()
    assert list(DeadLetter.objects.values_list("run_id", flat=True)) == [dead.pk]
    assert second in partitions.days()
    # Claims go on as before: a new run is claimed and finished into today's history.
    assert finish(job, make_run, today).history_day == partitions.history_day(today)


@postgres_only
def test_a_drop_cut_short_is_finished_by_the_next_pass(old_days):
    first, second = old_days
    with connection.cursor() as cursor:  # a crash after the day was unlisted, before its partitions went
        cursor.execute("DELETE FROM runs_history_day WHERE day = %s", [first])
    assert partitions.leftovers() == [first]
    assert retention.drop_expired(dt.datetime.now(dt.UTC).date()) == 1
    assert partitions.leftovers() == []
    assert all(first not in partitions.attached(table) for table in partitions.TABLES)
    assert second in partitions.days()


@postgres_only
@pytest.mark.concurrency
def test_a_detach_that_timed_out_behind_a_long_query_is_finalised_by_the_next_pass(old_days, monkeypatch):
    first, _ = old_days
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "300ms")
    reading, done = threading.Event(), threading.Event()

    def long_portal_query():
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM runs_run WHERE history_day = %s", [first])
                reading.set()
                done.wait(30)
        finally:
            connection.close()

    reader = threading.Thread(target=long_portal_query)
    reader.start()
    try:
        assert reading.wait(30)
        with pytest.raises(OperationalError):
            partitions.drop(first)  # the detach waits for the query's snapshot, then gives up
        assert first in partitions.leftovers()
    finally:
        done.set()
        reader.join(30)
    assert retention.drop_expired(dt.datetime.now(dt.UTC).date()) == 1
    assert all(first not in partitions.attached(table) for table in partitions.TABLES)
