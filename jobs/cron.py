"""Cron schedules in IANA time zones, with Duetime's DST rules (docs/dst.md).

A pure module: no models, no settings, no clock. Everything that needs "when
does this job run next" calls `occurrences()`; the portal calls `describe()`
and `preview()`. docs/dst.md is the user-facing account of these rules.

How an occurrence is found: croniter walks the expression's *local wall
times* (naive datetimes, so it never sees a DST change; schedules that fire on
whole days, like `0 * * * *` or `30 9 * * 1-5`, are walked by arithmetic
instead, which gives the same wall times far faster), and `_resolve()` maps
each wall time to real UTC instants with zoneinfo's fold rules (PEP 495).
The DST policy (gap and repeated-time handling) is applied here, not by
croniter, because croniter's own aware-datetime mode gets it wrong: it runs
fixed jobs twice in a repeated hour and shifts some wildcard jobs to wall times
that do not match the expression.

Syntax parsing and validation are ours too, so that errors can say what is
wrong and how to fix it, and so that croniter's extensions (seconds, years,
L, W, #, H, ?) and quirks (it reads `1-1` as "the whole field") never reach a
schedule. croniter only ever sees plain comma lists of numbers.
"""

import bisect
import copy
import heapq
import itertools
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import NamedTuple

from croniter import croniter

# Give up when no occurrence falls in the 8 calendar years after the previous
# one (or after `after`): 8 years is the longest wait for 29 February
# (2096 -> 2104), and it bounds the search for expressions that never match.
HORIZON_YEARS = 8

FIELD_NAMES = "minute hour day-of-month month day-of-week"
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = ("january february march april may june july august september october november december").split()
WEEKDAYS = "sunday monday tuesday wednesday thursday friday saturday".split()
# Zone keys that zoneinfo loads but that are not places: "localtime" is the
# host's setting, "Factory" means "zone not configured".
NOT_ZONES = {"localtime", "Factory"}


class CronError(ValueError):
    """An invalid cron expression; str() says what is wrong and how to fix it."""


class ZoneError(ValueError):
    """A name that is not an IANA time zone."""


@dataclass(frozen=True)
class Occurrence:
    """One previewed run: the UTC instant, the job's local time, a DST note ("" normally)."""

    at_utc: datetime
    local: datetime
    note: str


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    allowed: str  # completes "<name> must be ..."
    names: tuple[str, ...] = ()  # three-letter names, the first one standing for `low`


_FIELDS = (
    _Field("minute", 0, 59, "0-59"),
    _Field("hour", 0, 23, "0-23"),
    _Field("day-of-month", 1, 31, "1-31"),
    _Field("month", 1, 12, "1-12 or jan-dec", tuple(m[:3] for m in MONTHS)),
    _Field("day-of-week", 0, 7, "0-7 (0 and 7 are Sunday) or sun-sat", tuple(d[:3] for d in WEEKDAYS)),
)


@dataclass(frozen=True)
class _Spec:
    """A parsed expression: the sorted values of each field, plus the two flags §6 needs."""

    values: tuple[tuple[int, ...], ...]  # minute, hour, day-of-month, month, day-of-week (0-6)
    days_or: bool  # both day fields restricted: a day matches if either matches
    wildcard: bool  # minute or hour text starts with "*": DST gaps skip, repeats fire twice


# ---------------------------------------------------------------- parsing


def validate(expression: str) -> None:
    """Raise CronError if `expression` is not a schedule Duetime can run."""
    _parse(expression)


def is_wildcard(expression: str) -> bool:
    """True when the minute or hour field starts with "*" (so `@hourly` too, not `0-23/2`)."""
    return _parse(expression).wildcard


def _parse(expression: str) -> _Spec:
    if not isinstance(expression, str):  # before the cache, which would fail on unhashables
        raise CronError(f"{expression!r}: a cron expression must be text, like '0 2 * * *'")
    return _parse_text(expression)


