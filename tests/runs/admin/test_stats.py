"""The numbers behind the dashboards, read at a pinned instant: what Alice sees on acme's overview,
lateness and job pages, and never a row of Bob's globex."""

import datetime as dt

import pytest

from dlq.models import DeadLetter
from runs import rollups
from runs.admin import stats
from scheduler_project.admin import counts


@pytest.fixture
def export(acme, make_job):
    return make_job(acme, "billing.export", cron_expr="*/5 * * * *")


@pytest.fixture
def finished_run(make_run, make_attempt):
    """A run of `job` that finished `ago` before now after starting `late`, its attempt folded into the rollups."""

    def make(job, clock, ago, late=dt.timedelta(seconds=1), outcome="succeeded", state="succeeded"):
        due = clock.now - ago
        run = make_run(job, state=state, due_at=due, attempt=1, fencing_token=1, worker_id="w-1", started_at=due)
        make_attempt(run, late=late, outcome=outcome, ended=due + late + dt.timedelta(seconds=1))
        return run

    return make


def test_it_counts_unfinished_runs_now_and_finished_ones_over_the_last_day(
    acme, globex, export, make_job, make_run, make_dead, finished_run, clock
):
    make_run(export, due_at=clock.ahead(minutes=10))  # scheduled, not yet available
    make_run(export, due_at=clock.ago(minutes=5))  # scheduled and ready
    make_run(export, state="retry_wait", due_at=clock.ago(hours=1), available_at=clock.ago(minutes=1))
    make_run(export, state="leased", due_at=clock.ago(seconds=10))
    make_run(export, state="cancelled", due_at=clock.ago(hours=2))
    make_run(export, state="skipped", due_at=clock.ago(days=2))  # older than the day shown
    finished_run(export, clock, ago=dt.timedelta(minutes=30))
    make_dead(export, clock.ago(hours=3))
    make_dead(export, clock.ago(days=3))  # older than the day shown
    make_run(make_job(globex, "globex.secret"), due_at=clock.ago(minutes=5))  # Bob's: never counted for acme
    rollups.tick(clock.now)

    shown = stats.state_counts(acme, clock.now)

    assert shown["live"] == {
        "scheduled": (2, False),
        "retry_wait": (1, False),
        "ready": (2, False),
        "leased": (1, False),
    }
    assert shown["finished"] == {
        "succeeded": (1, False),
        "dead": (1, False),
        "cancelled": (1, False),
        "skipped": (0, False),
    }


def test_it_stops_counting_at_the_cap_and_says_there_are_more(acme, export, make_run, clock, monkeypatch):
    monkeypatch.setattr(counts, "COUNT_CAP", 2)
    for minutes in (1, 2, 3):
        make_run(export, due_at=clock.ago(minutes=minutes))

    live = stats.state_counts(acme, clock.now)["live"]

    assert live["scheduled"] == (2, True) and str(live["scheduled"]) == "2+"
    assert live["leased"] == (0, False)


def test_it_shows_the_ready_backlog_per_queue_and_how_long_the_oldest_has_waited(acme, make_job, make_run, clock):
    reports = make_job(acme, "reports.build", queue="reports")
    urgent = make_job(acme, "reports.urgent", queue="reports", priority=0)
    make_job(acme, "billing.idle")  # queue `default`, nothing waiting
    make_run(reports, due_at=clock.ago(minutes=7))
    make_run(urgent, due_at=clock.ago(minutes=2))
    make_run(reports, due_at=clock.ahead(minutes=5))  # not yet available: not backlog

    backlog = stats.backlog_by_queue(acme, clock.now)

    assert backlog == [
        {"queue": "default", "ready": 0, "capped": False, "oldest_age": None},
        {"queue": "reports", "ready": 2, "capped": False, "oldest_age": dt.timedelta(minutes=7)},
    ]


