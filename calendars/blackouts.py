"""Maintenance windows and business-day calendars as intervals, and what they do to a job's occurrences.

Pure rules over calendars.models objects, no queries: the caller loads a
job's windows once (`Window.objects.applying_to(jobs)`) and asks.

- `intervals(window, start, end)`: the blackout intervals of one window that
  overlap [start, end). A recurring window's starts are
  `jobs.cron.occurrences(cron_expr, time_zone, ...)`, so DST moves them as it
  moves a job; a calendar window covers each run of days its calendar does
  not count as business days (local midnight to local midnight, in the
  calendar's zone), and each timed holiday.
- `span_at(windows, t)`: the blackout covering the instant `t`, overlapping
  and touching windows merged into one span (a run held by a window that
  ends inside another waits for both), with the strictest resume policy of
  them (`skip` over `run_once` over `run_all`).
- `hold(times, walk, windows, cap)`: the occurrences `times` of one job sorted
  into those outside every window (run as usual), those a window holds until
  it ends (run_once, run_all) and those it skips, each skip as one summary
  (first, last, count, reason). Occurrences inside a span but past `times`
  (the look-ahead ends inside a window) are fetched with `walk` (jobs.occurrences, so any schedule
  kind and its bounds), so a window
  is decided once, whole, the first time one of its occurrences comes up.
"""

import collections
import dataclasses
import datetime as dt

from jobs import cron, occurrences

US = dt.timedelta(microseconds=1)
DAY = dt.timedelta(days=1)
# Counting the occurrences inside one window stops here (a minutely job in a 31-day freeze has 44,640):
# the skipped summary then says "more than", and run_once/run_all find the latest ones from the end.
WALK_LIMIT = 10_000
MAX_OFF_DAYS = 400  # a calendar run of days off longer than this is cut (a calendar must have business days)
MAX_INTERVALS = 5_000  # intervals of one window asked for one range (the ledger's longest page, the preview)
STRICTNESS = {"skip": 0, "run_once": 1, "run_all": 2}


@dataclasses.dataclass(frozen=True)
class Blackout:
    """One interval [start, end) of one window; `name` says which (and which holiday, for a calendar)."""

    start: dt.datetime
    end: dt.datetime
    name: str
    policy: str
    window_id: int | None = None


@dataclasses.dataclass(frozen=True)
class Span:
    """The merged blackout around an instant: from the first window's start to the last one's end."""

    start: dt.datetime
    end: dt.datetime
    names: tuple[str, ...]
    policy: str

    @property
    def label(self):
        return " + ".join(f"'{n}'" for n in self.names)


@dataclasses.dataclass
class Held:
    """`hold`'s answer for one job's occurrences."""

    free: list = dataclasses.field(default_factory=list)  # outside every window
    held: dict = dataclasses.field(default_factory=dict)  # due_at -> (available_at, reason): run once it ends
    skipped: list = dataclasses.field(default_factory=list)  # (first, last, count, reason)
    resume_after: dt.datetime | None = None  # the last occurrence decided (inside a window), if past `times`


# ------------------------------------------------------------ intervals


def intervals(window, start, end):
    """The blackout intervals of `window` overlapping [start, end), by start."""
    if window.kind == "one_off":
        if window.starts_at < end and window.ends_at > start:
            return [Blackout(window.starts_at, window.ends_at, window.name, window.resume_policy, window.pk)]
        return []
    if window.kind == "recurring":
        return _recurring(window, start, end)
    return _calendar(window, start, end)


def _recurring(window, start, end):
    length = dt.timedelta(seconds=window.duration_seconds)
    found, cursor, size = [], start - length, 2  # a probe of one instant needs one or two starts: ask few first
    while len(found) < MAX_INTERVALS:
        batch = cron.occurrences(window.cron_expr, window.time_zone, cursor, size)
        for begin in batch:
            if begin >= end:
                return found
            if begin + length > start:
                found.append(Blackout(begin, begin + length, window.name, window.resume_policy, window.pk))
        if len(batch) < size:
            return found
        cursor, size = batch[-1], min(size * 4, 256)
    return found