@lru_cache(maxsize=4096)
def _parse_text(expression: str) -> _Spec:
    fields = expression.split()
    if fields and fields[0].startswith("@") and len(fields) == 1:
        fields = _expand_macro(expression, fields[0].lower()).split()
    if len(fields) != 5:
        empty = "the expression is empty; " if not fields else ""
        raise CronError(f"'{expression}': {empty}expected 5 fields ({FIELD_NAMES}) or a macro like @daily")
    values = [_parse_field(expression, f, t) for f, t in zip(_FIELDS, fields)]
    values[4] = tuple(sorted({v % 7 for v in values[4]}))  # 7 is Sunday too
    dom_star, dow_star = fields[2].startswith("*"), fields[4].startswith("*")
    return _Spec(
        tuple(values),
        days_or=not (dom_star or dow_star),
        wildcard=fields[0].startswith("*") or fields[1].startswith("*"),
    )


def _expand_macro(expression: str, macro: str) -> str:
    if macro == "@reboot":
        raise CronError(
            f"'{expression}': @reboot is not supported: Duetime runs schedules, "
            "not boot hooks; use @daily or a 5-field expression"
        )
    if macro not in MACROS:
        raise CronError(f"'{expression}': unknown macro; use one of {', '.join(MACROS)} or 5 fields ({FIELD_NAMES})")
    return MACROS[macro]


def _parse_field(expression: str, field: _Field, text: str) -> tuple[int, ...]:
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(expression, field, item))
    return tuple(sorted(values))


def _parse_item(expression: str, field: _Field, item: str) -> range:
    """One list item: `*`, `a` or `a-b`, each with an optional `/step`.

    `a/step` means `a-max/step`, as in Vixie cron.
    """
    span, slash, step_text = item.partition("/")
    if not span:
        raise CronError(f"'{expression}': {field.name} has an empty list item or range; write values like 1,15 or 1-5")
    step = _step(expression, field, step_text) if slash else 1
    if span == "*":
        return range(field.low, field.high + 1, step)
    low_text, dash, high_text = span.partition("-")
    low = _value(expression, field, low_text)
    high = _value(expression, field, high_text) if dash else (field.high if slash else low)
    if low > high:
        wraps = high == 0 and field.high == 7  # fri-sun: Sunday is 7 too
        fix = f"{low}-7" if wraps else f"{low}-{field.high},{field.low}-{high}"
        raise CronError(f"'{expression}': {field.name} range {span} runs backwards; write {fix}")
    return range(low, high + 1, step)


def _value(expression: str, field: _Field, token: str) -> int:
    if token.isascii() and token.isdigit():
        value = int(token)
    elif token.lower() in field.names:
        value = field.low + field.names.index(token.lower())
    else:
        kind = "a number or a name" if field.names else "a number"
        raise CronError(
            f"'{expression}': {field.name} value '{token}' is not {kind}; {field.name} must be {field.allowed}"
        )
    if not field.low <= value <= field.high:
        raise CronError(f"'{expression}': {field.name} must be {field.allowed}")
    return value


def _step(expression: str, field: _Field, text: str) -> int:
    size = field.high - field.low + 1
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= size:
        raise CronError(
            f"'{expression}': {field.name} step must be a whole number from 1 to {size}, as in */5 (got '{text}')"
        )
    return int(text)


