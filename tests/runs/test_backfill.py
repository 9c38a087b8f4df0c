"""Backfill: a window of a cron job's past occurrences, run again now, capped and audited."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from runs import backfill
from tests.conftest import NOW

UTC = dt.UTC


def minutes(n):
    return dt.timedelta(minutes=n)


def test_it_backfills_a_past_window_capped_and_audited(every_minute):
    runs = backfill.backfill(
        every_minute, NOW, NOW + minutes(10), actor="user:alice", max_runs=4, now=NOW + minutes(60)
    )
    assert [r.due_at for r in runs] == [NOW + minutes(i) for i in range(4)]
    assert all(r.origin == "backfill" and r.available_at == NOW + minutes(60) for r in runs)
    entry = every_minute.tenant.audit.get(action="backfill")
    assert entry.detail["runs"] == 4 and entry.detail["truncated"] is True


def test_it_refuses_to_backfill_the_future(every_minute):
    with pytest.raises(ValidationError):
        backfill.backfill(every_minute, NOW, dt.datetime(2100, 1, 1, tzinfo=UTC), actor="user:alice")


def test_it_plans_the_occurrences_of_a_half_open_window(every_minute):
    plan = backfill.backfill_plan(every_minute, NOW, NOW + minutes(3))
    times, truncated = plan.times, plan.truncated
    assert times == [NOW, NOW + minutes(1), NOW + minutes(2)] and not truncated


@pytest.mark.parametrize(
    "start, end, max_runs, field",
    [
        (NOW, NOW, 100, "end"),  # an empty window
        (NOW, NOW + minutes(5), 0, "max_runs"),
        (NOW, NOW + minutes(5), backfill.BACKFILL_LIMIT + 1, "max_runs"),
    ],
)
def test_it_refuses_a_window_or_cap_out_of_bounds(every_minute, start, end, max_runs, field):
    with pytest.raises(ValidationError) as refused:
        backfill.backfill_plan(every_minute, start, end, max_runs)
    assert field in refused.value.message_dict


def test_it_backfills_only_a_cron_or_every_job(acme, make_job):
    with pytest.raises(ValidationError) as refused:
        backfill.backfill_plan(make_job(acme, "oneoff"), NOW, NOW + minutes(5))
    assert "only a cron or every job" in refused.value.message_dict["job"][0]


def test_it_backfills_an_every_jobs_periods_inside_its_bounds(acme, make_job):
    job = make_job(
        acme, "pulse", schedule_kind="every", every_seconds=90, start_at=NOW, end_at=NOW + minutes(5), jitter_seconds=0
    )
    plan = backfill.backfill_plan(job, NOW - minutes(60), NOW + minutes(60))
    assert plan.times == [NOW + dt.timedelta(seconds=s) for s in (0, 90, 180, 270)]  # none before start_at or at 09:05
    runs = backfill.backfill(job, NOW, NOW + minutes(2), actor="user:alice", now=NOW + minutes(60))
    assert [r.due_at for r in runs] == [NOW, NOW + dt.timedelta(seconds=90)]
    job.refresh_from_db()
    assert job.remaining_runs is None  # a backfill spends no count


def test_a_backfilled_run_keeps_its_occurrence_key_marked_and_never_runs_early(every_minute):
    (run,) = backfill.backfill(every_minute, NOW, NOW + minutes(1), actor="user:alice", now=NOW - minutes(5))
    assert run.idempotency_key == "ping@2026-06-01T11:00:00+02:00#backfill"
    assert run.available_at == NOW, "never before its nominal instant, even when `now` is earlier"


def freeze(job, policy="skip", start=NOW + minutes(2), end=NOW + minutes(5)):
    from calendars.models import Window

    return Window.objects.create(
        tenant=job.tenant, job=job, name="freeze", starts_at=start, ends_at=end, resume_policy=policy
    )


def test_it_leaves_out_what_a_skip_window_holds_and_says_so(every_minute):
    freeze(every_minute)  # 09:02 to 09:05: three occurrences
    plan = backfill.backfill_plan(every_minute, NOW, NOW + minutes(7))
    assert plan.times == [NOW, NOW + minutes(1), NOW + minutes(5), NOW + minutes(6)]
    assert plan.held_back == 3 and plan.reasons[0].startswith("window 'freeze' (skip): 3 occurrences")
    backfill.backfill(every_minute, NOW, NOW + minutes(7), actor="user:alice")
    assert every_minute.tenant.audit.get(action="backfill").detail["held_back_by_windows"] == 3


def test_it_keeps_the_latest_occurrence_of_a_run_once_window_and_everything_when_told_to_ignore_windows(every_minute):
    freeze(every_minute, "run_once")
    assert backfill.backfill_plan(every_minute, NOW, NOW + minutes(6)).times == [
        NOW,
        NOW + minutes(1),
        NOW + minutes(4),
        NOW + minutes(5),
    ]
    ignored = backfill.backfill_plan(every_minute, NOW, NOW + minutes(6), ignore_windows=True)
    assert ignored.times == [NOW + minutes(i) for i in range(6)] and ignored.held_back == 0


def test_a_capped_windowed_plan_says_where_the_next_chunk_starts(every_minute):
    freeze(every_minute, "run_once")
    plan = backfill.backfill_plan(every_minute, NOW, NOW + minutes(10), max_runs=3)
    assert plan.times == [NOW, NOW + minutes(1), NOW + minutes(4)] and plan.truncated
    assert plan.resume_after == NOW + minutes(4)
    rest = backfill.backfill_plan(every_minute, plan.resume_after + dt.timedelta(microseconds=1), NOW + minutes(10))
    assert rest.times == [NOW + minutes(i) for i in range(5, 10)] and not rest.truncated


def test_the_portal_step_goes_through_a_window_chunk_by_chunk(every_minute, monkeypatch):
    from jobs.admin import actions

    monkeypatch.setattr(actions, "BACKFILL_CHUNK", 2)
    freeze(every_minute, "skip")
    cursor, made, done = NOW, 0, False
    while not done:
        created, cursor, done = actions.backfill_step(every_minute, cursor, NOW + minutes(8), 100, actor="u", note="")
        made += created
    assert made == 5  # 09:00, 09:01, then 09:05 to 09:07: the window's three are left out
