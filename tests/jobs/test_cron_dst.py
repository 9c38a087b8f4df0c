"""jobs.cron across DST transitions: one table per zone, then properties and notes.

The rules (docs/dst.md): a *fixed* job (minute and hour fields not starting
with `*`) whose time falls in a gap runs once at the transition instant, and
runs only the first time a repeated time comes round; a *wildcard* job fires
at every real instant whose wall time matches, so never in a gap and on both
passes of a repeated time.

Times are written as the job's local wall time with the zone's abbreviation,
which says which pass of a repeated time is meant ("01:30 EDT" is the first
pass in New York, "01:30 EST" the second).
"""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from jobs import cron


def at(text: str, zone: str) -> datetime:
    """ "2026-11-01 01:30 EST" in America/New_York -> that aware instant (picks the fold)."""
    stamp, abbreviation = text.rsplit(" ", 1)
    wall = datetime.fromisoformat(stamp)
    for fold in (0, 1):
        candidate = wall.replace(tzinfo=ZoneInfo(zone), fold=fold)
        real = candidate.astimezone(UTC).astimezone(ZoneInfo(zone)).replace(tzinfo=None) == wall
        if real and candidate.tzname() == abbreviation:
            return candidate
    raise ValueError(f"{text} is not a time in {zone}")


def local(instant: datetime, zone: str) -> str:
    return f"{instant.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M %Z}"


def runs(expression: str, zone: str, after: str, count: int) -> list[str]:
    return [local(run, zone) for run in cron.occurrences(expression, zone, at(after, zone), count)]


def check(table, zone):
    for expression, after, expected in table:
        assert runs(expression, zone, after, len(expected)) == expected, (expression, after)


# America/New_York, 2026 (EST = UTC-5, EDT = UTC-4):
#   Sun 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC): 02:00-02:59 does not exist
#   Sun 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC): 01:00-01:59 happens twice
NEW_YORK = [
    # a fixed time in the gap runs at the transition, once
    ("30 2 * * *", "2026-03-07 12:00 EST", ["2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT"]),
    ("0,30 2 * * *", "2026-03-07 12:00 EST", ["2026-03-08 03:00 EDT", "2026-03-09 02:00 EDT", "2026-03-09 02:30 EDT"]),
    ("0 2,3 * * *", "2026-03-08 00:00 EST", ["2026-03-08 03:00 EDT", "2026-03-09 02:00 EDT"]),
    ("30 2 * * *", "2026-03-08 03:00 EDT", ["2026-03-09 02:30 EDT"]),
    # a fixed repeated time runs on the first pass only
    ("30 1 * * *", "2026-10-31 12:00 EDT", ["2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"]),
    ("30 1 * * *", "2026-11-01 01:30 EDT", ["2026-11-02 01:30 EST"]),
    ("30 1 * * *", "2026-11-01 01:15 EST", ["2026-11-02 01:30 EST"]),  # after in the second pass
    ("30 1 * * *", "2026-11-01 01:45 EDT", ["2026-11-02 01:30 EST"]),
    # wildcard jobs: no gap times, both passes of repeated times
    ("0 * * * *", "2026-03-08 00:30 EST", ["2026-03-08 01:00 EST", "2026-03-08 03:00 EDT", "2026-03-08 04:00 EDT"]),
    ("0 * * * *", "2026-11-01 00:30 EDT", ["2026-11-01 01:00 EDT", "2026-11-01 01:00 EST", "2026-11-01 02:00 EST"]),
    ("0 * * * *", "2026-11-01 01:30 EDT", ["2026-11-01 01:00 EST", "2026-11-01 02:00 EST"]),
    ("0 * * * *", "2026-11-01 01:00 EST", ["2026-11-01 02:00 EST"]),
    ("*/15 * * * *", "2026-03-08 01:30 EST", ["2026-03-08 01:45 EST", "2026-03-08 03:00 EDT", "2026-03-08 03:15 EDT"]),
    (
        "*/15 * * * *",
        "2026-11-01 01:30 EDT",
        [
            "2026-11-01 01:45 EDT",
            "2026-11-01 01:00 EST",
            "2026-11-01 01:15 EST",
            "2026-11-01 01:30 EST",
            "2026-11-01 01:45 EST",
            "2026-11-01 02:00 EST",
        ],
    ),
    ("* 2 * * *", "2026-03-07 12:00 EST", ["2026-03-09 02:00 EDT", "2026-03-09 02:01 EDT"]),
    ("* 1 * * *", "2026-11-01 01:58 EDT", ["2026-11-01 01:59 EDT", "2026-11-01 01:00 EST", "2026-11-01 01:01 EST"]),
    # macros and day-of-week jobs on the transition Sundays
    ("@daily", "2026-03-07 12:00 EST", ["2026-03-08 00:00 EST", "2026-03-09 00:00 EDT"]),
    ("@hourly", "2026-03-08 00:30 EST", ["2026-03-08 01:00 EST", "2026-03-08 03:00 EDT"]),
    ("30 2 * * sun", "2026-03-01 12:00 EST", ["2026-03-08 03:00 EDT", "2026-03-15 02:30 EDT"]),
]


