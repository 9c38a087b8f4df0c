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
    times, truncated = backfill.backfill_plan(every_minute, NOW, NOW + minutes(3))
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


def test_it_backfills_only_a_cron_job(acme, make_job):
    with pytest.raises(ValidationError) as refused:
        backfill.backfill_plan(make_job(acme, "oneoff"), NOW, NOW + minutes(5))
    assert "only a cron job" in refused.value.message_dict["job"][0]


def test_a_backfilled_run_keeps_its_occurrence_key_marked_and_never_runs_early(every_minute):
    (run,) = backfill.backfill(every_minute, NOW, NOW + minutes(1), actor="user:alice", now=NOW - minutes(5))
    assert run.idempotency_key == "ping@2026-06-01T11:00:00+02:00#backfill"
    assert run.available_at == NOW, "never before its nominal instant, even when `now` is earlier"