def get_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone called `name`; ZoneError for anything else (paths, "", "localtime")."""
    if isinstance(name, zoneinfo.ZoneInfo):
        return name
    known = _zone_names().get(str(name).casefold())
    if not isinstance(name, str) or known != name:
        hint = f"did you mean {known}?" if known else "for example Europe/Berlin or America/New_York"
        raise ZoneError(f"'{name}' is not an IANA time zone ({hint})")
    return zoneinfo.ZoneInfo(name)


@lru_cache(maxsize=1)
def _zone_names() -> dict[str, str]:
    """casefolded -> real name, from the tz database's own list: that rejects paths,
    directories and the posix/ and right/ copies that ZoneInfo() would happily load."""
    return {name.casefold(): name for name in zoneinfo.available_timezones() - NOT_ZONES}


# ------------------------------------------------------------ occurrences


def occurrences(expression: str, time_zone: str, after: datetime, count: int) -> list[datetime]:
    """The next `count` runs strictly after the aware `after`, as increasing UTC datetimes.

    Fewer (possibly none) come back when the schedule has no run within
    HORIZON_YEARS of the previous one, e.g. `0 0 30 2 *`.
    """
    return [event.at for event in _upcoming(expression, time_zone, after, count)]


class _Event(NamedTuple):
    at: datetime  # the UTC instant
    kind: str  # NORMAL, MOVED (fixed job out of a gap), FIRST or SECOND pass of a repeated time
    walls: tuple[datetime, ...]  # the local wall times this run stands for
    skipped: tuple[datetime, ...] = ()  # wildcard wall times lost in the gap just before


NORMAL, MOVED, FIRST, SECOND = "normal", "moved", "first", "second"
_MISSING, _REPEATED = "missing", "repeated"


def _upcoming(expression: str, time_zone: str, after: datetime, count: int) -> Iterator[_Event]:
    """Check the arguments now (not at the first next()), then yield the runs after `after`."""
    spec, zone = _parse(expression), get_zone(time_zone)
    if not isinstance(after, datetime) or after.utcoffset() is None:
        raise ValueError(f"after must be a timezone-aware datetime, got {after!r}")
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a whole number 0 or more, got {count!r}")
    after = after.astimezone(UTC)
    return itertools.islice(_distinct(_events(spec, zone, after), after), count)


def _distinct(events: Iterator[_Event], after: datetime) -> Iterator[_Event]:
    last = after
    for event in events:
        if event.at > last:  # drops the scan's lead-in and same-instant duplicates
            last = event.at
            yield event


def _events(spec: _Spec, zone: zoneinfo.ZoneInfo, after: datetime) -> Iterator[_Event]:
    """The schedule's runs in time order, starting at or a little before `after`.

    Wall times increase but their instants need not (a repeated hour's second
    pass comes after later first-pass times), so runs wait in a heap until no
    later wall time can produce an earlier instant: a wall time's earliest
    instant is a lower bound for everything after it.
    """
    heap: list = []
    tiebreak = itertools.count()  # equal instants leave in the order they were found
    skipped: tuple[datetime, ...] = ()
    anchor = _first_wall(zone, after)
    for kind, first, second, walls in _resolved(spec, zone, anchor):
        if walls[0].year > anchor.year + HORIZON_YEARS:
            return
        if kind == _MISSING and spec.wildcard:
            skipped += walls  # gap times never fire for wildcard jobs
            continue
        run_kind = {_MISSING: MOVED, _REPEATED: FIRST}.get(kind, NORMAL)
        found = [_Event(first, run_kind, walls, skipped)]
        if kind == _REPEATED and spec.wildcard:
            found.append(_Event(second, SECOND, walls))
        for event in found:
            heapq.heappush(heap, (event.at, next(tiebreak), event))
        anchor, skipped = walls[-1], ()
        while heap and heap[0][0] <= first:
            yield heapq.heappop(heap)[2]
    while heap:
        yield heapq.heappop(heap)[2]


def _first_wall(zone: zoneinfo.ZoneInfo, after: datetime) -> datetime:
    """Where the wall-time scan starts: no earlier wall time has an instant after `after`.

    That is `after`'s own wall time, except in the first pass of a repeated
    time, where earlier wall times still have their second pass ahead.
    """
    local = after.astimezone(zone)
    wall = local.replace(tzinfo=None)
    if local.fold == 0:
        repeat = _offset(wall, zone, 0) - _offset(wall, zone, 1)
        if repeat > timedelta(0):
            wall -= repeat
    return wall


def _resolved(spec: _Spec, zone: zoneinfo.ZoneInfo, start: datetime) -> Iterator[tuple]:
    """(kind, first, second, walls) per matching wall time after `start`.

    Consecutive missing wall times skipped by one transition come out as one
    group, so that `0,30 2 * * *` on a spring-forward day is one run.
    """
    gap: list[datetime] = []
    gap_at = None
    for wall in _walls(spec, start):
        kind, first, second = _resolve(wall, zone)
        if gap and (kind != _MISSING or first != gap_at):
            yield _MISSING, gap_at, gap_at, tuple(gap)
            gap = []
        if kind == _MISSING:
            gap.append(wall)
            gap_at = first
        else:
            yield kind, first, second, (wall,)
    if gap:
        yield _MISSING, gap_at, gap_at, tuple(gap)


def _walls(spec: _Spec, start: datetime) -> Iterator[datetime]:
    """Matching naive wall times strictly after `start`'s minute: from croniter, or by arithmetic for
    the schedules that fire on whole days (`_daily_walls`), which are most of them."""
    if _is_daily(spec):
        yield from _daily_walls(spec, start)
        return
    walker = copy.copy(_walker(spec))  # a shallow copy is a fresh cursor; building one costs ~50 µs
    walker.set_current(start, force=True)
    while True:
        try:
            yield walker.get_next()
        except (ValueError, OverflowError):
            # CroniterBadDateError (a ValueError): nothing within HORIZON_YEARS;
            # ValueError/OverflowError: we ran past the year 9999.
            return


def _is_daily(spec: _Spec) -> bool:
    """Every day of every month, or every listed weekday (`* * * * *`, `5 * * * *`, `0 9 * * 1-5`): no
    day-of-month or month rule, so the next wall time is arithmetic on minutes, hours and weekdays."""
    _, _, day, month, _ = spec.values
    return not spec.days_or and len(day) == 31 and len(month) == 12


def _daily_walls(spec: _Spec, start: datetime) -> Iterator[datetime]:
    """What croniter yields for a `_is_daily` schedule, 40 times faster: the (hour, minute) pairs of
    each matching day in order, the first day's only after `start`'s minute, until the year 9999 ends.

    Only the local wall times come from here; `_resolve` maps them to instants with the DST rules,
    as for every schedule. tests/jobs/test_cron.py compares both walkers on every shape and zone.
    """
    minutes, hours, _, _, weekdays = spec.values
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    # The rest of `start`'s day: hours after its hour, and its own hour's minutes after its minute.
    later = bisect.bisect_right(minutes, start.minute)
    times = [(start.hour, m) for m in minutes[later:]] if start.hour in hours else []
    times += [(h, m) for h in hours[bisect.bisect_right(hours, start.hour) :] for m in minutes]
    every = [(h, m) for h in hours for m in minutes]
    every_weekday = len(weekdays) == 7
    while True:
        if every_weekday or (day.weekday() + 1) % 7 in weekdays:  # cron counts from Sunday = 0
            for hour, minute in times:
                yield day.replace(hour=hour, minute=minute)
        try:
            day += timedelta(days=1)
        except OverflowError:  # past 9999-12-31, where croniter stops too
            return
        times = every


@lru_cache(maxsize=4096)
def _walker(spec: _Spec) -> croniter:
    def text(values: tuple[int, ...], size: int, keep_list: bool = False) -> str:
        return "*" if len(values) == size and not keep_list else ",".join(map(str, values))

    minute, hour, day, month, weekday = spec.values
    # croniter applies OR only when neither day field is "*", so for an OR
    # schedule both stay lists even when one is full (`0 0 1-31 * 1` is every
    # day). It would also OR `*/2` with a weekday; Vixie ANDs it, hence
    # day_or comes from the field text, not from croniter's guess.
    expression = " ".join(
        (text(minute, 60), text(hour, 24), text(day, 31, spec.days_or), text(month, 12), text(weekday, 7, spec.days_or))
    )
    return croniter(
        expression,
        datetime(2000, 1, 1),
        ret_type=datetime,
        day_or=spec.days_or,
        max_years_between_matches=HORIZON_YEARS,
    )


def _offset(wall: datetime, zone: zoneinfo.ZoneInfo, fold: int) -> timedelta:
    return wall.replace(tzinfo=zone, fold=fold).utcoffset()


def _resolve(wall: datetime, zone: zoneinfo.ZoneInfo) -> tuple[str, datetime, datetime]:
    """Map a local wall time to (kind, first instant, second instant) in UTC.

    PEP 495: fold=0 reads a wall time with the offset in force before a
    transition, fold=1 with the one after. They agree for ordinary times; for
    a repeated time fold=0 is the earlier pass; for a missing time fold=0 lands
    after the transition and fold=1 before it, and both instants are made up,
    so the run goes to the transition itself.
    """
    before, after = _offset(wall, zone, 0), _offset(wall, zone, 1)
    first = (wall - before).replace(tzinfo=UTC)
    if before == after:
        return NORMAL, first, first
    second = (wall - after).replace(tzinfo=UTC)
    if before > after:
        return _REPEATED, first, second
    at = _transition(zone, second, first)
    return _MISSING, at, at


def _transition(zone: zoneinfo.ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The instant in (low, high] where the offset changes (zoneinfo keeps its table private)."""
    target = high.astimezone(zone).utcoffset()
    low_ts, high_ts = int(low.timestamp()), int(high.timestamp())
    while high_ts - low_ts > 1:
        middle = (low_ts + high_ts) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == target:
            high_ts = middle
        else:
            low_ts = middle
    return datetime.fromtimestamp(high_ts, UTC)