def test_it_follows_new_york():
    check(NEW_YORK, "America/New_York")


# America/New_York, 2006, the rules before the 2007 change (first Sunday of
# April to last Sunday of October):
#   Sun 2006-04-02 02:00 EST -> 03:00 EDT (07:00 UTC): 02:00-02:59 does not exist
#   Sun 2006-10-29 02:00 EDT -> 01:00 EST (06:00 UTC): 01:00-01:59 happens twice
#   2006-03-12 and 2006-11-05 (the days today's rules would use) are ordinary days.
NEW_YORK_2006 = [
    ("30 2 * * *", "2006-03-11 12:00 EST", ["2006-03-12 02:30 EST", "2006-03-13 02:30 EST"]),
    ("30 2 * * *", "2006-04-01 12:00 EST", ["2006-04-02 03:00 EDT", "2006-04-03 02:30 EDT"]),
    ("30 1 * * *", "2006-10-28 12:00 EDT", ["2006-10-29 01:30 EDT", "2006-10-30 01:30 EST"]),
    ("30 1 * * *", "2006-11-04 12:00 EST", ["2006-11-05 01:30 EST", "2006-11-06 01:30 EST"]),
    ("0 * * * *", "2006-10-29 00:30 EDT", ["2006-10-29 01:00 EDT", "2006-10-29 01:00 EST", "2006-10-29 02:00 EST"]),
]


def test_it_follows_new_york_historic_rules():
    check(NEW_YORK_2006, "America/New_York")


# Europe/London, 2026 (GMT = UTC+0, BST = UTC+1):
#   Sun 2026-03-29 01:00 GMT -> 02:00 BST (01:00 UTC): 01:00-01:59 does not exist
#   Sun 2026-10-25 02:00 BST -> 01:00 GMT (01:00 UTC): 01:00-01:59 happens twice
LONDON = [
    ("30 1 * * *", "2026-03-28 12:00 GMT", ["2026-03-29 02:00 BST", "2026-03-30 01:30 BST"]),
    ("30 2 * * *", "2026-03-28 12:00 GMT", ["2026-03-29 02:30 BST", "2026-03-30 02:30 BST"]),
    ("30 1 * * *", "2026-10-24 12:00 BST", ["2026-10-25 01:30 BST", "2026-10-26 01:30 GMT"]),
    ("30 1 * * *", "2026-10-25 01:10 GMT", ["2026-10-26 01:30 GMT"]),
    ("0 * * * *", "2026-03-29 00:30 GMT", ["2026-03-29 02:00 BST", "2026-03-29 03:00 BST"]),
    ("0 * * * *", "2026-10-25 00:30 BST", ["2026-10-25 01:00 BST", "2026-10-25 01:00 GMT", "2026-10-25 02:00 GMT"]),
    ("@daily", "2026-03-28 12:00 GMT", ["2026-03-29 00:00 GMT", "2026-03-30 00:00 BST"]),
]


def test_it_follows_london():
    check(LONDON, "Europe/London")


