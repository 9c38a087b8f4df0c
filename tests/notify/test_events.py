"""What owners hear of: dead letters, skip streaks and lateness, one row per channel, rate-limited."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notify import events
from notify.models import Cursor, Notification
from runs import partitions, rollups, transitions
from runs.models import JobHour
from tests.notify.conftest import bury, flood

Status = Notification.Status


def test_it_records_a_dead_letter_once_for_each_channel(watched_job, make_run, started, clock):
    job = watched_job()
    run = make_run(job, due_at=clock.ago(minutes=5))
    letter = bury(run, clock.now, error="ValueError: no invoices")

    assert events.record(clock.advance(seconds=3)) == 2
    rows = Notification.objects.order_by("channel")
    assert [(n.channel, n.recipient, n.status, n.kind) for n in rows] == [
        ("email", "oncall@acme.example", "pending", "dead_letter"),
        ("webhook", "https://hooks.example.com/duetime", "pending", "dead_letter"),
    ]
    body = rows[0].body
    assert (body["type"], body["tenant"], body["job"]) == ("dead_letter", "acme", "billing.export")
    assert body["data"]["dead_letter_id"] == letter.pk and body["data"]["last_error"] == "ValueError: no invoices"
    assert rows[0].event_key == f"dead_letter:{letter.pk}" and rows[0].next_attempt_at == clock.now
    assert events.record(clock.advance(seconds=3)) == 0


def test_a_first_pass_starts_at_the_newest_dead_letter(watched_job, make_run, clock):
    bury(make_run(watched_job(), due_at=clock.ago(hours=1)), clock.ago(minutes=30))
    assert events.record(clock.now) == 0
    assert not Notification.objects.exists()


def test_it_leaves_a_dead_letter_still_settling_for_the_next_pass(watched_job, make_run, started, clock):
    bury(make_run(watched_job(), due_at=clock.ago(minutes=1)), clock.now)
    assert events.record(clock.advance(seconds=1)) == 0
    assert events.record(clock.advance(seconds=2)) == 2


def test_a_job_without_an_owner_notifies_nobody_and_the_cursor_moves_on(acme, make_job, make_run, started, clock):
    letter = bury(make_run(make_job(acme, "quiet", overlap_policy="allow"), due_at=clock.ago(minutes=1)), clock.now)
    assert events.record(clock.advance(seconds=5)) == 0
    assert Cursor.objects.get(name="dead_letters").last_id == letter.pk


def test_an_event_met_twice_is_recorded_once(watched_job, make_run, started, clock):
    bury(make_run(watched_job(), due_at=clock.ago(minutes=1)), clock.now)
    events.record(clock.advance(seconds=5))
    Cursor.objects.filter(name="dead_letters").update(last_id=0)  # as after a crash before the cursor moved
    assert events.record(clock.advance(seconds=5)) == 0
    assert Notification.objects.count() == 2


def test_a_dead_letter_discarded_before_the_notifier_saw_it_is_still_heard_of(watched_job, make_run, started, clock):
    job = watched_job()
    first = bury(make_run(job, due_at=clock.ago(minutes=2)), clock.now)
    assert events.record(clock.advance(seconds=5)) == 2
    assert Cursor.objects.get(name="dead_letters").last_at == first.dead_at
    second = bury(make_run(job, due_at=clock.ago(minutes=1)), clock.advance(hours=30))
    transitions.discard(second, actor="user:alice", now=clock.advance(seconds=1))  # into history, a day later
    assert events.record(clock.advance(seconds=5)) == 2
    assert Notification.objects.filter(event_key=f"dead_letter:{second.pk}").count() == 2


@pytest.mark.skipif(connection.vendor != "postgresql", reason="history is partitioned by day on PostgreSQL")
def test_the_dead_letter_read_leaves_the_older_day_partitions_alone(transactional_db):
    today = dt.datetime.now(dt.UTC).date()
    old, recent = today - dt.timedelta(days=40), today - dt.timedelta(days=2)
    created = [day for day in (old, recent) if partitions.create(day)]
    try:
        now = dt.datetime.now(dt.UTC)
        events.record(now)  # the first pass: no dead letter yet, as on a healthy system
        with CaptureQueriesContext(connection) as queries:
            events.record(now + dt.timedelta(seconds=10))
        (read,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "dlq_deadletter"."id"')]
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + read)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "dlq_deadletter_open" in plan and "runs_run_open" in plan
        assert partitions.partition_name("dlq_deadletter", old) not in plan
        assert partitions.partition_name("runs_run", old) not in plan
    finally:
        for day in created:
            partitions.drop(day)


def test_a_flood_of_dead_letters_sends_one_per_channel_per_window(watched_job, settings, started, clock):
    settings.DUETIME_NOTIFY_RATE_LIMIT_MINUTES = 15
    job = watched_job()
    flood(job, 1000, clock.now)
    clock.advance(seconds=5)
    while events.record(clock.now):
        pass

    counts = {(n["channel"], n["status"]) for n in Notification.objects.values("channel", "status")}
    assert counts == {("email", "pending"), ("webhook", "pending"), ("email", "suppressed"), ("webhook", "suppressed")}
    assert Notification.objects.exclude(status=Status.SUPPRESSED).count() == 2
    assert Notification.objects.filter(status=Status.SUPPRESSED).count() == 1998
    held = Notification.objects.filter(status=Status.SUPPRESSED).first()
    assert "rate limit" in held.response and held.next_attempt_at is None

    flood(job, 1, clock.advance(minutes=16))  # the window has passed: the next one is sent
    events.record(clock.advance(seconds=5))
    assert Notification.objects.exclude(status=Status.SUPPRESSED).count() == 4


def test_it_notifies_a_skip_streak_once_per_streak(watched_job, make_run, settings, clock):
    settings.DUETIME_NOTIFY_RATE_LIMIT_MINUTES = 0
    job = watched_job(notify_skip_streak=3)
    make_run(job, state="succeeded", due_at=clock.ago(hours=1))
    for minutes in (50, 40):
        make_run(job, state="skipped", due_at=clock.ago(minutes=minutes), reason="overlap: forbid")
    make_run(job, state="scheduled", due_at=clock.ahead(minutes=1))  # ahead: not a skip yet
    assert events.skip_streak(job) == []

    make_run(job, state="skipped", due_at=clock.ago(minutes=30), reason="overlap: forbid")
    assert events.record(clock.now) == 2
    first = Notification.objects.get(channel="email")
    assert first.kind == "skip_streak" and first.body["data"]["skipped_in_a_row"] == 3
    assert "its last 3 runs were skipped (overlap: forbid)" in first.subject

    make_run(job, state="skipped", due_at=clock.ago(minutes=20), reason="overlap: forbid")
    assert events.record(clock.advance(minutes=1)) == 0  # the same streak

    make_run(job, state="succeeded", due_at=clock.ago(minutes=10))
    for minutes in (9, 8, 7):
        make_run(job, state="skipped", due_at=clock.ago(minutes=minutes), reason="missed: deadline")
    assert events.record(clock.advance(minutes=1)) == 2  # a new streak


def test_it_notifies_lateness_past_the_threshold_once_an_hour(watched_job, clock):
    job = watched_job(notify_lateness_p99_seconds=30)
    hour = clock.now.replace(minute=0)
    late(job, hour - dt.timedelta(hours=1), ms=45_000, count=10)
    late(job, hour, ms=200, count=90)
    (event,) = events.lateness([job], clock.now)
    assert event[1] == "lateness" and event[2] == f"lateness:{job.pk}:2026-06-01T09"
    assert event[4]["threshold_seconds"] == 30 and 40 < event[4]["p99_seconds"] <= 45

    assert events.record(clock.now) == 2
    assert events.record(clock.advance(minutes=20)) == 0  # the same hour


def test_it_stays_quiet_while_the_p99_is_under_the_threshold(watched_job, clock):
    job = watched_job(notify_lateness_p99_seconds=60)
    late(job, clock.now.replace(minute=0), ms=45_000, count=10)
    late(job, clock.now.replace(minute=0) - dt.timedelta(hours=3), ms=600_000, count=10)  # too old to count
    assert events.lateness([job], clock.now) == []


def late(job, hour, *, ms, count):
    JobHour.objects.update_or_create(
        job=job,
        hour=hour,
        defaults={
            "tenant": job.tenant,
            "first_attempts": count,
            "lateness_ms_sum": ms * count,
            "lateness_ms_max": ms,
            "histogram": {str(rollups.lateness_bin(ms)): count},
        },
    )


def test_it_checks_jobs_round_robin_a_batch_at_a_time(watched_job, monkeypatch, clock):
    monkeypatch.setattr(events, "JOB_BATCH", 2)
    jobs = [watched_job(f"job-{i}", notify_lateness_p99_seconds=1) for i in range(3)]
    for job in jobs:
        late(job, clock.now.replace(minute=0), ms=5_000, count=1)
    assert events.record(clock.now) == 4  # jobs 0 and 1
    assert events.record(clock.now) == 2  # job 2, then back to the start
    assert Cursor.objects.get(name="jobs").last_id == 0
    assert set(Notification.objects.values_list("job", flat=True)) == {job.pk for job in jobs}


def test_a_subject_is_one_line_whatever_the_skip_reason_says(watched_job, make_run, clock):
    job = watched_job(notify_skip_streak=1)
    make_run(job, state="skipped", due_at=clock.ago(minutes=1), reason="quota:\nmax_pending_runs")
    events.record(clock.now)
    subjects = set(Notification.objects.values_list("subject", flat=True))
    assert subjects == {"billing.export: its last 1 runs were skipped (quota: max_pending_runs)"}


def test_a_pass_costs_the_same_however_many_jobs_are_watched(
    watched_job, monkeypatch, django_assert_max_num_queries, clock
):
    monkeypatch.setattr(events, "JOB_BATCH", 5)
    for i in range(30):
        watched_job(f"job-{i}", notify_lateness_p99_seconds=60, notify_skip_streak=2)
    events.record(clock.now)  # the cursors
    # Its savepoint (2), cursors (2 reads, 2 writes), dead letters (with their day floor on PostgreSQL),
    # the batch of jobs, its rollups, the open failure breakers, and one walk of the last runs per job of the batch.
    with django_assert_max_num_queries(11 + 5):
        events.record(clock.now)


def test_a_sweep_of_the_watched_jobs_starts_at_most_every_30_seconds(watched_job, clock):
    job = watched_job(notify_lateness_p99_seconds=1)
    events.record(clock.now)
    late(job, clock.now.replace(minute=0), ms=5_000, count=1)
    assert events.record(clock.advance(seconds=29)) == 0  # the last sweep was 29 s ago
    assert events.record(clock.advance(seconds=1)) == 2