def _calendar(window, start, end):
    rules = compiled(window.calendar)
    found = [
        Blackout(s, e, f"{window.name}: {name}", window.resume_policy, window.pk)
        for s, e, name in rules.timed
        if s < end and e > start
    ]
    day, last = rules.local_day(start), rules.local_day(end - US)
    while day <= last and len(found) < MAX_INTERVALS:
        if rules.is_off(day):
            first = rules.first_off(day)
            following = rules.next_business_day(day)
            found.append(
                Blackout(
                    rules.midnight(first),
                    rules.midnight(following),
                    f"{window.name}: {rules.describe(first, following)}",
                    window.resume_policy,
                    window.pk,
                )
            )
            day = following
        else:
            day += DAY
    return sorted(found, key=lambda b: b.start)


class Rules:
    """A calendar's days off and timed holidays, ready to ask (built once per calendar and change)."""

    def __init__(self, calendar):
        self.zone = cron.get_zone(calendar.time_zone)
        self.weekend = frozenset(calendar.weekend_days or ())
        self.days = {}  # date -> holiday name
        self.timed = []  # (start, end, name)
        for holiday in calendar.holidays or ():
            if holiday.get("all_day"):
                first, stop = dt.date.fromisoformat(holiday["start"]), dt.date.fromisoformat(holiday["end"])
                for n in range(min((stop - first).days, MAX_OFF_DAYS)):
                    self.days.setdefault(first + dt.timedelta(days=n), holiday["name"])
            else:
                s, e = dt.datetime.fromisoformat(holiday["start"]), dt.datetime.fromisoformat(holiday["end"])
                self.timed.append((s.astimezone(dt.UTC), e.astimezone(dt.UTC), holiday["name"]))

    def local_day(self, instant):
        return instant.astimezone(self.zone).date()

    def midnight(self, day):
        """The first instant of `day` in the calendar's zone (as UTC)."""
        return dt.datetime.combine(day, dt.time(0), tzinfo=self.zone).astimezone(dt.UTC)

    def is_off(self, day):
        return day.isoweekday() in self.weekend or day in self.days

    def first_off(self, day):
        for _ in range(MAX_OFF_DAYS):
            if not self.is_off(day - DAY):
                return day
            day -= DAY
        return day

    def next_business_day(self, day):
        for _ in range(MAX_OFF_DAYS):
            day += DAY
            if not self.is_off(day):
                return day
        return day

    def describe(self, first, following):
        names = []
        day = first
        while day < following:
            name = self.days.get(day) or "weekend"
            if name not in names:
                names.append(name)
            day += DAY
        return ", ".join(names)


@dataclasses.dataclass
class _Compiled:
    stamp: object
    rules: Rules


def compiled(calendar):
    """The Rules of `calendar`, kept on the instance until it changes (one pass asks many times)."""
    stamp = (calendar.updated_at, calendar.time_zone, tuple(calendar.weekend_days or ()), len(calendar.holidays or ()))
    cached = calendar.__dict__.get("_duetime_rules")
    if cached is None or cached.stamp != stamp:
        cached = _Compiled(stamp, Rules(calendar))
        calendar.__dict__["_duetime_rules"] = cached
    return cached.rules


# ------------------------------------------------------------ spans


def covering(windows, instant):
    """The blackout intervals of `windows` that hold `instant`."""
    return [b for w in windows for b in _at(w, instant)]


MEMO_SIZE = 4096


def _at(window, instant):
    """The intervals of `window` holding `instant`, remembered on the window: a pass asks it for many jobs
    (a tenant-wide window, and every job due at :00) about the same few instants."""
    memo = window.__dict__.setdefault("_duetime_at", {})
    found = memo.get(instant)
    if found is None:
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        found = memo[instant] = [b for b in intervals(window, instant, instant + US) if b.start <= instant < b.end]
    return found