# ------------------------------------------------------- words for people


def describe(expression: str, time_zone: str) -> str:
    """The schedule in plain words, e.g. "at 09:00 Monday to Friday, Europe/Berlin"."""
    spec, zone = _parse(expression), get_zone(time_zone)
    minute, hour, day, month, weekday = spec.values
    if len(day) == 1 and len(month) == 1 and len(weekday) == 7 and not spec.days_or:
        days = f"on {day[0]} {MONTHS[month[0] - 1].title()}"  # @yearly, 29 February
    else:
        days = _describe_days(spec)
        if len(month) < 12:
            days += f" in {_join(_runs(month, lambda m: MONTHS[m - 1].title(), ' to '))}"
    times = _describe_times(minute, hour)
    if times.startswith("every") and days == "every day":
        return f"{times}, {zone.key}"
    return f"{times} {days}, {zone.key}"


def _describe_times(minute: tuple[int, ...], hour: tuple[int, ...]) -> str:
    if len(minute) * len(hour) <= 4:
        return "at " + _join([f"{h:02}:{m:02}" for h in hour for m in minute])
    step = minute[1] - minute[0] if len(minute) > 1 else 0
    if len(minute) == 60:
        phrase = "every minute"
    elif step and 60 % step == 0 and minute == tuple(range(0, 60, step)):
        phrase = f"every {step} minutes"
    elif len(hour) == 24:
        return f"every hour at minute{'s' * (len(minute) > 1)} {_join(_runs(minute, str))}"
    else:
        phrase = f"at minute{'s' * (len(minute) > 1)} {_join(_runs(minute, str))}"
    if len(hour) == 24:
        return phrase
    return f"{phrase} of hour{'s' * (len(hour) > 1)} {_join(_runs(hour, '{:02}'.format))}"


