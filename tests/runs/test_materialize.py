"""Schedules become runs ahead of time, and every occurrence can explain itself."""

import datetime as dt

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from jobs import cron, jitter
from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant
from runs import materialize, shards
from runs.models import Run

UTC = dt.UTC
T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def minutes(n):
    return dt.timedelta(minutes=n)


def scheduled(job):
    return list(Run.objects.filter(job=job, state="scheduled").order_by("due_at").values_list("due_at", flat=True))


def skipped(job):
    return list(Run.objects.filter(job=job, state="skipped").order_by("due_at"))


def test_it_inserts_the_occurrences_inside_the_lookahead_and_advances_next_due(every_minute):
    result = materialize.materialize(T0, lookahead=120)
    assert result.inserted == 3  # 09:00, 09:01, 09:02
    assert scheduled(every_minute) == [T0, T0 + minutes(1), T0 + minutes(2)]
    every_minute.refresh_from_db()
    assert every_minute.next_due_at == T0 + minutes(3)


def test_it_names_each_run_by_job_and_due_time_in_the_job_zone(every_minute):
    materialize.materialize(T0, lookahead=0)
    run = Run.objects.get(job=every_minute)
    assert run.idempotency_key == "ping@2026-06-01T11:00:00+02:00"


def test_it_is_harmless_to_materialise_twice(every_minute):
    stale_copy = JobDefinition.objects.get(pk=every_minute.pk)
    materialize.materialize(T0, lookahead=60)
    assert materialize.materialize_job(stale_copy, T0, T0 + minutes(1)) == (0, 0)  # lost the compare-and-set
    assert len(scheduled(every_minute)) == 2


