"""Rollups: attempts folded once into minute and hour rows; percentiles read back within 12 %."""

import datetime as dt
import threading

import pytest
from django.db import connection

from runs import rollups
from runs.admin.stats import lateness_series
from runs.rollups import JobHour, RollupCursor, TenantMinute, job_lateness, lateness_bin, percentile


def test_it_reads_percentiles_back_within_the_bin_width():
    histogram = {}
    for ms in range(1, 1001):
        rollups.merge(histogram, {lateness_bin(ms): 1})
    for q, true in ((50, 500), (95, 950), (99, 990)):
        assert abs(percentile(histogram, q) - true) / true < 0.13


def test_it_folds_each_attempt_once_by_tenant_minute_and_job_hour(
    acme, globex, make_job, make_run, make_attempt, clock
):
    # Mid-hour, so every attempt starts and ends in the same hour (one JobHour per job).
    now = clock.advance(minutes=30, seconds=30)
    ours, theirs = make_job(acme, "a.job"), make_job(globex, "g.job")
    for i, (job, late) in enumerate(((ours, 2), (ours, 4), (theirs, 9))):
        run = make_run(job, state="succeeded", due_at=now - dt.timedelta(minutes=10, seconds=i))
        make_attempt(run, late=dt.timedelta(seconds=late), ended=now - dt.timedelta(minutes=9))
    assert rollups.tick(now) == 3
    assert rollups.tick(now) == 0  # the cursor moved: nothing is counted twice
    acme_rows = TenantMinute.objects.filter(tenant=acme)
    assert sum(r.first_attempts for r in acme_rows) == 2 and sum(r.succeeded for r in acme_rows) == 2
    assert JobHour.objects.get(job=theirs).lateness_ms_max == 9000
    assert job_lateness(ours, now)["count"] == 2
    assert lateness_series(acme, now, dt.timedelta(hours=1), dt.timedelta(minutes=1))["overall"]["count"] == 2


def test_it_waits_for_attempts_that_just_ended(acme, make_job, make_run, make_attempt, clock):
    now = clock.now
    run = make_run(make_job(acme, "a.job"), state="succeeded", due_at=now - dt.timedelta(seconds=5))
    make_attempt(run, late=dt.timedelta(seconds=1), ended=now)
    assert rollups.tick(now) == 0
    assert rollups.tick(now + rollups.SETTLE + dt.timedelta(seconds=1)) == 1


def test_it_stops_at_the_first_attempt_not_settled_and_at_the_batch(acme, make_job, make_run, make_attempt, clock):
    now, job = clock.now, make_job(acme, "a.job")
    for i in range(7):  # the sixth ended just now: it and the one after it wait for a later pass
        run = make_run(job, state="succeeded", due_at=now - dt.timedelta(minutes=5, seconds=i))
        make_attempt(run, late=dt.timedelta(seconds=1), ended=now if i == 5 else now - dt.timedelta(minutes=4))
    assert rollups.tick(now, batch=3) == 3
    assert rollups.tick(now) == 2
    assert rollups.tick(now + rollups.SETTLE) == 2
    assert sum(r.succeeded for r in TenantMinute.objects.filter(tenant=acme)) == 7


def test_a_gap_in_attempt_ids_wider_than_the_batch_does_not_stop_the_cursor(
    acme, make_job, make_run, make_attempt, clock
):
    from runs.models import Attempt

    now, job = clock.now, make_job(acme, "a.job")
    attempts = []
    for i in range(5):
        run = make_run(job, state="succeeded", due_at=now - dt.timedelta(minutes=5, seconds=i))
        attempts.append(make_attempt(run, late=dt.timedelta(seconds=1), ended=now - dt.timedelta(minutes=4)))
    Attempt.objects.filter(pk__in=[a.pk for a in attempts[1:4]]).delete()  # ids taken by rolled-back writes
    assert rollups.tick(now, batch=2) == 1
    assert rollups.tick(now, batch=2) == 1
    assert rollups.tick(now, batch=2) == 0


def test_the_database_bins_lateness_exactly_as_lateness_bin_does(acme, make_job, make_run, make_attempt, clock):
    now, job = clock.advance(minutes=30), make_job(acme, "a.job")
    lateness_ms = [0.4, 1, 2.5, 999, 1000, 1001.7, 61_234]
    for i, ms in enumerate(lateness_ms):
        run = make_run(job, state="succeeded", due_at=now - dt.timedelta(minutes=10, seconds=i))
        make_attempt(run, late=dt.timedelta(milliseconds=ms), ended=now - dt.timedelta(minutes=9))

    assert rollups.tick(now) == len(lateness_ms)

    hour = JobHour.objects.get(job=job)
    expected = {}
    for ms in lateness_ms:
        rollups.merge(expected, {lateness_bin(int(ms)): 1})
    assert hour.histogram == expected
    assert (hour.lateness_ms_sum, hour.lateness_ms_max) == (sum(int(ms) for ms in lateness_ms), 61_234)