def span_at(windows, instant):
    """The merged blackout span around `instant`, or None when no window holds it."""
    hits = covering(windows, instant)
    if not hits:
        return None
    start, end = min(b.start for b in hits), max(b.end for b in hits)
    names = list(dict.fromkeys(b.name for b in hits))
    policy = min((b.policy for b in hits), key=STRICTNESS.get)
    for _ in range(100):  # windows that touch or overlap the end extend it
        more = [b for b in covering(windows, end) if b.end > end]
        if not more:
            break
        end = max(b.end for b in more)
        names += [b.name for b in more if b.name not in names]
        policy = min([policy, *(b.policy for b in more)], key=STRICTNESS.get)
    return Span(start, end, tuple(names), policy)


# ------------------------------------------------------------ holding occurrences


class Walk:
    """The occurrences of one job's schedule (a jobs.occurrences.Schedule, any kind, bounds included), for
    `hold`: `after(instant, count)` -> the next ones."""

    def __init__(self, schedule):
        self.schedule = schedule

    @classmethod
    def of(cls, job):
        return cls(occurrences.Schedule.of(job))

    def after(self, instant, count):
        return occurrences.after(self.schedule, instant, count)


def note_at(windows, instant):
    """What `windows` do to a run due at `instant`, in words ("" when none holds it): the previews' column."""
    span = span_at(windows, instant) if windows else None
    if span is None:
        return ""
    if span.policy == "skip":
        return f"skipped: window {span.label}"
    return f"held by window {span.label} until {span.end:%Y-%m-%d %H:%M} UTC ({span.policy})"


def hold(times, walk, windows, cap, *, jitter=dt.timedelta(0)):
    """Sort the sorted occurrences `times` by the windows that hold them (see the module docstring).

    A held run is available when its span ends (plus the job's jitter
    `jitter`). `resume_after` is set when deciding a span took occurrences
    beyond `times`: the caller's next occurrence is the first one after it.
    """
    result = Held()
    if not windows:
        result.free = list(times)
        return result
    index = 0
    while index < len(times):
        instant = times[index]
        span = span_at(windows, instant)
        if span is None:
            result.free.append(instant)
            index += 1
            continue
        latest, count, last = _inside(walk, instant, span.end, times[index:], cap)
        _decide(result, span, instant, latest, count, last, cap, jitter)
        while index < len(times) and times[index] < span.end:
            index += 1
        if last > times[-1]:
            result.resume_after = last
            break
    return result


def _inside(walk, first, end, known, cap):
    """(the latest `cap` occurrences in [first, end), how many there are or None past WALK_LIMIT, the last)."""
    found = [t for t in known if t < end]
    if found and found[-1] != known[-1]:  # `known` reaches past the end: nothing to fetch
        return found[-cap:], len(found), found[-1]
    cursor, size = (found[-1] if found else first - US), 4  # most windows hold a few occurrences: ask few first
    while len(found) < WALK_LIMIT:
        batch = walk.after(cursor, size)
        found += [t for t in batch if t < end]
        if len(batch) < size or batch[-1] >= end:
            return found[-cap:], len(found), found[-1]
        cursor, size = batch[-1], min(size * 4, 256)
    latest = _latest(walk, found[-1], end, cap)
    return latest, None, latest[-1]


def _latest(walk, known, end, cap):
    """The latest `cap` occurrences before `end`, after `known`, looking back from `end` (too many to count)."""
    reach = dt.timedelta(hours=1)
    while True:
        start = max(known, end - reach)
        found, cursor = collections.deque(maxlen=cap), start
        while True:
            batch = walk.after(cursor, 256)
            found.extend(t for t in batch if t < end)
            if len(batch) < 256 or batch[-1] >= end:
                break
            cursor = batch[-1]
        if len(found) >= cap or start == known:
            return list(found) or [known]
        reach *= 4