def test_it_counts_leases_lost_in_the_last_hour_and_day_and_those_overdue_now(
    acme, export, make_run, finished_run, clock
):
    finished_run(export, clock, ago=dt.timedelta(minutes=30), outcome="lease_expired", state="retry_wait")
    finished_run(export, clock, ago=dt.timedelta(hours=5), outcome="timed_out", state="dead")
    finished_run(export, clock, ago=dt.timedelta(hours=2))  # succeeded: no lease lost
    make_run(export, state="leased", due_at=clock.ago(minutes=5))  # its 30 s lease ran out 4.5 minutes ago
    make_run(export, state="leased", due_at=clock.now)  # lease still good
    rollups.tick(clock.now)

    assert stats.lease_expiries(acme, clock.now) == {"hour": 1, "day": 2, "overdue": 1}
    assert stats.outcomes(acme, clock.now, stats.DAY) == {
        "succeeded": 1,
        "failed": 0,
        "timed_out": 1,
        "lease_expired": 1,
        "stale": 0,
    }


def test_it_lists_jobs_by_new_dead_letters_and_counts_every_open_one(acme, export, make_job, make_dead, clock):
    sync = make_job(acme, "crm.sync")
    make_dead(export, clock.ago(hours=1))
    closed = make_dead(export, clock.ago(hours=2))
    DeadLetter.objects.filter(pk=closed.pk).update(discarded_at=clock.ago(hours=1))
    make_dead(sync, clock.ago(hours=3))
    make_dead(export, clock.ago(days=3))  # not new, still open

    dead = stats.dead_letters_by_job(acme, clock.now)

    assert [(row["job__name"], row["new"], row["open"]) for row in dead["jobs"]] == [
        ("billing.export", 2, 1),
        ("crm.sync", 1, 1),
    ]
    assert dead["open"] == "3"


def test_it_draws_dead_letter_growth_hour_by_hour_over_the_last_day(acme, export, make_dead, clock):
    make_dead(export, clock.ago(hours=1))  # dead at 08:00:03
    make_dead(export, clock.ago(hours=1, minutes=30))  # dead at 07:30:03
    make_dead(export, clock.ago(days=2))  # before the chart

    bars = stats.dead_letters_per_hour(acme, clock.now)

    assert len(bars) == 25
    assert bars[0]["at"] == dt.datetime(2026, 5, 31, 9, 0, tzinfo=dt.UTC)
    assert {bar["at"].strftime("%H:%M"): bar["count"] for bar in bars if bar["count"]} == {"07:00": 1, "08:00": 1}


def test_it_charts_lateness_per_minute_with_gaps_where_nothing_started(acme, export, finished_run, clock):
    for seconds in range(1, 11):
        # Due 08:40:0s, started s seconds late: every start falls in the minute of 08:40.
        finished_run(export, clock, ago=dt.timedelta(minutes=20, seconds=-seconds), late=dt.timedelta(seconds=seconds))
    rollups.tick(clock.now)

    series = stats.lateness_series(acme, clock.now, stats.HOUR, dt.timedelta(minutes=1))

    assert len(series["points"]) == 61
    busy = [point for point in series["points"] if point["count"]]
    assert [point["at"] for point in busy] == [clock.ago(minutes=20)]
    assert series["points"][0]["p50"] is None  # a gap in the chart, not a zero
    assert series["overall"]["count"] == 10
    assert 8_800 <= series["overall"]["p99"] <= 11_200  # about 10 s, read back within the bins' 12 %


def test_it_shows_a_jobs_newest_runs_and_why_the_last_failure_happened(
    acme, export, make_run, make_attempt, finished_run, clock
):
    retried = make_run(export, state="succeeded", due_at=clock.ago(hours=2), attempt=2)
    make_attempt(retried, attempt=1, outcome="failed", error="ConnectionError: reset", ended=clock.ago(minutes=119))
    make_attempt(retried, attempt=2, late=dt.timedelta(minutes=5), ended=clock.ago(minutes=114))
    newest = finished_run(export, clock, ago=dt.timedelta(minutes=30))

    history = stats.job_history(export)
    failure = stats.last_failure(export)

    assert [run.pk for run in history] == [newest.pk, retried.pk]
    assert failure["run"] == retried
    assert [(a.attempt, a.outcome) for a in failure["attempts"]] == [(1, "failed"), (2, "succeeded")]


def test_it_finds_no_failure_for_a_job_that_never_failed(export, finished_run, clock):
    finished_run(export, clock, ago=dt.timedelta(minutes=30))
    assert stats.last_failure(export) is None
