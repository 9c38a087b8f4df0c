"""jobs.occurrences: the one entry point of a job's occurrences, every kind, bounded by start_at and end_at.

`every` schedules across DST, one table per zone. Their transitions in 2026:

- Europe/Berlin: spring forward Sunday 29 March at 02:00 CET (01:00 UTC) to
  03:00 CEST; fall back Sunday 25 October at 03:00 CEST (01:00 UTC) to 02:00 CET.
- America/New_York: spring forward Sunday 8 March at 02:00 EST (07:00 UTC) to
  03:00 EDT; fall back Sunday 1 November at 02:00 EDT (06:00 UTC) to 01:00 EST.
- Australia/Lord_Howe: a half-hour change. Back Sunday 5 April at 02:00
  (+11, 15:00 UTC the day before) to 01:30 (+10:30); forward Sunday
  4 October at 02:00 (+10:30, 15:30 UTC the day before) to 02:30 (+11).

An `every` schedule counts absolute periods from its anchor, so its UTC
spacing never changes; its local wall times move by the change instead.
"""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobs import occurrences
from jobs.occurrences import Schedule

US = timedelta(microseconds=1)


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def local(instant, zone):
    return f"{instant.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M %Z}"


def every(seconds, start=None, end=None, zone="UTC"):
    return Schedule("every", time_zone=zone, every_seconds=seconds, start_at=start, end_at=end)


# --------------------------------------------------------------- every


def test_it_counts_periods_from_start_at():
    schedule = every(90, start=utc(2026, 6, 1, 9, 0))
    assert occurrences.after(schedule, utc(2026, 1, 1), 3) == [
        utc(2026, 6, 1, 9, 0),
        utc(2026, 6, 1, 9, 1, 30),
        utc(2026, 6, 1, 9, 3),
    ]


def test_it_does_not_drift_with_lateness():
    """Asked from a late instant (a run that started 7 s late), the next one is still on the anchor's grid."""
    schedule = every(90, start=utc(2026, 6, 1, 9, 0))
    late = utc(2026, 6, 1, 9, 1, 37)
    assert occurrences.after(schedule, late, 2) == [utc(2026, 6, 1, 9, 3), utc(2026, 6, 1, 9, 4, 30)]


def test_it_counts_from_the_unix_epoch_without_a_start():
    hourly = every(3600)
    assert occurrences.after(hourly, utc(2026, 6, 1, 9, 17), 2) == [utc(2026, 6, 1, 10), utc(2026, 6, 1, 11)]
    assert occurrences.after(every(7), utc(1970, 1, 1), 1) == [utc(1970, 1, 1, 0, 0, 7)]


def test_it_is_strictly_after_the_instant():
    schedule = every(60, start=utc(2026, 6, 1, 9))
    assert occurrences.after(schedule, utc(2026, 6, 1, 9, 1), 1) == [utc(2026, 6, 1, 9, 2)]
    assert occurrences.after(schedule, utc(2026, 6, 1, 9, 1) - US, 1) == [utc(2026, 6, 1, 9, 1)]


def test_it_keeps_a_one_second_period_exact_over_a_year():
    schedule = every(1, start=utc(2026, 1, 1))
    far = utc(2026, 12, 31, 23, 59, 58)
    assert occurrences.after(schedule, far, 2) == [utc(2026, 12, 31, 23, 59, 59), utc(2027, 1, 1)]


# Each row: zone, the anchor (UTC), what the 90-minute schedule's local times are around the change.
NINETY_MINUTES_ACROSS_DST = [
    (
        "Europe/Berlin",  # spring forward: 02:00 CET -> 03:00 CEST
        utc(2026, 3, 28, 22, 0),
        ["2026-03-28 23:00 CET", "2026-03-29 00:30 CET", "2026-03-29 03:00 CEST", "2026-03-29 04:30 CEST"],
    ),
    (
        "Europe/Berlin",  # fall back: 03:00 CEST -> 02:00 CET
        utc(2026, 10, 24, 22, 0),
        ["2026-10-25 00:00 CEST", "2026-10-25 01:30 CEST", "2026-10-25 02:00 CET", "2026-10-25 03:30 CET"],
    ),
    (
        "America/New_York",  # spring forward: 02:00 EST -> 03:00 EDT
        utc(2026, 3, 8, 5, 0),
        ["2026-03-08 00:00 EST", "2026-03-08 01:30 EST", "2026-03-08 04:00 EDT", "2026-03-08 05:30 EDT"],
    ),
    (
        "America/New_York",  # fall back: 02:00 EDT -> 01:00 EST; 01:00 EST comes after 01:30 EDT
        utc(2026, 11, 1, 3, 0),
        ["2026-10-31 23:00 EDT", "2026-11-01 00:30 EDT", "2026-11-01 01:00 EST", "2026-11-01 02:30 EST"],
    ),
    (
        "Australia/Lord_Howe",  # back half an hour: 02:00 +11 -> 01:30 +1030
        utc(2026, 4, 4, 12, 0),
        ["2026-04-04 23:00 +11", "2026-04-05 00:30 +11", "2026-04-05 01:30 +1030", "2026-04-05 03:00 +1030"],
    ),
]


