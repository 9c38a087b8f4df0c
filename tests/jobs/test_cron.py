"""jobs.cron without DST: syntax, validation, zones, calendar rules, describe.

The DST tables per zone live in test_cron_dst.py. Run from the project root:
    .venv/bin/python -m pytest tests/jobs/test_cron*.py -q -p no:django
"""

import itertools
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobs import cron


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def days(expression: str, after: str, count: int) -> list[str]:
    """The next runs of a UTC job as dates, e.g. ["2026-03-02", ...]."""
    return [f"{d:%Y-%m-%d}" for d in cron.occurrences(expression, "UTC", utc(after), count)]


def stamps(expression: str, after: str, count: int) -> list[str]:
    return [f"{d:%Y-%m-%d %H:%M}" for d in cron.occurrences(expression, "UTC", utc(after), count)]


# ------------------------------------------------------------------ syntax


@pytest.mark.parametrize(
    "expression, message",
    [
        ("61 * * * *", "'61 * * * *': minute must be 0-59"),
        ("5,61 * * * *", "'5,61 * * * *': minute must be 0-59"),
        ("0 24 * * *", "'0 24 * * *': hour must be 0-23"),
        ("0 0 0 * *", "'0 0 0 * *': day-of-month must be 1-31"),
        ("0 0 32 * *", "'0 0 32 * *': day-of-month must be 1-31"),
        ("0 0 1 13 *", "'0 0 1 13 *': month must be 1-12 or jan-dec"),
        ("0 0 1 0 *", "'0 0 1 0 *': month must be 1-12 or jan-dec"),
        ("0 0 * * 8", "'0 0 * * 8': day-of-week must be 0-7 (0 and 7 are Sunday) or sun-sat"),
        ("*/0 * * * *", "'*/0 * * * *': minute step must be a whole number from 1 to 60, as in */5 (got '0')"),
        ("*/90 * * * *", "'*/90 * * * *': minute step must be a whole number from 1 to 60, as in */5 (got '90')"),
        ("0 */x * * *", "'0 */x * * *': hour step must be a whole number from 1 to 24, as in */5 (got 'x')"),
        ("0 0 * foo *", "'0 0 * foo *': month value 'foo' is not a number or a name; month must be 1-12 or jan-dec"),
        (
            "0 0 * * monday",
            "'0 0 * * monday': day-of-week value 'monday' is not a number or a name; "
            "day-of-week must be 0-7 (0 and 7 are Sunday) or sun-sat",
        ),
        ("0 mon * * *", "'0 mon * * *': hour value 'mon' is not a number; hour must be 0-23"),
        ("0 0 L * *", "'0 0 L * *': day-of-month value 'L' is not a number; day-of-month must be 1-31"),
        ("0 0 ? * *", "'0 0 ? * *': day-of-month value '?' is not a number; day-of-month must be 1-31"),
        (
            "0 0 * * 1#2",
            "'0 0 * * 1#2': day-of-week value '1#2' is not a number or a name; "
            "day-of-week must be 0-7 (0 and 7 are Sunday) or sun-sat",
        ),
        ("50-10 * * * *", "'50-10 * * * *': minute range 50-10 runs backwards; write 50-59,0-10"),
        ("0 0 * * fri-sun", "'0 0 * * fri-sun': day-of-week range fri-sun runs backwards; write 5-7"),
        ("1,,2 * * * *", "'1,,2 * * * *': minute has an empty list item or range; write values like 1,15 or 1-5"),
        ("* * *", "'* * *': expected 5 fields (minute hour day-of-month month day-of-week) or a macro like @daily"),
        (
            "0 0 0 * * * *",
            "'0 0 0 * * * *': expected 5 fields (minute hour day-of-month month day-of-week) or a macro like @daily",
        ),
        (
            "",
            "'': the expression is empty; expected 5 fields (minute hour day-of-month month "
            "day-of-week) or a macro like @daily",
        ),
        (
            "@reboot",
            "'@reboot': @reboot is not supported: Duetime runs schedules, not boot hooks; "
            "use @daily or a 5-field expression",
        ),
        (
            "@fortnightly",
            "'@fortnightly': unknown macro; use one of @yearly, @annually, @monthly, "
            "@weekly, @daily, @midnight, @hourly or 5 fields (minute hour day-of-month "
            "month day-of-week)",
        ),
    ],
)
def test_it_explains_an_invalid_expression(expression, message):
    with pytest.raises(cron.CronError) as caught:
        cron.validate(expression)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "expression",
    [
        "61 * * * *",
        "0 24 * * *",
        "0 0 0 * *",
        "0 0 1 13 *",
        "0 0 * * 8",
        "*/0 * * * *",
        "0 0 * foo *",
        "* * *",
        "",
        "@reboot",
    ],
)
def test_it_says_what_is_wrong_without_a_field_prefix(expression):
    with pytest.raises(cron.CronError) as caught:
        cron.validate(expression)
    message = str(caught.value)
    assert message.startswith(f"'{expression}': ")
    assert not message.startswith("cron_expr")
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "expression, message",
    [
        ("61 * * * *", "minute must be 0-59"),
        ("0 24 * * *", "hour must be 0-23"),
        ("0 0 0 * *", "day-of-month must be 1-31"),
        ("0 0 1 13 *", "month must be 1-12 or jan-dec"),
        ("0 0 * * 8", "day-of-week must be 0-7"),
        ("*/0 * * * *", "step must be a whole number"),
        ("0 0 * jan-foo *", "month value 'foo' is not a number or a name"),
        ("* * *", "expected 5 fields"),
        ("", "the expression is empty"),
    ],
)
def test_it_names_the_problem(expression, message):
    with pytest.raises(cron.CronError, match=message):
        cron.validate(expression)


