"""Windows and calendars as intervals, and what they do to a job's occurrences (pure: unsaved windows).

America/New_York, 2026: clocks spring forward on Sunday 8 March at 02:00 EST
(07:00 UTC) to 03:00 EDT, and fall back on Sunday 1 November at 02:00 EDT
(06:00 UTC) to 01:00 EST. Europe/London, 2026: BST from Sunday 29 March.
"""

import datetime as dt

import pytest

from calendars import blackouts
from calendars.models import Calendar, Window
from jobs.occurrences import Schedule

UTC = dt.UTC


def at(*args):
    return dt.datetime(*args, tzinfo=UTC)


def one_off(start, end, name="db upgrade", policy="skip", pk=None):
    return Window(pk=pk, kind="one_off", name=name, starts_at=start, ends_at=end, resume_policy=policy)


def recurring(expr, zone, seconds, name="nightly", policy="skip"):
    return Window(
        kind="recurring", name=name, cron_expr=expr, time_zone=zone, duration_seconds=seconds, resume_policy=policy
    )


def calendar_window(weekend=(6, 7), holidays=(), zone="Europe/London", policy="skip"):
    calendar = Calendar(name="uk", time_zone=zone, weekend_days=list(weekend), holidays=list(holidays))
    return Window(kind="calendar", name="UK business days", calendar=calendar, resume_policy=policy)


def test_a_recurring_window_follows_the_zones_dst_rules():
    # 02:30 New York does not exist on 8 March: like a fixed job, the window starts at 03:00 EDT.
    window = recurring("30 2 * * *", "America/New_York", 3600)
    starts = [b.start for b in blackouts.intervals(window, at(2026, 3, 7), at(2026, 3, 10))]
    assert starts == [at(2026, 3, 7, 7, 30), at(2026, 3, 8, 7, 0), at(2026, 3, 9, 6, 30)]


def test_a_recurring_window_that_began_before_the_range_still_counts():
    window = recurring("0 22 * * *", "UTC", 8 * 3600)
    [inside] = blackouts.intervals(window, at(2026, 6, 2, 3), at(2026, 6, 2, 4))
    assert (inside.start, inside.end) == (at(2026, 6, 1, 22), at(2026, 6, 2, 6))


def test_a_calendar_covers_each_run_of_days_off_from_local_midnight_to_local_midnight():
    window = calendar_window(
        holidays=[{"name": "Whit Monday", "start": "2026-06-08", "end": "2026-06-09", "all_day": True}]
    )
    [weekend] = blackouts.intervals(window, at(2026, 6, 3), at(2026, 6, 10))
    assert (weekend.start, weekend.end) == (at(2026, 6, 5, 23), at(2026, 6, 8, 23))  # BST: UTC+1
    assert weekend.name == "UK business days: weekend, Whit Monday"


def test_a_timed_holiday_covers_its_own_hours():
    half_day = {
        "name": "Christmas Eve afternoon",
        "start": "2026-12-24T12:00:00+00:00",
        "end": "2026-12-24T17:00:00+00:00",
    }
    window = calendar_window(holidays=[half_day])
    assert blackouts.span_at([window], at(2026, 12, 24, 13)).names == ("UK business days: Christmas Eve afternoon",)
    assert blackouts.span_at([window], at(2026, 12, 24, 11)) is None


def test_touching_windows_merge_into_one_span_with_the_strictest_policy():
    first = one_off(at(2026, 6, 1, 10), at(2026, 6, 1, 11), "first", "run_all")
    second = one_off(at(2026, 6, 1, 11), at(2026, 6, 1, 12), "second", "run_once")
    span = blackouts.span_at([first, second], at(2026, 6, 1, 10, 30))
    assert (span.start, span.end, span.names, span.policy) == (
        at(2026, 6, 1, 10),
        at(2026, 6, 1, 12),
        ("first", "second"),
        "run_once",
    )
    assert blackouts.span_at([first, second], at(2026, 6, 1, 12)) is None  # the end is outside


def test_hold_fetches_the_occurrences_of_a_window_past_the_lookahead():
    walk = blackouts.Walk(Schedule("cron", cron_expr="*/10 * * * *"))
    window = one_off(at(2026, 6, 1, 9, 5), at(2026, 6, 1, 10), policy="run_once")
    held = blackouts.hold([at(2026, 6, 1, 9, 0), at(2026, 6, 1, 9, 10)], walk, [window], cap=1000)
    assert held.free == [at(2026, 6, 1, 9, 0)]
    assert held.held == {
        at(2026, 6, 1, 9, 50): (at(2026, 6, 1, 10), "held by window 'db upgrade' until 2026-06-01 10:00 UTC (run_once)")
    }
    [(first, covers, count, reason)] = held.skipped
    assert (first, count) == (at(2026, 6, 1, 9, 10), 4) and covers < at(2026, 6, 1, 9, 50)
    assert held.resume_after == at(2026, 6, 1, 9, 50)


def test_a_window_too_long_to_count_still_runs_its_latest_occurrence(monkeypatch):
    monkeypatch.setattr(blackouts, "WALK_LIMIT", 300)
    walk = blackouts.Walk(Schedule("cron", cron_expr="* * * * *"))
    window = one_off(at(2026, 6, 1), at(2026, 6, 2), policy="run_once")
    held = blackouts.hold([at(2026, 6, 1, 0, 0)], walk, [window], cap=1000)
    assert list(held.held) == [at(2026, 6, 1, 23, 59)]
    assert "more than" in held.skipped[0][3]


@pytest.mark.parametrize(
    "holiday, problem",
    [
        ({"name": "x", "start": "2026-12-25", "end": "2026-12-26", "all_day": True}, ""),
        ({"name": "x", "start": "2026-12-25", "end": "2026-12-25", "all_day": True}, "its end must be after its start"),
        ({"name": "x", "start": "2026-12-25T10:00", "end": "2026-12-25T12:00"}, "carry a UTC offset"),
        ({"name": "x", "start": "Christmas", "end": "2026-12-26", "all_day": True}, "dates (all-day)"),
        ("Christmas", '{"name", "start", "end", "all_day"}'),
    ],
)
def test_it_says_what_is_wrong_with_a_holiday(holiday, problem):
    found = blackouts.holiday_problem(holiday)
    assert (problem in found) if problem else found == ""