def _decide(result, span, first, latest, count, last, cap, jitter):
    """Record what `span` does to its occurrences: from `first` to `last`, `count` of them (None: too many)."""
    total = f"{count}" if count is not None else f"more than {WALK_LIMIT:,}"
    if span.policy == "skip":
        result.skipped.append(_summary(first, last, count, f"window {span.label} (skip)", total))
        return
    keep = latest[-1:] if span.policy == "run_once" else latest[-cap:]
    if count is None or count > len(keep):
        why = (
            f"window {span.label} (run_once runs only the latest occurrence inside it, at its end)"
            if span.policy == "run_once"
            else f"window {span.label} (run_all runs at most the latest {cap}, at its end)"
        )
        dropped = None if count is None else count - len(keep)
        before = keep[0] - US  # the skipped summary covers every occurrence before the first one kept
        shown = f"{dropped}" if dropped is not None else f"more than {WALK_LIMIT - len(keep):,}"
        result.skipped.append(_summary(first, before, dropped, why, shown, covers_to=before))
    reason = f"held by window {span.label} until {span.end:%Y-%m-%d %H:%M} UTC ({span.policy})"
    for due in keep:
        result.held[due] = (max(span.end, due) + jitter, reason)


def _summary(first, last, count, reason, total, *, covers_to=None):
    """(first, covers until, count, reason): one skipped row standing for `count` occurrences."""
    if count == 1:
        return (first, None, 1, reason)
    until = covers_to or last
    return (
        first,
        until,
        count if count is not None else WALK_LIMIT,
        f"{reason}: {total} occurrences from {first:%Y-%m-%d %H:%M} UTC to before {until + US:%Y-%m-%d %H:%M} UTC"
        if covers_to
        else f"{reason}: {total} occurrences from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC",
    )


# ------------------------------------------------------------ holidays


def holiday_problem(holiday):
    """What is wrong with one entry of Calendar.holidays, or "" (see Calendar's docstring)."""
    if not isinstance(holiday, dict) or not isinstance(holiday.get("name"), str):
        return 'each holiday is {"name", "start", "end", "all_day"}'
    try:
        if holiday.get("all_day"):
            first, stop = dt.date.fromisoformat(holiday["start"]), dt.date.fromisoformat(holiday["end"])
        else:
            first, stop = dt.datetime.fromisoformat(holiday["start"]), dt.datetime.fromisoformat(holiday["end"])
            if first.utcoffset() is None or stop.utcoffset() is None:
                return "a timed holiday's start and end carry a UTC offset"
    except (KeyError, TypeError, ValueError):
        return "start and end are dates (all-day) or ISO 8601 instants with an offset"
    if stop <= first:
        return "its end must be after its start"
    return ""


# ------------------------------------------------------------ words


def describe(window):
    """The window in plain words, e.g. "at 22:00 every day, Europe/Berlin, for 8 h"."""
    if window.kind == "one_off":
        return f"from {window.starts_at:%Y-%m-%d %H:%M} to {window.ends_at:%Y-%m-%d %H:%M} UTC"
    if window.kind == "recurring":
        try:
            when = cron.describe(window.cron_expr, window.time_zone)
        except (cron.CronError, cron.ZoneError) as exc:
            return f"invalid: {exc}"
        return f"{when}, for {duration_words(window.duration_seconds)}"
    calendar = window.calendar
    days = ", ".join(d.title()[:3] for i, d in enumerate(WEEKDAY_NAMES, 1) if i in (calendar.weekend_days or ()))
    return f"the days off of calendar '{calendar.name}' ({days or 'no weekend'}, {len(calendar.holidays)} holiday(s))"


WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def duration_words(seconds):
    if seconds % 86400 == 0:
        return f"{seconds // 86400} day(s)"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def upcoming(window, now, count=5):
    """The next `count` intervals of `window` that end after `now` (within 400 days, a one-off one whenever)."""
    if window.kind == "one_off":
        return intervals(window, now, max(now, window.starts_at) + US)
    for reach in (dt.timedelta(days=8), dt.timedelta(days=400)):
        found = [b for b in intervals(window, now, now + reach) if b.end > now][:count]
        if len(found) >= count:
            break
    return found