def _describe_days(spec: _Spec) -> str:
    _, _, day, _, weekday = spec.values
    all_days, all_weekdays = len(day) == 31, len(weekday) == 7
    on_days = f"on day{'s' * (len(day) > 1)} {_join(_runs(day, str))} of the month"
    if spec.days_or:  # either field may match
        return "every day" if all_days or all_weekdays else f"{on_days} and {_weekdays(weekday)}"
    if all_days:
        return "every day" if all_weekdays else _weekdays(weekday)
    if all_weekdays:
        return on_days
    names = [WEEKDAYS[d].title() for d in sorted(weekday, key=lambda d: (d + 6) % 7)]
    return f"{on_days} when that is a {_join(names, ' or ')}"


def _weekdays(weekday: tuple[int, ...]) -> str:
    """ "Monday to Friday" or "on Monday and Thursday", counting the week from Monday."""
    monday_first = sorted(weekday, key=lambda d: (d + 6) % 7)
    runs = _runs([(d + 6) % 7 for d in monday_first], lambda i: WEEKDAYS[(i + 1) % 7].title(), " to ")
    return runs[0] if len(runs) == 1 and " to " in runs[0] else f"on {_join(runs)}"


def _runs(values, show, dash: str = "-") -> list[str]:
    """Consecutive values of three or more as one "a-b" item."""
    items, values = [], list(values)
    while values:
        end = 0
        while end + 1 < len(values) and values[end + 1] == values[end] + 1:
            end += 1
        if end >= 2:
            items.append(f"{show(values[0])}{dash}{show(values[end])}")
        else:
            items += [show(v) for v in values[: end + 1]]
        values = values[end + 1 :]
    return items