def test_it_rejects_an_expression_that_is_not_text():
    with pytest.raises(cron.CronError, match="must be text"):
        cron.validate(None)
    with pytest.raises(cron.CronError, match="must be text"):
        cron.validate(["0", "2", "*", "*", "*"])


@pytest.mark.parametrize(
    "expression",
    [
        "* * * * *",
        "0 2 * * *",
        "*/15 * * * *",
        "0 9 * * 1-5",
        "0 0 1,15 * 1",
        "0 0 */2 * 1",
        "0 0 * * 7",
        "0 0 * JAN-MAR/2 SUN",
        "10/20 * * * *",
        "0-23/2 0-23/2 * * *",
        "  0   2 *  * *  ",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@DAILY",
        "*/60 * * * *",
    ],
)
def test_it_accepts_vixie_syntax(expression):
    cron.validate(expression)


def test_it_reads_names_in_any_case_and_7_as_sunday():
    sundays = days("0 0 * * 0", "2026-03-01", 3)
    assert sundays == ["2026-03-08", "2026-03-15", "2026-03-22"]
    for same in ("0 0 * * 7", "0 0 * * sun", "0 0 * * SUN", "0 0 * * Sun", "0 0 * * 0,7"):
        assert days(same, "2026-03-01", 3) == sundays
    assert days("0 0 1 Feb,aug *", "2026-01-01", 2) == ["2026-02-01", "2026-08-01"]


def test_it_reads_ranges_lists_and_steps():
    assert stamps("10/20 * * * *", "2026-03-01 00:00", 3) == [
        "2026-03-01 00:10",
        "2026-03-01 00:30",
        "2026-03-01 00:50",
    ]  # a/s is a-59/s (Vixie)
    assert stamps("5-20/5 3 * * *", "2026-03-01 00:00", 4) == [
        "2026-03-01 03:05",
        "2026-03-01 03:10",
        "2026-03-01 03:15",
        "2026-03-01 03:20",
    ]
    assert days("0 0 1 jan-jun/2 *", "2026-01-01", 3) == ["2026-03-01", "2026-05-01", "2027-01-01"]
    assert days("0 0 * * fri-sat,7", "2026-03-01", 3) == ["2026-03-06", "2026-03-07", "2026-03-08"]