# Europe/Berlin, 2026 (CET = UTC+1, CEST = UTC+2):
#   Sun 2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC): 02:00-02:59 does not exist
#   Sun 2026-10-25 03:00 CEST -> 02:00 CET (01:00 UTC): 02:00-02:59 happens twice
BERLIN = [
    ("30 2 * * *", "2026-03-28 12:00 CET", ["2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST"]),
    ("30 2 * * *", "2026-10-24 12:00 CEST", ["2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]),
    ("30 1 * * *", "2026-10-24 12:00 CEST", ["2026-10-25 01:30 CEST", "2026-10-26 01:30 CET"]),
    (
        "0 0-23/2 * * *",
        "2026-10-25 01:30 CEST",  # fixed: 0-23/2 does not start with *
        ["2026-10-25 02:00 CEST", "2026-10-25 04:00 CET"],
    ),
    (
        "0 */2 * * *",
        "2026-10-25 01:30 CEST",  # wildcard
        ["2026-10-25 02:00 CEST", "2026-10-25 02:00 CET", "2026-10-25 04:00 CET"],
    ),
    ("@hourly", "2026-10-25 01:30 CEST", ["2026-10-25 02:00 CEST", "2026-10-25 02:00 CET", "2026-10-25 03:00 CET"]),
    (
        "*/15 * * * *",
        "2026-03-29 01:30 CET",
        ["2026-03-29 01:45 CET", "2026-03-29 03:00 CEST", "2026-03-29 03:15 CEST"],
    ),
    ("@weekly", "2026-03-28 12:00 CET", ["2026-03-29 00:00 CET", "2026-04-05 00:00 CEST"]),
]


def test_it_follows_berlin():
    check(BERLIN, "Europe/Berlin")


# Australia/Sydney, 2026, southern hemisphere: DST ends in April, starts in October
# (AEST = UTC+10, AEDT = UTC+11):
#   Sun 2026-04-05 03:00 AEDT -> 02:00 AEST (Sat 16:00 UTC): 02:00-02:59 happens twice
#   Sun 2026-10-04 02:00 AEST -> 03:00 AEDT (Sat 16:00 UTC): 02:00-02:59 does not exist
SYDNEY = [
    ("30 2 * * *", "2026-04-04 12:00 AEDT", ["2026-04-05 02:30 AEDT", "2026-04-06 02:30 AEST"]),
    ("30 2 * * *", "2026-10-03 12:00 AEST", ["2026-10-04 03:00 AEDT", "2026-10-05 02:30 AEDT"]),
    ("30 1 * * *", "2026-10-03 12:00 AEST", ["2026-10-04 01:30 AEST", "2026-10-05 01:30 AEDT"]),
    ("0 * * * *", "2026-04-05 01:30 AEDT", ["2026-04-05 02:00 AEDT", "2026-04-05 02:00 AEST", "2026-04-05 03:00 AEST"]),
    ("0 * * * *", "2026-10-04 01:30 AEST", ["2026-10-04 03:00 AEDT", "2026-10-04 04:00 AEDT"]),
    ("@monthly", "2026-03-15 12:00 AEDT", ["2026-04-01 00:00 AEDT", "2026-05-01 00:00 AEST"]),
]


def test_it_follows_sydney():
    check(SYDNEY, "Australia/Sydney")


# Australia/Lord_Howe, 2026: a 30-minute shift (+1030 standard, +11 summer):
#   Sun 2026-04-05 02:00 +11 -> 01:30 +1030 (Sat 15:00 UTC): 01:30-01:59 happens twice
#   Sun 2026-10-04 02:00 +1030 -> 02:30 +11 (Sat 15:30 UTC): 02:00-02:29 does not exist
LORD_HOWE = [
    ("45 1 * * *", "2026-04-04 12:00 +11", ["2026-04-05 01:45 +11", "2026-04-06 01:45 +1030"]),
    ("15 1 * * *", "2026-04-04 12:00 +11", ["2026-04-05 01:15 +11", "2026-04-06 01:15 +1030"]),
    ("15 2 * * *", "2026-10-03 12:00 +1030", ["2026-10-04 02:30 +11", "2026-10-05 02:15 +11"]),
    (
        "0,15 2 * * *",
        "2026-10-03 12:00 +1030",
        ["2026-10-04 02:30 +11", "2026-10-05 02:00 +11", "2026-10-05 02:15 +11"],
    ),
    ("30 2 * * *", "2026-10-03 12:00 +1030", ["2026-10-04 02:30 +11", "2026-10-05 02:30 +11"]),
    (
        "*/15 * * * *",
        "2026-04-05 01:15 +11",
        [
            "2026-04-05 01:30 +11",
            "2026-04-05 01:45 +11",
            "2026-04-05 01:30 +1030",
            "2026-04-05 01:45 +1030",
            "2026-04-05 02:00 +1030",
        ],
    ),
    ("*/15 * * * *", "2026-10-04 01:45 +1030", ["2026-10-04 02:30 +11", "2026-10-04 02:45 +11"]),
    ("0 * * * *", "2026-04-05 00:30 +11", ["2026-04-05 01:00 +11", "2026-04-05 02:00 +1030"]),
    (
        "30 * * * *",
        "2026-04-05 00:45 +11",
        ["2026-04-05 01:30 +11", "2026-04-05 01:30 +1030", "2026-04-05 02:30 +1030"],
    ),
]


def test_it_follows_lord_howe():
    check(LORD_HOWE, "Australia/Lord_Howe")


# Asia/Kolkata, 2026: no DST, IST = UTC+5:30 all year; the other zones'
# transition days are ordinary days here.
KOLKATA = [
    ("30 2 * * *", "2026-03-07 12:00 IST", ["2026-03-08 02:30 IST", "2026-03-09 02:30 IST"]),
    ("30 1 * * *", "2026-10-24 12:00 IST", ["2026-10-25 01:30 IST", "2026-10-26 01:30 IST"]),
    ("*/15 * * * *", "2026-11-01 01:20 IST", ["2026-11-01 01:30 IST", "2026-11-01 01:45 IST", "2026-11-01 02:00 IST"]),
    ("0 * * * *", "2026-03-29 01:30 IST", ["2026-03-29 02:00 IST", "2026-03-29 03:00 IST"]),
]


def test_it_follows_kolkata():
    check(KOLKATA, "Asia/Kolkata")


# ------------------------------------------------------- croniter's mistakes


def test_it_runs_a_fixed_job_once_in_a_repeated_hour():
    """croniter 7.0.0 (aware start) runs `30 1 * * *` at 01:30 EDT *and* 01:30 EST."""
    start = at("2026-10-31 12:00 EDT", "America/New_York")
    wrong = croniter("30 1 * * *", start, ret_type=datetime)
    assert [local(wrong.get_next(), "America/New_York") for _ in range(2)] == [
        "2026-11-01 01:30 EDT",
        "2026-11-01 01:30 EST",
    ]  # what we correct
    assert runs("30 1 * * *", "America/New_York", "2026-10-31 12:00 EDT", 2) == [
        "2026-11-01 01:30 EDT",
        "2026-11-02 01:30 EST",
    ]


def test_it_runs_a_fixed_job_once_in_a_repeated_half_hour():
    """croniter 7.0.0 runs `45 1 * * *` at Lord Howe's 01:45 +11 and 01:45 +1030."""
    assert runs("45 1 * * *", "Australia/Lord_Howe", "2026-04-04 12:00 +11", 2) == [
        "2026-04-05 01:45 +11",
        "2026-04-06 01:45 +1030",
    ]


def test_it_never_moves_a_wildcard_job_to_a_time_that_does_not_match():
    """croniter 7.0.0 runs `* 2 * * *` at 03:00 EDT on the spring day: hour 3 is not 2."""
    assert runs("* 2 * * *", "America/New_York", "2026-03-07 12:00 EST", 1) == ["2026-03-09 02:00 EDT"]


# ------------------------------------------------------------- properties

# Windows of two days around each transition above, in UTC.
WINDOWS = [
    ("America/New_York", "2026-03-08 07:00"),
    ("America/New_York", "2026-11-01 06:00"),
    ("America/New_York", "2006-04-02 07:00"),
    ("America/New_York", "2006-10-29 06:00"),
    ("Europe/London", "2026-03-29 01:00"),
    ("Europe/London", "2026-10-25 01:00"),
    ("Europe/Berlin", "2026-03-29 01:00"),
    ("Europe/Berlin", "2026-10-25 01:00"),
    ("Australia/Sydney", "2026-04-04 16:00"),
    ("Australia/Sydney", "2026-10-03 16:00"),
    ("Australia/Lord_Howe", "2026-04-04 15:00"),
    ("Australia/Lord_Howe", "2026-10-03 15:30"),
    ("Asia/Kolkata", "2026-03-08 07:00"),
]

# Each expression with an independent matcher for its wall times.
SCHEDULES = [
    ("*/15 * * * *", lambda w: w.minute % 15 == 0),
    ("0 * * * *", lambda w: w.minute == 0),
    ("30 * * * *", lambda w: w.minute == 30),
    ("* 2 * * *", lambda w: w.hour == 2),
    ("*/20 1-3 * * *", lambda w: w.minute % 20 == 0 and 1 <= w.hour <= 3),
    ("30 2 * * *", lambda w: (w.hour, w.minute) == (2, 30)),
    ("30 1 * * *", lambda w: (w.hour, w.minute) == (1, 30)),
    ("0,30 2 * * *", lambda w: w.hour == 2 and w.minute in (0, 30)),
    ("15,45 1,2 * * *", lambda w: w.hour in (1, 2) and w.minute in (15, 45)),
    ("0-59/20 0-23/2 * * *", lambda w: w.minute % 20 == 0 and w.hour % 2 == 0),
    ("5 1,2 * * 0", lambda w: w.minute == 5 and w.hour in (1, 2) and w.isoweekday() == 7),
    ("0 0 * * *", lambda w: (w.hour, w.minute) == (0, 0)),
]


def brute_force(matches, wildcard: bool, zone: str, start: datetime, end: datetime) -> list:
    """The rules of docs/dst.md applied minute by minute in UTC over (start, end]."""
    tz, found, previous = ZoneInfo(zone), set(), None
    instant = start
    while instant < end:
        instant += timedelta(minutes=1)
        wall_clock = instant.astimezone(tz)
        wall = wall_clock.replace(tzinfo=None, fold=0)
        if previous is not None and not wildcard:  # the clocks jumped over these wall times
            jumped = (wall - previous) // timedelta(minutes=1)
            skipped = [previous + timedelta(minutes=m) for m in range(1, jumped)]
            if any(matches(w) for w in skipped):
                found.add(instant)
        if matches(wall) and (wildcard or wall_clock.fold == 0):
            found.add(instant)
        previous = wall
    return sorted(found)


def window(transition: str) -> tuple[datetime, datetime]:
    middle = datetime.fromisoformat(transition).replace(tzinfo=UTC)
    return middle - timedelta(days=1), middle + timedelta(days=1)


@pytest.mark.parametrize("zone, transition", WINDOWS)
@pytest.mark.parametrize("expression, matches", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_it_agrees_with_the_rules_minute_by_minute(zone, transition, expression, matches):
    start, end = window(transition)
    expected = brute_force(matches, cron.is_wildcard(expression), zone, start, end)
    found = [run for run in cron.occurrences(expression, zone, start, len(expected) + 1) if run <= end]
    assert [local(r, zone) for r in found] == [local(r, zone) for r in expected]


@pytest.mark.parametrize("zone, transition", WINDOWS)
@pytest.mark.parametrize("expression", [s[0] for s in SCHEDULES])
def test_it_continues_the_sequence_from_each_run(zone, transition, expression):
    """The scheduler asks for one run at a time, from the last one: same answers as one call."""
    start, end = window(transition)
    whole = cron.occurrences(expression, zone, start, 300)
    whole = [run for run in whole if run <= end]
    chained, previous = [], start
    for _ in range(len(whole) + 1):  # bounded: a run that failed to advance must not hang
        (run,) = cron.occurrences(expression, zone, previous, 1)
        assert run > previous
        if run > end:
            break
        chained.append(run)
        previous = run
    assert chained == whole
    assert all(run.tzinfo is UTC for run in whole)
    assert all(a < b for a, b in zip(whole, whole[1:]))


def test_it_continues_from_a_run_given_in_local_time():
    """The previous run may come back from the database in any zone, fold included."""
    zone = "America/New_York"
    first, second = cron.occurrences("0 * * * *", zone, at("2026-11-01 00:30 EDT", zone), 2)
    assert local(second, zone) == "2026-11-01 01:00 EST"
    in_local = first.astimezone(ZoneInfo(zone))
    assert cron.occurrences("0 * * * *", zone, in_local, 1) == [second]
    assert cron.occurrences("0 * * * *", zone, second.astimezone(ZoneInfo(zone)), 1) == [
        at("2026-11-01 02:00 EST", zone)
    ]


# ------------------------------------------------------------------ preview


def notes(expression: str, zone: str, after: str, count: int) -> list[tuple[str, str]]:
    return [(f"{o.local:%Y-%m-%d %H:%M %Z}", o.note) for o in cron.preview(expression, zone, at(after, zone), count)]


def test_it_explains_a_fixed_run_moved_out_of_a_gap():
    assert notes("30 2 * * *", "America/New_York", "2026-03-07 12:00 EST", 2) == [
        (
            "2026-03-08 03:00 EDT",
            "02:30 does not exist on 2026-03-08 in America/New_York (clocks jump 02:00→03:00); runs at 03:00 EDT",
        ),
        ("2026-03-09 02:30 EDT", ""),
    ]


def test_it_explains_several_gap_times_collapsed_into_one_run():
    assert notes("0,30 2 * * *", "America/New_York", "2026-03-07 12:00 EST", 1) == [
        (
            "2026-03-08 03:00 EDT",
            "02:00 and 02:30 do not exist on 2026-03-08 in America/New_York "
            "(clocks jump 02:00→03:00); runs at 03:00 EDT",
        ),
    ]


def test_it_explains_a_half_hour_gap():
    assert notes("15 2 * * *", "Australia/Lord_Howe", "2026-10-03 12:00 +1030", 1) == [
        (
            "2026-10-04 02:30 +11",
            "02:15 does not exist on 2026-10-04 in Australia/Lord_Howe (clocks jump 02:00→02:30); runs at 02:30 +11",
        ),
    ]


def test_it_explains_a_fixed_run_at_a_repeated_time():
    assert notes("30 1 * * *", "America/New_York", "2026-10-31 12:00 EDT", 2) == [
        ("2026-11-01 01:30 EDT", "01:30 happens twice on 2026-11-01; runs only at the first (EDT)"),
        ("2026-11-02 01:30 EST", ""),
    ]


def test_it_explains_both_passes_of_a_wildcard_job():
    assert notes("0 * * * *", "America/New_York", "2026-11-01 00:30 EDT", 3) == [
        ("2026-11-01 01:00 EDT", "01:00 happens twice on 2026-11-01; fires on both passes, this is the first (EDT)"),
        ("2026-11-01 01:00 EST", "repeated hour: fires on both passes; this is the second (01:00 EST)"),
        ("2026-11-01 02:00 EST", ""),
    ]


def test_it_explains_a_repeated_half_hour():
    second_passes = [
        n for n in notes("*/15 * * * *", "Australia/Lord_Howe", "2026-04-05 01:15 +11", 5) if "second" in n[1]
    ]
    assert second_passes == [
        ("2026-04-05 01:30 +1030", "repeated 30 minutes: fires on both passes; this is the second (01:30 +1030)"),
        ("2026-04-05 01:45 +1030", "repeated 30 minutes: fires on both passes; this is the second (01:45 +1030)"),
    ]


def test_it_explains_wildcard_times_lost_in_a_gap():
    assert notes("*/15 * * * *", "America/New_York", "2026-03-08 01:30 EST", 3) == [
        ("2026-03-08 01:45 EST", ""),
        (
            "2026-03-08 03:00 EDT",
            "skipped 02:00-02:45, which do not exist on 2026-03-08 in America/New_York (clocks jump 02:00→03:00)",
        ),
        ("2026-03-08 03:15 EDT", ""),
    ]
    assert notes("30 * * * *", "Europe/London", "2026-03-29 00:45 GMT", 1) == [
        (
            "2026-03-29 02:30 BST",
            "skipped 01:30, which does not exist on 2026-03-29 in Europe/London (clocks jump 01:00→02:00)",
        ),
    ]


def test_it_explains_a_skipped_day():
    """Samoa skipped 30 December 2011, moving from UTC-10 to UTC+14."""
    assert notes("0 12 * * *", "Pacific/Apia", "2011-12-29 06:00 -10", 2) == [
        ("2011-12-29 12:00 -10", ""),
        (
            "2011-12-31 00:00 +14",
            "12:00 does not exist on 2011-12-30 in Pacific/Apia (clocks "
            "jump 2011-12-30 00:00→2011-12-31 00:00); runs at 00:00 +14",
        ),
    ]


def test_it_moves_a_midnight_job_out_of_a_midnight_gap():
    """Chile springs forward at midnight: 00:00 does not exist on 2026-09-06."""
    assert runs("@daily", "America/Santiago", "2026-09-05 12:00 -04", 2) == [
        "2026-09-06 01:00 -03",
        "2026-09-07 00:00 -03",
    ]


def test_it_previews_the_same_runs_it_schedules():
    zone, after = "Europe/Berlin", at("2026-10-24 12:00 CEST", "Europe/Berlin")
    previewed = cron.preview("*/20 * * * *", zone, after, 100)
    assert [o.at_utc for o in previewed] == cron.occurrences("*/20 * * * *", zone, after, 100)
    # Not o.local == o.at_utc: Python calls a repeated wall time unequal to any other zone's.
    assert all(o.local.timestamp() == o.at_utc.timestamp() for o in previewed)
    assert all(o.local.tzinfo == ZoneInfo(zone) and o.at_utc.tzinfo is UTC for o in previewed)
    assert all(o.note == "" for o in cron.preview("0 9 * * *", "Asia/Kolkata", after, 30))


# The schedules that fire on whole days are walked by arithmetic, not croniter (cron._daily_walls);
# the DST rules act on the wall times either way. Both walks, side by side, in zones whose clocks do
# odd things: 30-minute DST (Lord Howe), a 45-minute offset (Kathmandu), a skipped day (Apia,
# 2011-12-30), midnight transitions (Santiago, Havana), a southern-hemisphere fall-back (Sydney).
ODD_ZONES = {
    "America/New_York": ["2026-03-08 06:30", "2026-11-01 05:10"],
    "Europe/London": ["2026-03-29 00:20", "2026-10-25 00:59"],
    "Australia/Lord_Howe": ["2026-04-04 14:40", "2026-10-03 15:10"],
    "Asia/Kathmandu": ["2026-01-01 00:00"],
    "Pacific/Apia": ["2011-12-29 09:00"],
    "America/Santiago": ["2026-04-05 02:30", "2026-09-06 03:30"],
    "America/Havana": ["2026-03-08 04:30", "2026-11-01 04:30"],
    "Australia/Sydney": ["2026-04-04 15:30", "2026-10-03 15:30"],
}
SHAPES = [
    "* * * * *",
    "0 * * * *",
    "30 * * * *",
    "*/15 * * * *",
    "0 0 * * *",
    "30 2 * * *",
    "0,30 1-3 * * *",
    "45 23 * * 1-5",
    "0 12 * * 0",
    "@daily",
    "@hourly",
]


@pytest.mark.parametrize("zone, afters", ODD_ZONES.items())
def test_the_every_day_walk_keeps_the_dst_rules_in_every_zone(zone, afters, monkeypatch):
    cases = [(shape, datetime.fromisoformat(after).replace(tzinfo=UTC)) for shape in SHAPES for after in afters]
    fast = [cron.occurrences(shape, zone, after, 150) for shape, after in cases]
    monkeypatch.setattr(cron, "_is_daily", lambda spec: False)  # croniter walks every schedule
    assert fast == [cron.occurrences(shape, zone, after, 150) for shape, after in cases]


def test_both_walks_end_at_the_year_9999(monkeypatch):
    fast = cron.occurrences("0 0 * * *", "UTC", datetime(9999, 12, 29, 12, tzinfo=UTC), 5)
    monkeypatch.setattr(cron, "_is_daily", lambda spec: False)
    assert fast == cron.occurrences("0 0 * * *", "UTC", datetime(9999, 12, 29, 12, tzinfo=UTC), 5)
