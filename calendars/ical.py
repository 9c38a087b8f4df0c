"""Holidays from an iCalendar file (RFC 5545), for a business-day calendar.

Each VEVENT becomes one holiday: an all-day event (DTSTART;VALUE=DATE) covers
its dates, DTEND exclusive (one day when DTEND and DURATION are absent); a
timed event covers [DTSTART, DTEND), read in its TZID, in UTC when it ends
in Z, and in the calendar's zone when it is floating. A yearly or other
RRULE is expanded up to `years` ahead of `today` (EXDATE honoured).
Cancelled events (STATUS:CANCELLED) are left out. The parsing is the
`icalendar` package's; what a holiday is, is ours.
"""

import datetime as dt

import icalendar
from dateutil import rrule

from jobs import cron

MAX_EVENTS = 2000
RRULE_YEARS = 3


class ICalError(ValueError):
    """A file that is not an iCalendar file, or an event Duetime cannot read; str() says which."""


def holidays(data, time_zone, *, today=None, years=RRULE_YEARS):
    """The holidays of the iCalendar `data` (bytes or text) as Calendar.holidays entries, sorted by start."""
    zone = cron.get_zone(time_zone)
    try:
        calendar = icalendar.Calendar.from_ical(data)
    except ValueError as exc:
        raise ICalError(f"not an iCalendar file: {exc}") from exc
    today = today or dt.date.today()
    horizon = dt.datetime.combine(today.replace(year=today.year + years), dt.time(0), tzinfo=dt.UTC)
    found = []
    for event in calendar.walk("VEVENT"):
        if str(event.get("STATUS", "")).upper() == "CANCELLED":
            continue
        found += _event(event, zone, horizon)
        if len(found) > MAX_EVENTS:
            raise ICalError(f"more than {MAX_EVENTS} holidays: import a shorter calendar")
    if not found:
        raise ICalError("the file has no events (VEVENT)")
    return sorted(found, key=lambda h: (h["start"], h["name"]))


def _event(event, zone, horizon):
    name = str(event.get("SUMMARY", "")).strip() or "holiday"
    if "DTSTART" not in event:
        raise ICalError(f"event '{name}' has no DTSTART")
    start = event.decoded("DTSTART")
    all_day = not isinstance(start, dt.datetime)
    length = _length(event, start, all_day, name)
    starts = [start]
    if "RRULE" in event:
        starts = _expand(event, start, zone, horizon, all_day)
    return [_holiday(name, s, s + length, all_day, zone) for s in starts]


def _length(event, start, all_day, name):
    if "DTEND" in event:
        end = event.decoded("DTEND")
        if isinstance(end, dt.datetime) != (not all_day):
            raise ICalError(f"event '{name}': DTSTART and DTEND must both be dates or both times")
        length = end - start
    elif "DURATION" in event:
        length = event.decoded("DURATION")
    elif all_day:
        length = dt.timedelta(days=1)
    else:
        raise ICalError(f"event '{name}' is a timed event without DTEND or DURATION: it would block nothing")
    if length <= dt.timedelta(0):
        raise ICalError(f"event '{name}' ends before it starts")
    return length


def _expand(event, start, zone, horizon, all_day):
    """The starts of a recurring event up to `horizon` (dates for all-day events)."""
    anchor = dt.datetime.combine(start, dt.time(0)) if all_day else start
    if anchor.tzinfo is None and not all_day:
        anchor = anchor.replace(tzinfo=zone)
    rule_text = event["RRULE"].to_ical().decode()
    try:
        rule = rrule.rrulestr(rule_text, dtstart=anchor)
    except (ValueError, TypeError) as exc:
        raise ICalError(f"RRULE {rule_text!r}: {exc}") from exc
    limit = horizon.replace(tzinfo=None) if anchor.tzinfo is None else horizon
    excluded = _exdates(event, all_day)
    starts = []
    for occurrence in rule.xafter(anchor - dt.timedelta(microseconds=1), count=MAX_EVENTS + 1, inc=True):
        if occurrence > limit:
            break
        value = occurrence.date() if all_day else occurrence
        if value not in excluded:
            starts.append(value)
    return starts


def _exdates(event, all_day):
    values = event.get("EXDATE", [])
    found = set()
    for group in values if isinstance(values, list) else [values]:
        for item in group.dts:
            value = item.dt
            found.add(value if not all_day or not isinstance(value, dt.datetime) else value.date())
    return found


def _holiday(name, start, end, all_day, zone):
    if all_day:
        return {"name": name, "start": start.isoformat(), "end": end.isoformat(), "all_day": True}
    if start.tzinfo is None:  # floating time: the calendar's own zone
        start, end = start.replace(tzinfo=zone), end.replace(tzinfo=zone)
    return {
        "name": name,
        "start": start.astimezone(dt.UTC).isoformat(),
        "end": end.astimezone(dt.UTC).isoformat(),
        "all_day": False,
    }