def test_it_reads_a_one_value_range_as_that_value():
    """croniter 7.0.0 reads `1-1` as the whole field (every day here); Vixie reads it as 1."""
    assert days("0 0 * * 1-1", "2026-03-01", 2) == ["2026-03-02", "2026-03-09"]
    assert stamps("7-7 * * * *", "2026-03-01 00:00", 2) == ["2026-03-01 00:07", "2026-03-01 01:07"]


@pytest.mark.parametrize(
    "macro, same",
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_it_expands_macros(macro, same):
    after = utc("2026-03-01 12:34")
    assert cron.occurrences(macro, "Europe/Berlin", after, 5) == cron.occurrences(same, "Europe/Berlin", after, 5)


def test_it_runs_the_macros_when_expected():
    assert stamps("@yearly", "2026-03-01 00:00", 2) == ["2027-01-01 00:00", "2028-01-01 00:00"]
    assert stamps("@monthly", "2026-03-01 00:00", 2) == ["2026-04-01 00:00", "2026-05-01 00:00"]
    assert stamps("@weekly", "2026-03-01 00:00", 2) == ["2026-03-08 00:00", "2026-03-15 00:00"]
    assert stamps("@daily", "2026-03-01 00:00", 2) == ["2026-03-02 00:00", "2026-03-03 00:00"]
    assert stamps("@hourly", "2026-03-01 00:00", 2) == ["2026-03-01 01:00", "2026-03-01 02:00"]


# -------------------------------------------------------------- day fields


def test_it_runs_when_either_restricted_day_field_matches():
    """Both day fields restricted: the 1st, the 15th and every Monday."""
    assert days("0 0 1,15 * 1", "2026-03-01", 7) == [
        "2026-03-02",
        "2026-03-09",
        "2026-03-15",
        "2026-03-16",
        "2026-03-23",
        "2026-03-30",
        "2026-04-01",
    ]


def test_it_needs_both_day_fields_when_one_starts_with_a_star():
    """Odd days of the month that are Mondays.

    croniter 7.0.0 ORs `*/2` with a weekday (it only ANDs a bare `*`) and gives
    2026-03-02, 03-03, 03-05...; Vixie cron ANDs any field starting with `*`.
    """
    assert days("0 0 */2 * 1", "2026-03-01", 4) == ["2026-03-09", "2026-03-23", "2026-04-13", "2026-04-27"]


def test_it_needs_both_when_the_weekday_field_starts_with_a_star():
    """The 1st of the month when it is a Sunday, Tuesday, Thursday or Saturday."""
    assert days("0 0 1 * */2", "2026-01-01", 4) == ["2026-02-01", "2026-03-01", "2026-08-01", "2026-09-01"]


def test_it_treats_a_full_range_as_restricted():
    """`1-31` does not start with `*`, so it ORs with Monday: every day."""
    assert days("0 0 1-31 * 1", "2026-03-01", 3) == ["2026-03-02", "2026-03-03", "2026-03-04"]


def test_it_skips_months_without_the_day():
    assert days("0 0 31 * *", "2026-01-01", 7) == [
        "2026-01-31",
        "2026-03-31",
        "2026-05-31",
        "2026-07-31",
        "2026-08-31",
        "2026-10-31",
        "2026-12-31",
    ]


def test_it_finds_29_february_in_leap_years():
    assert days("0 0 29 2 *", "2026-01-01", 3) == ["2028-02-29", "2032-02-29", "2036-02-29"]


def test_it_waits_8_years_across_2100_which_is_no_leap_year():
    assert days("0 0 29 2 *", "2096-03-01", 1) == ["2104-02-29"]


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 */7"])
def test_it_gives_up_on_a_day_that_never_comes(expression):
    """No run within HORIZON_YEARS: an empty list, not an endless search."""
    assert cron.occurrences(expression, "Europe/Berlin", utc("2026-01-01 00:00"), 3) == []


def test_it_returns_fewer_runs_near_the_end_of_time():
    assert days("0 0 1 1 *", "9997-06-01", 5) == ["9998-01-01", "9999-01-01"]


# ------------------------------------------------------------ the contract


def test_it_returns_aware_utc_instants_strictly_after_after():
    after = datetime(2026, 3, 1, 9, 0, tzinfo=ZoneInfo("Asia/Tokyo"))
    runs = cron.occurrences("*/10 * * * *", "America/New_York", after, 50)
    assert len(runs) == 50
    assert all(run.tzinfo is UTC for run in runs)
    assert runs[0] == after + timedelta(minutes=10)
    assert all(a < b for a, b in zip(runs, runs[1:]))


def test_it_counts_sub_seconds():
    assert stamps("0 9 * * *", "2026-03-01 09:00:00.500000", 1) == ["2026-03-02 09:00"]
    assert stamps("0 9 * * *", "2026-03-01 08:59:59.999999", 1) == ["2026-03-01 09:00"]
    assert stamps("0 9 * * *", "2026-03-01 09:00:00", 1) == ["2026-03-02 09:00"]
    assert stamps("* * * * *", "2026-03-01 09:00:59.999999", 1) == ["2026-03-01 09:01"]


def test_it_refuses_a_naive_after():
    with pytest.raises(ValueError, match="timezone-aware"):
        cron.occurrences("* * * * *", "UTC", datetime(2026, 3, 1), 1)


def test_it_checks_its_arguments_even_for_no_runs():
    with pytest.raises(cron.CronError):
        cron.occurrences("61 * * * *", "UTC", utc("2026-03-01 00:00"), 0)
    with pytest.raises(cron.ZoneError):
        cron.occurrences("* * * * *", "Mars/Base", utc("2026-03-01 00:00"), 0)
    with pytest.raises(ValueError, match="count"):
        cron.occurrences("* * * * *", "UTC", utc("2026-03-01 00:00"), -1)
    assert cron.occurrences("* * * * *", "UTC", utc("2026-03-01 00:00"), 0) == []


# -------------------------------------------------------------------- zones


@pytest.mark.parametrize(
    "name",
    [
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
        "UTC",
        "Etc/GMT+5",
        "US/Eastern",
    ],
)
def test_it_loads_iana_zones(name):
    assert cron.get_zone(name) == ZoneInfo(name)


EXAMPLES = "(for example Europe/Berlin or America/New_York)"


@pytest.mark.parametrize(
    "name, message",
    [
        ("Mars/Base", "'Mars/Base' is not an IANA time zone (for example Europe/Berlin or America/New_York)"),
        ("", "'' is not an IANA time zone " + EXAMPLES),
        ("europe/berlin", "'europe/berlin' is not an IANA time zone (did you mean Europe/Berlin?)"),
        ("America", "'America' is not an IANA time zone " + EXAMPLES),
        ("/etc/localtime", "'/etc/localtime' is not an IANA time zone " + EXAMPLES),
        ("America/../UTC", "'America/../UTC' is not an IANA time zone " + EXAMPLES),
        ("posix/Europe/Berlin", "'posix/Europe/Berlin' is not an IANA time zone " + EXAMPLES),
        ("localtime", "'localtime' is not an IANA time zone " + EXAMPLES),
        ("zone.tab", "'zone.tab' is not an IANA time zone " + EXAMPLES),
        ("posixrules", "'posixrules' is not an IANA time zone " + EXAMPLES),
    ],
)
def test_it_rejects_what_is_not_a_zone(name, message):
    with pytest.raises(cron.ZoneError) as caught:
        cron.get_zone(name)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


# ---------------------------------------------------------------- wildcard


@pytest.mark.parametrize(
    "expression, wildcard",
    [
        ("* * * * *", True),
        ("*/15 * * * *", True),
        ("0 * * * *", True),
        ("30 */2 * * *", True),
        ("* 2 * * *", True),
        ("@hourly", True),
        ("0 2 * * *", False),
        ("0-23/2 0-23/2 * * *", False),
        ("0 0-23/2 * * *", False),
        ("0,30 2 * * *", False),
        ("0 0 * * *", False),
        ("@daily", False),
        ("@midnight", False),
        ("@weekly", False),
        ("@monthly", False),
        ("@yearly", False),
        ("0 0 */2 * *", False),
    ],
)
def test_it_knows_wildcard_jobs(expression, wildcard):
    assert cron.is_wildcard(expression) is wildcard


def test_it_checks_the_expression_before_calling_it_wildcard():
    with pytest.raises(cron.CronError):
        cron.is_wildcard("* * *")


# ---------------------------------------------------------------- describe


@pytest.mark.parametrize(
    "expression, zone, words",
    [
        ("0 2 * * *", "Europe/Berlin", "at 02:00 every day, Europe/Berlin"),
        ("*/15 * * * *", "Europe/Berlin", "every 15 minutes, Europe/Berlin"),
        ("0 9 * * 1-5", "America/New_York", "at 09:00 Monday to Friday, America/New_York"),
        ("* * * * *", "UTC", "every minute, UTC"),
        ("@hourly", "UTC", "every hour at minute 0, UTC"),
        ("5,35 * * * *", "UTC", "every hour at minutes 5 and 35, UTC"),
        ("*/7 * * * *", "UTC", "every hour at minutes 0, 7, 14, 21, 28, 35, 42, 49 and 56, UTC"),
        ("*/10 9-17 * * 1-5", "UTC", "every 10 minutes of hours 09-17 Monday to Friday, UTC"),
        ("0 9-17 * * *", "UTC", "at minute 0 of hours 09-17 every day, UTC"),
        ("0,30 9,17 * * *", "UTC", "at 09:00, 09:30, 17:00 and 17:30 every day, UTC"),
        ("@daily", "UTC", "at 00:00 every day, UTC"),
        ("@weekly", "UTC", "at 00:00 on Sunday, UTC"),
        ("@monthly", "UTC", "at 00:00 on day 1 of the month, UTC"),
        ("@yearly", "UTC", "at 00:00 on 1 January, UTC"),
        ("0 0 29 2 *", "UTC", "at 00:00 on 29 February, UTC"),
        ("0 0 31 * *", "UTC", "at 00:00 on day 31 of the month, UTC"),
        ("0 0 1,15 * 1", "UTC", "at 00:00 on days 1 and 15 of the month and on Monday, UTC"),
        ("0 0 1-31 * 1", "UTC", "at 00:00 every day, UTC"),
        ("0 0 29 2 0-6", "UTC", "at 00:00 every day in February, UTC"),  # OR with every weekday
        ("0 0 */10 * 1", "UTC", "at 00:00 on days 1, 11, 21 and 31 of the month when that is a Monday, UTC"),
        ("0 0 * * 0,6", "UTC", "at 00:00 on Saturday and Sunday, UTC"),
        ("0 0 * * fri-7", "UTC", "at 00:00 Friday to Sunday, UTC"),
        ("0 12 * jan-mar,dec sat", "UTC", "at 12:00 on Saturday in January to March and December, UTC"),
        ("0 6 1 */6 *", "UTC", "at 06:00 on day 1 of the month in January and July, UTC"),
    ],
)
def test_it_describes_a_schedule_in_words(expression, zone, words):
    assert cron.describe(expression, zone) == words


def test_it_checks_before_describing():
    with pytest.raises(cron.CronError):
        cron.describe("61 * * * *", "UTC")
    with pytest.raises(cron.ZoneError):
        cron.describe("* * * * *", "Mars/Base")


# ------------------------------------------------- the every-day walk (no croniter)

# Schedules that fire on whole days -- no day-of-month or month rule -- are walked by arithmetic
# (cron._daily_walls) instead of croniter: it must give the very wall times croniter gives.
EVERY_DAY = [
    "* * * * *",
    "0 * * * *",
    "59 * * * *",
    "*/5 * * * *",
    "7,37 */6 * * *",
    "0 0 * * *",
    "30 23 * * *",
    "0 9-17 * * 1-5",
    "15 10 * * 0",
    "0 12 * * 6,7",
    "*/7 3-4 * * */2",
    "0 0 1-31 * *",
    "@hourly",
    "@daily",
    "@weekly",
]


def walls_of(walker, expression, start, count):
    spec = cron._parse(expression)
    if walker == "croniter":
        import copy

        cursor = copy.copy(cron._walker(spec))
        cursor.set_current(start, force=True)
        return [cursor.get_next() for _ in range(count)]
    return list(itertools.islice(cron._daily_walls(spec, start), count))


def random_every_day(rng):
    def field(low, high):
        kind = rng.randrange(5)
        if kind == 0:
            return "*"
        if kind == 1:
            return str(rng.randint(low, high))
        if kind == 2:
            a = rng.randint(low, high)
            return f"{a}-{rng.randint(a, high)}"
        if kind == 3:
            return f"*/{rng.randint(1, high - low + 1)}"
        return ",".join(str(rng.randint(low, high)) for _ in range(rng.randint(2, 4)))

    weekday = field(0, 7) if rng.random() < 0.4 else "*"
    return f"{field(0, 59)} {field(0, 23)} * * {weekday}"


def test_it_walks_every_day_schedules_as_croniter_does():
    rng = random.Random(11)
    expressions = EVERY_DAY + [random_every_day(rng) for _ in range(300)]
    for expression in expressions:
        assert cron._is_daily(cron._parse(expression)), expression
        start = datetime(rng.randint(2020, 2031), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23))
        start = start.replace(minute=rng.randint(0, 59), second=rng.choice([0, 0, 30]), microsecond=rng.choice([0, 7]))
        assert walls_of("fast", expression, start, 60) == walls_of("croniter", expression, start, 60), (
            expression,
            start,
        )


