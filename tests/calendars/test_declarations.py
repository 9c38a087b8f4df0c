"""Calendars and windows declared in a set (calendars/declarations.py): the plan, before anything is written."""

import pytest

from calendars import declarations
from calendars.models import Calendar, Window
from jobs import schedules
from tests.fixtures.schedules import days_off, declared, freeze, office


def planned(tenant, *, source="billing", prune=False, jobs=None, **parts):
    _, sections = declared(**parts)
    return declarations.plan(tenant, **sections, source=source, prune=prune, jobs=jobs or {})


def test_it_plans_a_window_naming_a_calendar_declared_beside_it_and_writes_nothing(acme):
    calendars, windows = planned(
        acme, calendars={"office": office()}, windows={"office days off": days_off(None), "freeze": freeze()}
    )

    assert [(c.name, c.action) for c in calendars.changes] == [("office", "create")]
    assert [(c.name, c.action) for c in windows.changes] == [("freeze", "create"), ("office days off", "create")]
    off = next(c for c in windows.changes if c.name == "office days off")
    assert off.target.calendar is calendars.changes[0].target, "saved before the window, which then takes its id"
    assert not Calendar.objects.exists() and not Window.objects.exists()


def test_it_adopts_a_window_and_a_calendar_made_outside_any_set(acme):
    Calendar.objects.create(tenant=acme, name="office", time_zone="Europe/Berlin", weekend_days=[6, 7])
    Window.objects.create(tenant=acme, name="freeze", kind="recurring", cron_expr="0 1 * * *", duration_seconds=60)

    calendars, windows = planned(acme, calendars={"office": office()}, windows={"freeze": freeze()})

    assert [(c.action, [f.field for f in c.fields]) for c in calendars.changes] == [("adopt", ["holidays"])]
    assert [(c.action, c.reason) for c in windows.changes] == [
        ("adopt", "made outside the set: the set owns it from now on")
    ]


def test_it_refuses_a_calendar_of_another_set_and_a_window_name_it_cannot_tell_apart(acme):
    Calendar.objects.create(tenant=acme, name="office", managed_by="payroll")
    for _ in range(2):
        Window.objects.create(tenant=acme, name="freeze", kind="recurring", cron_expr="0 1 * * *", duration_seconds=60)
    Window.objects.create(
        tenant=acme,
        name="payroll run",
        kind="recurring",
        cron_expr="0 1 * * *",
        duration_seconds=60,
        managed_by="payroll",
    )

    with pytest.raises(schedules.SetInvalid) as refused:
        planned(acme, calendars={"office": office()}, windows={"freeze": freeze(), "payroll run": freeze()})

    problems = {(section, name): message for section, name, _, message in refused.value.every()}
    assert "belongs to the set 'payroll'" in problems["calendars", "office"]
    assert "2 windows made outside any set are named 'freeze'" in problems["windows", "freeze"]
    assert ("windows", "payroll run") not in problems, "another set's window of that name is its own: a new one is made"


def test_it_names_the_section_the_name_and_the_field_of_each_problem(acme):
    with pytest.raises(schedules.SetInvalid) as refused:
        planned(
            acme,
            calendars={"office": office(time_zone="Mars/Olympus_Mons")},
            windows={
                "freeze": freeze(ends_at="2026-12-30T00:00:00+01:00"),
                "days off": days_off("billing.nowhere", calendar="office"),
            },
        )

    assert [(s, n, p) for s, n, p, _ in refused.value.every()] == [
        ("calendars", "office", "time_zone"),
        ("windows", "days off", "job"),
        ("windows", "freeze", "ends_at"),
    ]
    assert "windows.days off.job: no job named 'billing.nowhere'" in str(refused.value)


BANK_HOLIDAYS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//acme//EN
BEGIN:VEVENT
UID:summer@acme
DTSTART;VALUE=DATE:20260831
SUMMARY:Summer bank holiday
END:VEVENT
END:VCALENDAR
"""


def test_a_declared_calendar_takes_the_holidays_of_its_icalendar_text_too(acme):
    calendars, _ = planned(acme, calendars={"office": office(ical=BANK_HOLIDAYS)})

    [created] = calendars.changes
    assert [h["name"] for h in created.target.holidays] == ["Summer bank holiday", "Christmas"]
    with pytest.raises(schedules.SetInvalid) as refused:
        planned(acme, calendars={"office": office(ical="this is not a calendar")})
    [(section, name, path, message)] = refused.value.every()
    assert (section, name, path) == ("calendars", "office", "ical") and "not an iCalendar file" in message
