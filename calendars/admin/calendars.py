"""Business-day calendars in the portal: weekend days, holidays as lines of text, an iCalendar import.

A holiday is one line: `2026-12-25 Christmas Day` (one day),
`2026-12-24..2026-12-26 Christmas` (from the first to the last day, both
included), or `2026-12-24T13:00+00:00..2026-12-24T18:00+00:00 Christmas Eve
afternoon` (timed, with offsets). An uploaded .ics file's events
(calendars/ical.py) are added to them. Each change is audited.
"""

import datetime as dt

from django import forms
from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from calendars import blackouts, edits, ical
from calendars.models import Calendar, Window
from jobs.audit import actor_for_user
from scheduler_project.admin.filters import TenantFilter
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site

DAY = dt.timedelta(days=1)


def holiday_lines(holidays):
    """Calendar.holidays as the form's lines (the inverse of `parse_lines`)."""
    lines = []
    for h in holidays:
        if h.get("all_day"):
            first, stop = dt.date.fromisoformat(h["start"]), dt.date.fromisoformat(h["end"])
            last = stop - DAY
            span = first.isoformat() if last == first else f"{first.isoformat()}..{last.isoformat()}"
        else:
            span = f"{h['start']}..{h['end']}"
        lines.append(f"{span} {h['name']}")
    return "\n".join(lines)


def parse_lines(text):
    """The holidays of the form's lines; raises forms.ValidationError naming the first bad line."""
    holidays = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        span, _, name = line.partition(" ")
        first, _, last = span.partition("..")
        try:
            holidays.append(_holiday(first, last or first, name.strip() or "holiday"))
        except ValueError:
            raise forms.ValidationError(
                f"line {number} ({line!r}): write '2026-12-25 Christmas Day', '2026-12-24..2026-12-26 Christmas' "
                "or '2026-12-24T13:00+00:00..2026-12-24T18:00+00:00 Christmas Eve afternoon'"
            ) from None
    return holidays


def _holiday(first, last, name):
    if "T" not in first and "T" not in last:
        start, end = dt.date.fromisoformat(first), dt.date.fromisoformat(last) + DAY
        return {"name": name, "start": start.isoformat(), "end": end.isoformat(), "all_day": True}
    start, end = dt.datetime.fromisoformat(first), dt.datetime.fromisoformat(last)
    if start.utcoffset() is None or end.utcoffset() is None:
        raise ValueError("timed holidays need offsets")
    return {"name": name, "start": start.isoformat(), "end": end.isoformat(), "all_day": False}


class CalendarForm(forms.ModelForm):
    weekend = forms.TypedMultipleChoiceField(
        label="Weekend days",
        choices=[(i, name.title()) for i, name in enumerate(blackouts.WEEKDAY_NAMES, 1)],
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Days that are never business days.",
    )
    holiday_text = forms.CharField(
        label="Holidays",
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 70}),
        help_text="One a line: '2026-12-25 Christmas Day', '2026-12-24..2026-12-26 Christmas' (both days included), "
        "or '2026-12-24T13:00+00:00..2026-12-24T18:00+00:00 Christmas Eve afternoon'.",
    )
    ical_file = forms.FileField(
        label="Import an iCalendar file",
        required=False,
        help_text="An .ics file (e.g. a public-holiday feed): its events are added to the holidays above.",
    )

    class Meta:
        model = Calendar
        fields = ["tenant", "name", "time_zone"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["weekend"].initial = self.instance.weekend_days if self.instance.pk else [6, 7]
        self.fields["holiday_text"].initial = holiday_lines(self.instance.holidays or [])

    def clean(self):
        data = super().clean()
        try:
            holidays = parse_lines(data.get("holiday_text", ""))
        except forms.ValidationError as exc:
            self.add_error("holiday_text", exc)
            holidays = []
        upload = data.get("ical_file")
        if upload is not None:
            try:
                holidays += ical.holidays(upload.read(), data.get("time_zone") or "UTC")
            except (ical.ICalError, ValueError) as exc:
                self.add_error("ical_file", str(exc))
        weekend = sorted(data.get("weekend") or [])
        if len(weekend) == 7:
            self.add_error("weekend", "A calendar needs at least one business day a week.")
        problems = [p for p in map(blackouts.holiday_problem, holidays) if p]
        if problems:
            self.add_error("holiday_text", problems[0])
        # Only what is valid reaches the instance, whose clean() checks it again (errors above are the form's).
        self.instance.weekend_days = weekend if len(weekend) < 7 else [6, 7]
        self.instance.holidays = edits.distinct(edits.valid_holidays(holidays))
        return data


@admin.register(Calendar, site=site)
class CalendarAdmin(TenantScopedAdmin):
    form = CalendarForm
    list_display = ["name", "tenant", "time_zone", "weekend_text", "holiday_count", "updated_at"]
    list_filter = [TenantFilter]
    search_fields = ["name"]
    list_select_related = ["tenant"]
    readonly_fields = ["days_off", "used_by"]
    fields = ["tenant", "name", "time_zone", "weekend", "holiday_text", "ical_file", "days_off", "used_by"]

    def has_add_permission(self, request):
        return self.may_edit(request)

    def has_delete_permission(self, request, obj=None):
        return self.may_edit(request, obj)

    @admin.display(description="weekend")
    def weekend_text(self, calendar):
        return ", ".join(blackouts.WEEKDAY_NAMES[d - 1].title() for d in calendar.weekend_days) or "none"

    @admin.display(description="holidays")
    def holiday_count(self, calendar):
        return len(calendar.holidays)

    @admin.display(description="next days off")
    def days_off(self, calendar):
        if calendar.pk is None:
            return "Save the calendar to see its next days off."
        probe = Window(kind="calendar", name=calendar.name, calendar=calendar, resume_policy="skip")
        found = blackouts.upcoming(probe, timezone.now(), count=8)
        return format_html(
            '<ul class="portal-list" data-testid="calendar-days-off">{}</ul>',
            format_html_join(
                "",
                "<li>{} to {} UTC: {}</li>",
                ((f"{b.start:%a %Y-%m-%d %H:%M}", f"{b.end:%a %Y-%m-%d %H:%M}", b.name) for b in found),
            ),
        )

    @admin.display(description="windows using it")
    def used_by(self, calendar):
        if calendar.pk is None:
            return "—"
        names = list(calendar.windows.values_list("name", flat=True)[:20])
        return ", ".join(names) or "None: add a window of kind calendar to hold jobs on its days off."

    def save_model(self, request, obj, form, change):
        edits.save_calendar(obj, actor=actor_for_user(request.user), validate=False)  # the form ran clean()

    def delete_model(self, request, obj):
        edits.delete_calendars(Calendar.objects.filter(pk=obj.pk), actor=actor_for_user(request.user))

    def delete_queryset(self, request, queryset):
        edits.delete_calendars(queryset, actor=actor_for_user(request.user))