@pytest.mark.parametrize(("zone", "anchor", "shown"), NINETY_MINUTES_ACROSS_DST)
def test_a_90_minute_period_keeps_its_absolute_spacing_across_a_dst_change(zone, anchor, shown):
    schedule = every(90 * 60, start=anchor, zone=zone)
    times = occurrences.after(schedule, anchor - US, 4)
    assert [local(t, zone) for t in times] == shown
    assert {later - earlier for earlier, later in zip(times, times[1:])} == {timedelta(minutes=90)}


def test_the_preview_notes_the_clock_change_and_keeps_the_spacing():
    schedule = every(90 * 60, start=utc(2026, 3, 28, 22, 0), zone="Europe/Berlin")
    shown = occurrences.preview(schedule, utc(2026, 3, 28, 21, 0), 4)
    assert [o.note for o in shown[:2]] == ["", ""]
    assert shown[2].note == (
        "clocks changed since the previous run (00:30 CET→03:00 CEST): still 90 minutes after it, as every period is"
    )
    assert shown[3].note == ""
    assert [f"{o.local:%H:%M %Z}" for o in shown] == ["23:00 CET", "00:30 CET", "03:00 CEST", "04:30 CEST"]


# --------------------------------------------------------------- bounds, each kind


def test_it_bounds_a_cron_schedule_by_start_and_end():
    schedule = Schedule("cron", cron_expr="0 * * * *", start_at=utc(2026, 6, 1, 9, 30), end_at=utc(2026, 6, 1, 12))
    assert occurrences.after(schedule, utc(2026, 6, 1), 10) == [utc(2026, 6, 1, 10), utc(2026, 6, 1, 11)]


def test_start_is_inclusive_and_end_exclusive_for_every_kind():
    start, end = utc(2026, 6, 1, 9), utc(2026, 6, 1, 10)
    cron = Schedule("cron", cron_expr="0 * * * *", start_at=start, end_at=end)
    assert occurrences.after(cron, utc(2026, 1, 1), 5) == [start]
    at_start = Schedule("at", run_at=start, start_at=start, end_at=end)
    assert occurrences.after(at_start, utc(2026, 1, 1), 5) == [start]
    at_end = Schedule("at", run_at=end, start_at=start, end_at=end)
    assert occurrences.after(at_end, utc(2026, 1, 1), 5) == []
    half_hourly = every(1800, start=start, end=end)
    assert occurrences.after(half_hourly, utc(2026, 1, 1), 5) == [start, utc(2026, 6, 1, 9, 30)]


def test_an_every_schedule_ends_at_its_end():
    schedule = every(60, start=utc(2026, 6, 1, 9), end=utc(2026, 6, 1, 9, 3))
    assert occurrences.after(schedule, utc(2026, 6, 1, 9, 1), 10) == [utc(2026, 6, 1, 9, 2)]
    assert occurrences.after(schedule, utc(2026, 6, 1, 9, 2), 10) == []


def test_an_every_schedule_without_a_start_still_stops_at_its_end():
    schedule = every(3600, end=utc(2026, 6, 1, 12))
    assert occurrences.after(schedule, utc(2026, 6, 1, 9, 30), 10) == [utc(2026, 6, 1, 10), utc(2026, 6, 1, 11)]


def test_an_at_schedule_and_none_schedule():
    run_at = utc(2026, 6, 1, 9)
    assert occurrences.after(Schedule("at", run_at=run_at), run_at - US, 3) == [run_at]
    assert occurrences.after(Schedule("at", run_at=run_at), run_at, 3) == []
    assert occurrences.after(Schedule("none"), utc(2026, 1, 1), 3) == []


def test_a_bounded_cron_preview_keeps_the_dst_notes_inside_the_bounds():
    schedule = Schedule(
        "cron",
        cron_expr="30 2 * * *",
        time_zone="Europe/Berlin",
        start_at=utc(2026, 3, 28, 12),
        end_at=utc(2026, 3, 30, 12),
    )
    shown = occurrences.preview(schedule, utc(2026, 3, 1), 10)
    assert [f"{o.local:%m-%d %H:%M %Z}" for o in shown] == ["03-29 03:00 CEST", "03-30 02:30 CEST"]
    assert "does not exist" in shown[0].note


def test_it_refuses_a_naive_instant():
    with pytest.raises(ValueError, match="timezone-aware"):
        occurrences.after(every(60), datetime(2026, 6, 1), 1)


# --------------------------------------------------------------- words


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(45, "45 s"), (60, "1 minute"), (90, "90 s"), (5400, "90 minutes"), (7200, "2 hours"), (86400, "1 day")],
)
def test_it_says_a_period_in_words(seconds, words):
    assert occurrences.period_words(seconds) == words


def test_it_describes_an_every_schedule_with_its_bounds():
    schedule = every(5400, start=utc(2026, 3, 28, 22), end=utc(2026, 4, 1), zone="Europe/Berlin")
    assert occurrences.describe(schedule) == (
        "every 90 minutes from 2026-03-28 23:00 CET, Europe/Berlin, until before 2026-04-01 02:00 CEST"
    )
    assert occurrences.describe(every(90)) == "every 90 s (counted from 1970-01-01 UTC), UTC"