def _join(items: list[str], last: str = " and ") -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + last + items[-1]


def preview(expression: str, time_zone: str, after: datetime, count: int) -> list[Occurrence]:
    """The next `count` runs like `occurrences()`, each with its local time and DST note."""
    zone, wildcard = get_zone(time_zone), is_wildcard(expression)
    events = _upcoming(expression, time_zone, after, count)
    return [Occurrence(e.at, e.at.astimezone(zone), _note(e, zone, wildcard)) for e in events]


def _note(event: _Event, zone: zoneinfo.ZoneInfo, wildcard: bool) -> str:
    notes, wall, local = [], event.walls[0], event.at.astimezone(zone)
    if event.skipped:
        notes.append(f"skipped {_span(event.skipped)}, which {_gap(event.skipped, zone)}")
    if event.kind == MOVED:
        notes.append(f"{_times(event.walls)} {_gap(event.walls, zone)}; runs at {local:%H:%M %Z}")
    elif event.kind == FIRST:
        passes = "fires on both passes, this is the first" if wildcard else "runs only at the first"
        notes.append(f"{wall:%H:%M} happens twice on {wall:%Y-%m-%d}; {passes} ({local:%Z})")
    elif event.kind == SECOND:
        minutes = (_offset(wall, zone, 0) - _offset(wall, zone, 1)) // timedelta(minutes=1)
        repeated = "hour" if minutes == 60 else f"{minutes} minutes"
        notes.append(f"repeated {repeated}: fires on both passes; this is the second ({local:%H:%M %Z})")
    return "; ".join(notes)


def _gap(walls: tuple[datetime, ...], zone: zoneinfo.ZoneInfo) -> str:
    """ "does not exist on <date> in <zone> (clocks jump 02:00→03:00)" for walls in one gap."""
    at = _resolve(walls[0], zone)[1]
    before = at + (at - timedelta(seconds=1)).astimezone(zone).utcoffset()
    after = at.astimezone(zone)
    shown = "%H:%M" if before.date() == after.date() else "%Y-%m-%d %H:%M"  # Samoa, 2011
    verb = "does not" if len(walls) == 1 else "do not"
    return f"{verb} exist on {walls[0]:%Y-%m-%d} in {zone.key} (clocks jump {before:{shown}}→{after:{shown}})"


def _span(walls: tuple[datetime, ...]) -> str:
    return f"{walls[0]:%H:%M}" if len(walls) == 1 else f"{walls[0]:%H:%M}-{walls[-1]:%H:%M}"


def _times(walls: tuple[datetime, ...]) -> str:
    if len(walls) > 3:
        return f"{_span(walls)} ({len(walls)} times)"
    return _join([f"{w:%H:%M}" for w in walls])