def test_it_offsets_available_at_by_the_jobs_fixed_jitter(acme, make_job):
    job = JobDefinition(
        tenant=acme,
        name="herd",
        schedule_kind="cron",
        cron_expr="0 * * * *",
        jitter_seconds=600,
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    save_definition(job, "test", now=T0 - minutes(1))
    materialize.materialize(T0, lookahead=0)
    run = Run.objects.get(job=job)
    offset = jitter.stable_jitter("acme", "herd", 600)
    assert run.due_at == T0 and run.available_at == T0 + dt.timedelta(seconds=offset)


def outage(job, policy, hours=2, **fields):
    """The scheduler was down for `hours`; it comes back at 11:00:30."""
    JobDefinition.objects.filter(pk=job.pk).update(missed_run_policy=policy, **fields)
    job.refresh_from_db()
    back = T0 + dt.timedelta(hours=hours, seconds=30)
    materialize.materialize(back, lookahead=60)
    return back


def test_it_runs_only_the_latest_missed_occurrence_under_run_once(every_minute):
    outage(every_minute, "run_once")
    assert scheduled(every_minute)[0] == T0 + minutes(120)  # 11:00, the latest missed one
    (summary,) = skipped(every_minute)
    assert (summary.due_at, summary.covers_until) == (T0, T0 + minutes(119))
    assert "120 occurrences" in summary.reason and "run_once" in summary.reason


def test_it_runs_every_missed_occurrence_under_run_all_even_past_a_hundred(every_minute):
    outage(every_minute, "run_all")
    due = scheduled(every_minute)
    assert due[:121] == [T0 + minutes(i) for i in range(121)]  # 121 missed, more than Kubernetes' 100
    assert skipped(every_minute) == []


def test_it_caps_run_all_and_records_the_rest(every_minute, settings):
    settings.DUETIME_MISSED_RUN_CAP = 50
    outage(every_minute, "run_all")
    assert len([d for d in scheduled(every_minute) if d <= T0 + minutes(120)]) == 50
    (summary,) = skipped(every_minute)
    assert "71 occurrences" in summary.reason


def test_it_records_every_missed_occurrence_as_skipped_under_skip(every_minute):
    back = outage(every_minute, "skip")
    assert all(d >= back - dt.timedelta(seconds=10) for d in scheduled(every_minute))
    (summary,) = skipped(every_minute)
    assert "121 occurrences" in summary.reason and "skip" in summary.reason


def test_it_skips_missed_runs_older_than_the_starting_deadline(every_minute):
    outage(every_minute, "run_all", starting_deadline_seconds=600)
    due = [d for d in scheduled(every_minute) if d <= T0 + minutes(120)]
    assert due[0] == T0 + minutes(111)  # 10:51 is the oldest within 10 minutes of 11:00:30
    (summary,) = skipped(every_minute)
    assert "starting deadline" in summary.reason


def test_it_keeps_firing_after_the_outage(every_minute):
    back = outage(every_minute, "skip", hours=24 * 3)
    every_minute.refresh_from_db()
    assert every_minute.next_due_at > back
    assert scheduled(every_minute), "a schedule never stops firing because too many were missed"


def test_it_runs_a_fixed_job_once_when_its_time_falls_in_the_spring_gap(acme):
    job = JobDefinition(
        tenant=acme,
        name="nightly",
        schedule_kind="cron",
        cron_expr="30 2 * * *",
        time_zone="America/New_York",
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    before = dt.datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    save_definition(job, "test", now=before)
    materialize.materialize(before + dt.timedelta(days=2), lookahead=0)
    # 2026-03-08: 02:30 does not exist in New York; it runs at 03:00 EDT = 07:00 UTC.
    assert dt.datetime(2026, 3, 8, 7, 0, tzinfo=UTC) in [r.due_at for r in Run.objects.filter(job=job)]


def test_it_runs_an_at_job_once(acme):
    job = JobDefinition(
        tenant=acme,
        name="launch",
        schedule_kind="at",
        run_at=T0 + minutes(5),
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    save_definition(job, "test", now=T0)
    materialize.materialize(T0 + minutes(5), lookahead=60)
    materialize.materialize(T0 + minutes(6), lookahead=60)
    assert scheduled(job) == [T0 + minutes(5)]
    job.refresh_from_db()
    assert job.next_due_at is None


def test_it_records_occurrences_over_the_pending_quota_skipped_and_moves_on(every_minute):
    # Deferring them would burst onto the queue once acme's runs drain; skipped says why they did not run.
    Tenant.objects.filter(pk=every_minute.tenant_id).update(max_pending_runs=1)
    result = materialize.materialize(T0, lookahead=120)
    assert (result.inserted, result.skipped) == (1, 1)
    assert scheduled(every_minute) == [T0]
    (capped,) = skipped(every_minute)
    assert (capped.due_at, capped.covers_until) == (T0 + minutes(1), T0 + minutes(2))
    assert capped.reason.startswith("quota: max_pending_runs (at most 1 runs waiting or running): 2 occurrences")
    every_minute.refresh_from_db()
    assert every_minute.next_due_at == T0 + minutes(3)


def test_it_shares_the_tenants_pending_room_between_its_jobs_in_one_pass(acme, every_minute):
    other = JobDefinition(
        tenant=acme,
        name="pong",
        schedule_kind="cron",
        cron_expr="* * * * *",
        time_zone="UTC",
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    save_definition(other, "test", now=T0 - minutes(1) + dt.timedelta(seconds=30))
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=1)
    materialize.materialize(T0, lookahead=0)
    assert Run.objects.filter(tenant=acme, state="scheduled").count() == 1
    assert Run.objects.get(tenant=acme, state="skipped").reason.startswith("quota: max_pending_runs")


def test_a_node_whose_shard_was_taken_over_materialises_nothing_for_it(every_minute):
    shards.ensure_rows()
    a = shards.own_shards("node-a", T0)
    b = shards.own_shards("node-b", T0 + minutes(1))  # node-a paused past its lease; node-b took every shard
    result = materialize.materialize(T0, shards=a, owner="node-a", lookahead=120)
    assert (result.jobs, result.inserted, result.refused_shards) == (0, 0, 1)
    assert scheduled(every_minute) == []
    every_minute.refresh_from_db()
    assert every_minute.next_due_at == T0  # untouched: the new owner materialises it
    result = materialize.materialize(T0, shards=b, owner="node-b", lookahead=120)
    assert (result.inserted, result.refused_shards) == (3, 0)
    assert scheduled(every_minute) == [T0, T0 + minutes(1), T0 + minutes(2)]


def test_the_owner_of_a_shard_materialises_it_with_its_epoch_idempotently(every_minute):
    shards.ensure_rows()
    a = shards.own_shards("node-a", T0)
    assert materialize.materialize(T0, shards=a, owner="node-a", lookahead=60).inserted == 2
    assert materialize.materialize(T0, shards=a, owner="node-a", lookahead=60).inserted == 0
    assert scheduled(every_minute) == [T0, T0 + minutes(1)]


def test_a_pass_out_of_time_finishes_its_shard_and_says_there_is_more(acme, make_job):
    jobs = [make_job(acme, f"ping-{i}", cron_expr="* * * * *") for i in range(8)]
    JobDefinition.objects.filter(pk__in=[j.pk for j in jobs]).update(next_due_at=T0)
    assert len({job.shard for job in jobs}) > 1
    result = materialize.materialize(T0, lookahead=0, budget=0)  # spent at once: one shard, then stop
    assert result.more and 1 <= result.jobs < 8
    assert materialize.materialize(T0, lookahead=0).jobs == 8 - result.jobs
    assert Run.objects.filter(job__in=jobs).count() == 8


def jobs_on_one_shard(tenant, make_job, count):
    """`count` every-minute jobs of `tenant` that hash to the same shard, due at T0."""
    from jobs.models import shard_for

    names = [n for n in (f"ping-{i}" for i in range(5000)) if shard_for(tenant.name, n) == 0][:count]
    jobs = [make_job(tenant, name, cron_expr="* * * * *") for name in names]
    JobDefinition.objects.filter(pk__in=[j.pk for j in jobs]).update(next_due_at=T0)
    return jobs


def test_a_shard_is_materialised_in_the_same_few_statements_whatever_its_number_of_jobs(acme, globex, make_job):
    jobs_on_one_shard(acme, make_job, 5)
    with CaptureQueriesContext(connection) as five:
        assert materialize.materialize(T0, lookahead=60).inserted == 10
    more = jobs_on_one_shard(globex, make_job, 40)
    with CaptureQueriesContext(connection) as forty:
        assert materialize.materialize(T0, lookahead=60).inserted == 80
    assert len(forty) == len(five)  # one tenant, one shard each time
    assert Run.objects.filter(job__in=more).count() == 80


def test_a_job_paused_before_its_shard_is_locked_is_left_alone(acme, make_job):
    paused, active = jobs_on_one_shard(acme, make_job, 2)
    JobDefinition.objects.filter(pk=paused.pk).update(status="paused")
    with transaction.atomic():
        jobs = materialize.lock_due(active.shard, T0 + minutes(1), limit=500)
        done = materialize.materialize_jobs(jobs, T0, T0 + minutes(1), {}, {})
    assert done == (1, 2, 0)
    assert not Run.objects.filter(job=paused).exists()
    paused.refresh_from_db()
    assert paused.next_due_at == T0


# --- maintenance windows and calendars (calendars/, docs/windows.md) ----------------------------

SAT = dt.datetime(2026, 6, 6, 9, 0, tzinfo=UTC)


def hourly(tenant, make_job, name="report", now=T0 - minutes(1), **fields):
    fields.setdefault("cron_expr", "0 * * * *")
    job = make_job(tenant, name, **fields)
    JobDefinition.objects.filter(pk=job.pk).update(
        next_due_at=cron.occurrences(job.cron_expr, job.time_zone, now, 1)[0]
    )
    job.refresh_from_db()
    return job


def window(tenant, job=None, name="db upgrade", **fields):
    from calendars.models import Window

    fields.setdefault("kind", "one_off")
    made = Window(tenant=tenant, job=job, name=name, **fields)
    made.full_clean()
    made.save()
    return made


def test_it_skips_the_occurrences_inside_a_window_at_once_with_its_name(acme, make_job):
    job = hourly(acme, make_job, now=T0)  # next occurrence 10:00
    window(acme, job, starts_at=T0 + minutes(30), ends_at=T0 + minutes(210))  # 09:30 to 12:30
    materialize.materialize(T0 + minutes(59), lookahead=60)
    [row] = skipped(job)
    assert (row.due_at, row.covers_until) == (T0 + minutes(60), T0 + minutes(180))
    assert row.reason.startswith("window 'db upgrade' (skip): 3 occurrences from 2026-06-01 10:00 to 2026-06-01 12:00")
    job.refresh_from_db()
    assert job.next_due_at == T0 + minutes(240)  # 13:00: the window was decided whole
    assert not scheduled(job)


def test_it_runs_the_latest_occurrence_once_when_a_run_once_window_ends(acme, make_job):
    job = hourly(acme, make_job, now=T0)
    window(acme, job, starts_at=T0 + minutes(30), ends_at=T0 + minutes(210), resume_policy="run_once")
    materialize.materialize(T0 + minutes(59), lookahead=60)
    run = Run.objects.get(job=job, state="scheduled")
    assert (run.due_at, run.available_at) == (T0 + minutes(180), T0 + minutes(210))  # due 12:00, runs at 12:30
    assert run.reason == "held by window 'db upgrade' until 2026-06-01 12:30 UTC (run_once)"
    [row] = skipped(job)
    assert (row.due_at, row.covers_until) == (T0 + minutes(60), T0 + minutes(180) - dt.timedelta(microseconds=1))
    assert "run_once runs only the latest occurrence inside it" in row.reason and ": 2 occurrences" in row.reason


def test_it_runs_every_occurrence_at_the_end_of_a_run_all_window_up_to_the_cap(acme, make_job, settings):
    settings.DUETIME_MISSED_RUN_CAP = 2
    job = hourly(acme, make_job, now=T0)
    window(acme, job, starts_at=T0 + minutes(30), ends_at=T0 + minutes(210), resume_policy="run_all")
    materialize.materialize(T0 + minutes(59), lookahead=60)
    held = Run.objects.filter(job=job, state="scheduled").order_by("due_at")
    assert [(r.due_at, r.available_at) for r in held] == [
        (T0 + minutes(120), T0 + minutes(210)),
        (T0 + minutes(180), T0 + minutes(210)),
    ]
    [row] = skipped(job)
    assert row.due_at == T0 + minutes(60) and "run_all runs at most the latest 2" in row.reason


def test_a_tenant_wide_recurring_window_holds_every_job_of_the_tenant_and_no_other(acme, globex, make_job):
    # 22:00 to 06:00 in Berlin every night (20:00 to 04:00 UTC in summer).
    window(
        acme,
        name="nightly freeze",
        kind="recurring",
        cron_expr="0 22 * * *",
        time_zone="Europe/Berlin",
        duration_seconds=8 * 3600,
    )
    night = T0.replace(hour=20, minute=59)
    mine, theirs = hourly(acme, make_job, now=night), hourly(globex, make_job, now=night)
    materialize.materialize(night, lookahead=60)
    [row] = skipped(mine)
    assert (row.due_at, row.covers_until) == (T0.replace(hour=21), T0.replace(day=2, hour=3))
    assert row.reason.startswith("window 'nightly freeze' (skip): 7 occurrences")
    assert scheduled(theirs) == [T0.replace(hour=21)]


def test_a_calendar_skips_weekends_and_holidays_and_run_once_runs_on_the_next_business_day(acme, make_job):
    from calendars.models import Calendar

    london = Calendar.objects.create(
        tenant=acme,
        name="uk",
        time_zone="Europe/London",
        weekend_days=[6, 7],
        holidays=[{"name": "Whit Monday", "start": "2026-06-08", "end": "2026-06-09", "all_day": True}],
    )
    daily = hourly(acme, make_job, "daily", now=SAT - minutes(120), cron_expr="0 9 * * *", time_zone="Europe/London")
    window(acme, daily, name="UK business days", kind="calendar", calendar=london, resume_policy="run_once")
    materialize.materialize(SAT - dt.timedelta(hours=1, seconds=30), lookahead=60)  # Saturday 09:00 London
    run = Run.objects.get(job=daily, state="scheduled")
    monday_9, tuesday_0 = dt.datetime(2026, 6, 8, 8, 0, tzinfo=UTC), dt.datetime(2026, 6, 8, 23, 0, tzinfo=UTC)
    assert (run.due_at, run.available_at) == (monday_9, tuesday_0)
    assert run.reason.startswith("held by window 'UK business days: weekend, Whit Monday' until 2026-06-08 23:00 UTC")
    assert skipped(daily)[0].due_at == SAT - dt.timedelta(hours=1)
    daily.refresh_from_db()
    assert daily.next_due_at == dt.datetime(2026, 6, 9, 8, 0, tzinfo=UTC)  # Tuesday 09:00 London


def test_an_outage_past_a_window_still_holds_its_occurrences_to_the_window(acme, make_job):
    job = hourly(acme, make_job, now=T0)
    window(acme, job, starts_at=T0 + minutes(30), ends_at=T0 + minutes(90), resume_policy="run_once")
    materialize.materialize(T0 + minutes(150), lookahead=60)  # no scheduler ran from 09:00 to 11:30
    run = Run.objects.get(job=job, due_at=T0 + minutes(60))
    assert run.available_at == T0 + minutes(90)  # held by the window, not by the missed-run policy
    assert Run.objects.get(job=job, due_at=T0 + minutes(120)).state == "scheduled"  # 11:00: run_once catch-up


def test_a_disabled_window_holds_nothing(acme, make_job):
    job = hourly(acme, make_job, now=T0)
    window(acme, job, starts_at=T0 + minutes(30), ends_at=T0 + minutes(90), enabled=False)
    materialize.materialize(T0 + minutes(59), lookahead=60)
    assert scheduled(job) == [T0 + minutes(60)]


def test_a_shard_reads_its_jobs_windows_in_one_query_whatever_their_number(acme, globex, make_job):
    window(acme, starts_at=T0 + minutes(30), ends_at=T0 + minutes(31))
    jobs_on_one_shard(acme, make_job, 5)
    with CaptureQueriesContext(connection) as five:
        materialize.materialize(T0, lookahead=60)
    window(globex, starts_at=T0 + minutes(30), ends_at=T0 + minutes(31))
    jobs_on_one_shard(globex, make_job, 40)
    with CaptureQueriesContext(connection) as forty:
        materialize.materialize(T0, lookahead=60)
    assert len(forty) == len(five)
    # The read of the shard's jobs says which have windows (EXISTS probes); one query reads them.
    assert sum(q["sql"].startswith('SELECT "calendars_window"') for q in forty.captured_queries) == 1


# --- at scale: which shards a pass visits, what it reads, what it asks cron --------------------


def jobs_on_shard(tenant, make_job, shard, count, due=T0, cron_expr="* * * * *"):
    """`count` jobs of `tenant` that hash to `shard`, due at `due`."""
    from jobs.models import shard_for

    names = [n for n in (f"job-{i}" for i in range(20_000)) if shard_for(tenant.name, n) == shard][:count]
    jobs = [make_job(tenant, name, cron_expr=cron_expr) for name in names]
    JobDefinition.objects.filter(pk__in=[j.pk for j in jobs]).update(next_due_at=due)
    return list(JobDefinition.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk"))


def test_a_pass_visits_only_the_shards_with_something_due_the_most_urgent_first(acme, make_job):
    jobs_on_shard(acme, make_job, 7, 1, due=T0 + minutes(1))
    jobs_on_shard(acme, make_job, 3, 1, due=T0 + minutes(2))
    jobs_on_shard(acme, make_job, 12, 1, due=T0)
    jobs_on_shard(acme, make_job, 40, 1, due=T0 + minutes(10))  # beyond the look-ahead
    assert materialize.due_shards(T0 + minutes(2), range(64)) == [12, 7, 3]
    assert materialize.due_shards(T0 + minutes(2), [3, 40]) == [3]


def test_a_shard_whose_due_jobs_are_all_paused_is_not_visited(acme, globex, make_job):
    from jobs.models import QueuePause

    jobs_on_shard(acme, make_job, 5, 2)
    Tenant.objects.filter(pk=acme.pk).update(paused_at=T0)
    jobs_on_shard(globex, make_job, 9, 2)
    QueuePause.objects.create(tenant=globex, queue="default", paused_at=T0)
    assert materialize.due_shards(T0, range(64)) == []
    assert materialize.materialize(T0, lookahead=60).jobs == 0


def test_a_pass_takes_at_most_its_limit_of_one_shard_and_says_there_is_more(acme, make_job):
    jobs = jobs_on_shard(acme, make_job, 0, 5)
    result = materialize.materialize(T0, lookahead=0, limit=3)
    assert (result.jobs, result.more) == (3, True)
    result = materialize.materialize(T0, lookahead=0, limit=3)
    assert (result.jobs, result.more) == (2, False)
    assert Run.objects.filter(job__in=jobs).count() == 5


def test_the_jobs_of_a_burst_ask_cron_once_per_schedule(acme, globex, make_job, monkeypatch):
    jobs_on_shard(acme, make_job, 0, 30, cron_expr="0 * * * *")
    jobs_on_shard(globex, make_job, 1, 30, cron_expr="0 * * * *")
    asked = []
    real = cron.occurrences
    monkeypatch.setattr(cron, "occurrences", lambda *args: asked.append(args) or real(*args))
    assert materialize.materialize(T0, lookahead=60).inserted == 60
    assert len(asked) == 1  # 09:00 and the next, 10:00, for all 60 jobs in both shards
    assert set(Run.objects.values_list("due_at", flat=True)) == {T0}
    assert set(JobDefinition.objects.values_list("next_due_at", flat=True)) == {T0 + minutes(60)}


def test_it_advances_a_job_only_from_the_next_due_it_was_planned_from(acme, make_job):
    moved, edited = jobs_on_shard(acme, make_job, 0, 2)
    stale = JobDefinition.objects.get(pk=edited.pk)
    JobDefinition.objects.filter(pk=edited.pk).update(next_due_at=T0 + minutes(30))  # rescheduled meanwhile
    plans = [(job, materialize.Plan(next_due_at=T0 + minutes(1))) for job in (moved, stale)]
    materialize.advance_definitions(plans)
    moved.refresh_from_db(), edited.refresh_from_db()
    assert (moved.next_due_at, edited.next_due_at) == (T0 + minutes(1), T0 + minutes(30))


def test_a_schedule_that_ends_leaves_its_job_with_no_next_due(acme, make_job):
    (job,) = jobs_on_shard(acme, make_job, 0, 1, cron_expr="0 0 29 2 *")
    JobDefinition.objects.filter(pk=job.pk).update(next_due_at=T0)
    materialize.advance_definitions([(job, materialize.Plan(next_due_at=None))])
    job.refresh_from_db()
    assert job.next_due_at is None


def test_a_shard_without_windows_reads_none(acme, make_job):
    jobs_on_shard(acme, make_job, 0, 5)
    with CaptureQueriesContext(connection) as queries:
        assert materialize.materialize(T0, lookahead=60).inserted == 10
    assert not any(q["sql"].startswith('SELECT "calendars_window"') for q in queries.captured_queries)


def test_the_room_counts_waiting_and_leased_runs_not_finished_ones(acme, globex, make_job, make_run):
    job = make_job(acme, "export")
    for state in ("scheduled", "retry_wait", "leased", "succeeded", "dead", "cancelled"):
        make_run(job, state=state)
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=10)
    acme.refresh_from_db()
    assert materialize.rooms([acme, globex]) == {acme.pk: 7, globex.pk: globex.max_pending_runs}
