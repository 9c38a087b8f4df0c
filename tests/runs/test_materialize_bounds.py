"""Materialising `every` schedules, the bounds start_at and end_at, and remaining_runs counting down.

remaining_runs is spent by the statement that advances next_due_at, on the
rows a pass has locked, and compared as read (runs.materialize.spend,
advance_definitions); the race test at the end runs two kinds of scheduler
passes at once on PostgreSQL and counts the runs.
"""

import datetime as dt
import threading

import pytest
from django.db import connection

from calendars.models import Window
from jobs import occurrences
from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant
from runs import materialize
from runs.models import Run
from tests.conftest import is_postgres  # noqa: F401 - named by the skipif condition

UTC = dt.UTC
T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def seconds(n):
    return dt.timedelta(seconds=n)


def scheduled(job):
    return list(Run.objects.filter(job=job, state="scheduled").order_by("due_at").values_list("due_at", flat=True))


def job_of(tenant, name="pulse", *, saved=T0 - seconds(30), **fields):
    """A job of `tenant` saved at `saved` (default: every 90 s from 09:00, no jitter)."""
    values = dict(schedule_kind="every", every_seconds=90, start_at=T0, jitter_seconds=0)
    values.update(fields)
    job = JobDefinition(tenant=tenant, name=name, target_kind="python", target_ref="tests.handlers.noop", **values)
    save_definition(job, "test", now=saved)
    return job


def reloaded(job):
    return JobDefinition.objects.select_related("tenant").get(pk=job.pk)


def test_an_every_job_starts_at_its_anchor_and_runs_on_its_grid(acme):
    job = job_of(acme)
    assert job.next_due_at == T0
    materialize.materialize(T0, lookahead=300)
    assert scheduled(job) == [T0 + seconds(s) for s in (0, 90, 180, 270)]
    assert reloaded(job).next_due_at == T0 + seconds(360)


def test_an_every_job_does_not_drift_after_a_late_pass(acme):
    """The scheduler was away for 10 minutes: run_once runs the latest missed one, and the grid stays."""
    job = job_of(acme)
    back = T0 + dt.timedelta(minutes=10, seconds=7)
    materialize.materialize(back, lookahead=60)
    assert scheduled(job) == [T0 + seconds(540), T0 + seconds(630)]  # 09:09:00 missed (latest), 09:10:30
    assert reloaded(job).next_due_at == T0 + seconds(720)


def test_a_job_saved_after_its_anchor_starts_at_the_next_period(acme):
    job = job_of(acme, saved=T0 + seconds(100))
    assert job.next_due_at == T0 + seconds(180)


def test_an_every_job_without_a_start_counts_from_the_epoch(acme):
    job = job_of(acme, every_seconds=3600, start_at=None, saved=T0 + seconds(17 * 60))
    assert job.next_due_at == T0 + dt.timedelta(hours=1)


def test_a_cron_job_waits_for_its_start(acme):
    job = job_of(acme, schedule_kind="cron", cron_expr="* * * * *", every_seconds=None, start_at=T0 + seconds(300))
    assert job.next_due_at == T0 + seconds(300)
    materialize.materialize(T0, lookahead=360)
    assert scheduled(job) == [T0 + seconds(300), T0 + seconds(360)]


@pytest.mark.parametrize(
    "fields",
    [
        dict(schedule_kind="cron", cron_expr="* * * * *", every_seconds=None, start_at=None),
        dict(schedule_kind="every", every_seconds=60),
    ],
    ids=["cron", "every"],
)
def test_no_occurrence_at_or_after_the_end(acme, fields):
    job = job_of(acme, end_at=T0 + seconds(180), **fields)
    materialize.materialize(T0, lookahead=3600)
    assert scheduled(job) == [T0, T0 + seconds(60), T0 + seconds(120)]
    job = reloaded(job)
    assert job.next_due_at is None
    assert occurrences.ended(job) == "end_at"


def test_an_at_job_inside_its_bounds_runs_once(acme):
    job = job_of(acme, schedule_kind="at", every_seconds=None, run_at=T0 + seconds(60), end_at=T0 + seconds(61))
    materialize.materialize(T0, lookahead=3600)
    assert scheduled(job) == [T0 + seconds(60)]
    assert occurrences.ended(reloaded(job)) == "at"


# --------------------------------------------------------------- remaining_runs