@pytest.mark.parametrize(
    "start",
    [
        datetime(2028, 2, 28, 23, 59, 59),  # into a leap day
        datetime(2026, 12, 31, 23, 59),  # into a new year
        datetime(2026, 3, 1, 0, 0),  # exactly on a match: strictly after it
        datetime(2026, 6, 30, 9, 0, 0, 1),
    ],
)
@pytest.mark.parametrize("expression", EVERY_DAY)
def test_the_every_day_walk_agrees_across_month_and_year_ends(expression, start):
    assert walls_of("fast", expression, start, 40) == walls_of("croniter", expression, start, 40)


def test_the_every_day_walk_ends_with_the_year_9999_as_croniter_does():
    assert cron.occurrences("0 0 * * *", "UTC", utc("9999-12-29 12:00"), 5) == [
        utc("9999-12-30 00:00"),
        utc("9999-12-31 00:00"),
    ]


@pytest.mark.parametrize(
    "expression, every_day",
    [
        ("* * * * *", True),
        ("0 9 * * 1-5", True),
        ("@hourly", True),
        ("0 0 1-31 * *", True),  # every day of the month, written out
        ("0 0 1 * *", False),  # a day-of-month rule: croniter walks it
        ("0 0 * 2 *", False),  # a month rule
        ("0 0 1-31 * 1", False),  # both day fields restricted: either may match
        ("@monthly", False),
    ],
)
def test_it_walks_by_arithmetic_only_what_fires_on_whole_days(expression, every_day):
    assert cron._is_daily(cron._parse(expression)) is every_day
