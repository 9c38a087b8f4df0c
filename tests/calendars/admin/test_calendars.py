"""Business-day calendars in the portal: holidays typed as lines or imported from an .ics file."""

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from calendars.admin.calendars import holiday_lines, parse_lines
from calendars.models import Calendar
from tests.calendars.test_ical import UK_BANK_HOLIDAYS

ADD = reverse("admin:calendars_calendar_add")


def test_it_round_trips_holiday_lines():
    text = "2026-12-25 Christmas Day\n2026-12-24..2026-12-26 Christmas\n2026-12-24T13:00:00+00:00..2026-12-24T18:00:00+00:00 Eve"
    assert holiday_lines(parse_lines(text)) == text


def test_it_imports_an_icalendar_file_into_a_new_calendar(as_alice, acme):
    upload = SimpleUploadedFile("uk.ics", UK_BANK_HOLIDAYS, content_type="text/calendar")
    answer = as_alice.post(
        ADD,
        {
            "tenant": acme.pk,
            "name": "uk",
            "time_zone": "Europe/London",
            "weekend": ["6", "7"],
            "holiday_text": "2026-08-31 Summer bank holiday",
            "ical_file": upload,
        },
    )
    assert answer.status_code == 302, answer.context["adminform"].form.errors
    calendar = Calendar.objects.get(name="uk")
    names = [h["name"] for h in calendar.holidays]
    assert "Summer bank holiday" in names and "Christmas Day and Boxing Day" in names
    assert calendar.weekend_days == [6, 7]


def test_a_bad_holiday_line_or_file_is_a_form_error(as_alice, acme):
    answer = as_alice.post(
        ADD,
        {
            "tenant": acme.pk,
            "name": "uk",
            "time_zone": "UTC",
            "holiday_text": "Christmas",
            "ical_file": SimpleUploadedFile("x.ics", b"not a calendar"),
        },
    )
    errors = answer.context["adminform"].form.errors
    assert "line 1" in str(errors["holiday_text"]) and "not an iCalendar file" in str(errors["ical_file"])
    assert not Calendar.objects.exists()


def test_a_calendar_without_business_days_is_refused(as_alice, acme):
    answer = as_alice.post(
        ADD, {"tenant": acme.pk, "name": "never", "time_zone": "UTC", "weekend": [str(d) for d in range(1, 8)]}
    )
    assert "at least one business day" in str(answer.context["adminform"].form.errors["weekend"])