def test_remaining_runs_reaching_zero_stops_the_job(acme):
    job = job_of(acme, remaining_runs=3)
    materialize.materialize(T0, lookahead=3600)
    assert scheduled(job) == [T0, T0 + seconds(90), T0 + seconds(180)]
    job = reloaded(job)
    assert (job.remaining_runs, job.next_due_at, occurrences.ended(job)) == (0, None, "remaining_runs")
    assert materialize.materialize(T0 + dt.timedelta(hours=2), lookahead=3600).inserted == 0
    assert len(scheduled(job)) == 3


def test_remaining_runs_counts_down_across_passes(acme):
    job = job_of(acme, remaining_runs=3)
    materialize.materialize(T0, lookahead=100)  # 09:00:00 and 09:01:30
    assert reloaded(job).remaining_runs == 1
    materialize.materialize(T0 + seconds(100), lookahead=100)  # 09:03:00 only: the count is spent
    job = reloaded(job)
    assert scheduled(job) == [T0, T0 + seconds(90), T0 + seconds(180)]
    assert (job.remaining_runs, job.next_due_at) == (0, None)


def test_a_run_the_quota_skips_does_not_count(acme):
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=1)
    job = job_of(acme, remaining_runs=3)
    materialize.materialize(T0, lookahead=200)  # three occurrences, room for one
    job = reloaded(job)
    assert scheduled(job) == [T0]
    assert job.remaining_runs == 2
    assert job.next_due_at == T0 + seconds(270)  # the schedule moves on past the skipped ones
    assert Run.objects.filter(job=job, state="skipped").count() == 1


def test_occurrences_a_window_skips_do_not_count(acme):
    job = job_of(acme, remaining_runs=2)
    window = Window(tenant=acme, job=job, name="freeze", kind="one_off", starts_at=T0, ends_at=T0 + seconds(100))
    window.full_clean()
    window.save()
    materialize.materialize(T0, lookahead=400)
    assert scheduled(job) == [T0 + seconds(180), T0 + seconds(270)]  # 09:00 and 09:01:30 skipped by the window
    assert reloaded(job).remaining_runs == 0


def test_nothing_is_recorded_skipped_after_the_last_run(acme):
    job = job_of(acme, remaining_runs=1)
    window = Window(
        tenant=acme, job=job, name="later", kind="one_off", starts_at=T0 + seconds(60), ends_at=T0 + seconds(400)
    )
    window.full_clean()
    window.save()
    materialize.materialize(T0, lookahead=600)
    assert scheduled(job) == [T0]
    assert not Run.objects.filter(job=job, state="skipped").exists()  # past the job's end, not skipped


def test_a_stale_copy_loses_the_compare_and_set_on_the_count(acme):
    job = job_of(acme, remaining_runs=5)
    stale = reloaded(job)
    materialize.materialize(T0, lookahead=100)
    assert materialize.materialize_job(stale, T0, T0 + seconds(100)) == (0, 0)
    assert reloaded(job).remaining_runs == 3


def test_setting_the_count_again_restarts_from_the_next_occurrence(acme):
    job = job_of(acme, remaining_runs=1)
    materialize.materialize(T0, lookahead=600)
    job = reloaded(job)
    job.remaining_runs = 2
    save_definition(job, "test", now=T0 + seconds(100))
    assert (job.next_due_at, job.remaining_runs) == (T0 + seconds(180), 2)


# --------------------------------------------------------------- two schedulers at once


def race(job, single, barrier, errors):
    """One scheduler: shard passes, or (`single`) single-job passes on the copy it read at the start
    (stale once another pass moved the job), walking the clock forward two seconds at a time."""
    try:
        copy = reloaded(job)
        barrier.wait()
        for k in range(0, 24, 2):
            now = T0 + seconds(k)
            if single:
                materialize.materialize_job(copy, now, now + seconds(1))
            else:
                materialize.materialize(now, lookahead=1)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)
    finally:
        connection.close()


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif("not is_postgres()", reason="row locks and concurrent writers are PostgreSQL's")
def test_two_schedulers_never_materialise_more_than_the_count(acme):
    """Shard passes (FOR UPDATE SKIP LOCKED) and single-job passes (compare-and-set) race on one job: 7 runs."""
    for attempt in range(3):
        job = job_of(acme, f"pulse-{attempt}", every_seconds=1, remaining_runs=7)
        barrier, errors = threading.Barrier(4), []
        threads = [threading.Thread(target=race, args=(job, single, barrier, errors)) for single in (0, 0, 1, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors
        assert scheduled(job) == [T0 + seconds(s) for s in range(7)]
        job = reloaded(job)
        assert (job.remaining_runs, job.next_due_at) == (0, None)