def test_it_measures_a_run_created_after_its_due_time_from_its_creation(acme, make_job, make_run, make_attempt, clock):
    """A one-off run for a time already past is not hours late: it could not start before it existed."""
    now = clock.advance(minutes=30)
    run = make_run(
        make_job(acme, "a.job"),
        state="succeeded",
        due_at=now - dt.timedelta(hours=3),
        created_at=now - dt.timedelta(minutes=5),
    )
    make_attempt(run, late=dt.timedelta(hours=3, minutes=-5, seconds=2), ended=now - dt.timedelta(minutes=4))

    assert rollups.tick(now) == 1

    assert JobHour.objects.get(job=run.job).lateness_ms_max == 2000


def test_it_counts_retries_outcomes_but_lateness_only_for_first_attempts(acme, make_job, make_run, make_attempt, clock):
    now = clock.now
    run = make_run(make_job(acme, "a.job"), state="succeeded", due_at=now - dt.timedelta(minutes=5), attempt=2)
    make_attempt(run, attempt=1, late=dt.timedelta(seconds=1), outcome="failed", ended=now - dt.timedelta(minutes=4))
    make_attempt(
        run, attempt=2, late=dt.timedelta(seconds=50), outcome="succeeded", ended=now - dt.timedelta(minutes=3)
    )
    rollups.tick(now)
    rows = TenantMinute.objects.filter(tenant=run.tenant)
    assert sum(r.first_attempts for r in rows) == 1
    assert (sum(r.failed for r in rows), sum(r.succeeded for r in rows)) == (1, 1)


def test_it_prunes_rows_past_the_retention(acme, clock):
    old = clock.now - rollups.RETENTION - dt.timedelta(hours=1)
    TenantMinute.objects.create(tenant=acme, minute=old)
    rollups._last_prune["at"] = None
    assert rollups.prune(clock.now) == 1


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_it_never_double_counts_when_two_schedulers_tick_at_once(acme, make_job, make_run, make_attempt, clock):
    if connection.vendor != "postgresql":
        pytest.skip("real concurrent writers need PostgreSQL")
    now = clock.now
    job = make_job(acme, "a.job")
    for i in range(200):
        run = make_run(job, state="succeeded", due_at=now - dt.timedelta(minutes=30, seconds=i))
        make_attempt(run, ended=now - dt.timedelta(minutes=20))
    barrier, counts = threading.Barrier(2), []

    def tick():
        barrier.wait()
        counts.append(rollups.tick(now, batch=50))
        while n := rollups.tick(now, batch=50):
            counts.append(n)
        connection.close()

    threads = [threading.Thread(target=tick) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 200
    assert sum(r.first_attempts for r in TenantMinute.objects.all()) == 200
    assert RollupCursor.objects.get(name="attempts").last_id > 0


def test_it_adds_each_jobs_hours_up_into_days_kept_400_days(acme, make_job, make_run, make_attempt, clock):
    from runs.admin.stats import job_days
    from runs.models import JobDay

    now, job = clock.advance(hours=3), make_job(acme, "a.job")  # 12:00 UTC
    for hours_ago, late in ((1, 2), (2, 4), (13, 8)):  # two today (11:00, 10:00), one yesterday (23:00)
        run = make_run(job, state="succeeded", due_at=now - dt.timedelta(hours=hours_ago))
        make_attempt(
            run, late=dt.timedelta(seconds=late), ended=now - dt.timedelta(hours=hours_ago) + dt.timedelta(seconds=30)
        )
    assert rollups.tick(now) == 3
    days = {row.day.date(): row for row in JobDay.objects.filter(job=job)}
    assert {day: (row.first_attempts, row.succeeded, row.lateness_ms_max) for day, row in days.items()} == {
        now.date(): (2, 2, 4000),
        now.date() - dt.timedelta(days=1): (1, 1, 8000),
    }
    shown = job_days(job, now)
    assert len(shown["points"]) == 400 and shown["overall"]["count"] == 3 and shown["overall"]["succeeded"] == 3
    # Pruned once older than 400 days (the runs themselves are long gone by then: runs.retention).
    JobDay.objects.filter(job=job, day__date=now.date() - dt.timedelta(days=1)).update(day=now - rollups.DAY_RETENTION)
    rollups._last_prune["at"] = None
    rollups.prune(now + dt.timedelta(days=1))
    assert [row.day.date() for row in JobDay.objects.filter(job=job)] == [now.date()]
