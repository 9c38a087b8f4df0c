"""Holidays from an iCalendar file: all-day and timed events, zones, recurrences, and clear refusals."""

import datetime as dt

import pytest

from calendars import ical

UK_BANK_HOLIDAYS = b"""BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//duetime tests//EN
BEGIN:VEVENT
UID:christmas@test
DTSTART;VALUE=DATE:20261225
DTEND;VALUE=DATE:20261227
SUMMARY:Christmas Day and Boxing Day
END:VEVENT
BEGIN:VEVENT
UID:new-year@test
DTSTART;VALUE=DATE:20270101
SUMMARY:New Year's Day
END:VEVENT
BEGIN:VEVENT
UID:eve@test
DTSTART;TZID=Europe/London:20261224T130000
DTEND;TZID=Europe/London:20261224T180000
SUMMARY:Christmas Eve afternoon
END:VEVENT
BEGIN:VEVENT
UID:audit@test
DTSTART:20260701T220000Z
DTEND:20260702T020000Z
SUMMARY:Year-end audit
END:VEVENT
BEGIN:VEVENT
UID:founders@test
DTSTART;VALUE=DATE:20260915
RRULE:FREQ=YEARLY
EXDATE;VALUE=DATE:20270915
SUMMARY:Founders' day
END:VEVENT
BEGIN:VEVENT
UID:cancelled@test
DTSTART;VALUE=DATE:20261001
STATUS:CANCELLED
SUMMARY:Not a holiday after all
END:VEVENT
END:VCALENDAR
"""


def test_it_reads_all_day_timed_and_recurring_events():
    found = ical.holidays(UK_BANK_HOLIDAYS, "Europe/London", today=dt.date(2026, 6, 1), years=3)
    assert {
        "name": "Christmas Day and Boxing Day",
        "start": "2026-12-25",
        "end": "2026-12-27",
        "all_day": True,
    } in found
    assert {"name": "New Year's Day", "start": "2027-01-01", "end": "2027-01-02", "all_day": True} in found
    assert {
        "name": "Christmas Eve afternoon",
        "start": "2026-12-24T13:00:00+00:00",
        "end": "2026-12-24T18:00:00+00:00",
        "all_day": False,
    } in found
    assert {
        "name": "Year-end audit",
        "start": "2026-07-01T22:00:00+00:00",
        "end": "2026-07-02T02:00:00+00:00",
        "all_day": False,
    } in found
    founders = [h["start"] for h in found if h["name"] == "Founders' day"]
    assert founders == ["2026-09-15", "2028-09-15"]  # yearly, 2027 excluded, three years ahead
    assert not [h for h in found if h["name"] == "Not a holiday after all"]


def test_a_floating_time_is_read_in_the_calendars_zone():
    data = b"BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20260701T090000\r\nDTEND:20260701T100000\r\nSUMMARY:Offsite\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    [offsite] = ical.holidays(data, "Europe/Berlin")
    assert offsite["start"] == "2026-07-01T07:00:00+00:00"


@pytest.mark.parametrize(
    "data, message",
    [
        (b"this is not a calendar", "not an iCalendar file"),
        (b"BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n", "no events"),
        (
            b"BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20260701T090000Z\r\nSUMMARY:Point\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
            "without DTEND",
        ),
        (
            b"BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20260702\r\nDTEND;VALUE=DATE:20260701\r\nSUMMARY:Back\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
            "ends before it starts",
        ),
    ],
)
def test_it_refuses_what_it_cannot_read_saying_why(data, message):
    with pytest.raises(ical.ICalError) as refused:
        ical.holidays(data, "UTC")
    assert message in str(refused.value)
