"""The bodies of a maintenance window and a business-day calendar.

Shared by /v1/windows and /v1/calendars (calendars/api) and the declared set
of PUT /v1/schedules (jobs/api/schedules.py), whose `windows` and `calendars`
take the same bodies: two surfaces, one shape.
"""

from rest_framework import serializers

from calendars.models import MAX_HOLIDAYS, ResumePolicy, Window
from jobs.validation import NAME_RE
from scheduler_project.api.fields import AwareDateTimeField, Boolean, Integer, Pattern, Text

CALENDAR_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$"


class WindowSerializer(serializers.Serializer):
    """A window: one-off (`starts_at`, `ends_at`), recurring (`cron`, `time_zone`, `duration_seconds`) or the days
    off of a `calendar`; for one `job` or (null) every job of the tenant. POST/PUT send the whole window."""

    id = serializers.IntegerField(read_only=True)
    name = Text(max_length=100, help_text="Shown as the reason of what it skips, e.g. 'db upgrade'.")
    job = Pattern(NAME_RE, required=False, allow_null=True, default=None, help_text="A job's name; null: every job.")
    kind = serializers.ChoiceField(Window.Kind.values, help_text="one_off, recurring or calendar.")
    starts_at = AwareDateTimeField(required=False, allow_null=True, default=None, help_text="one_off: inclusive.")
    ends_at = AwareDateTimeField(required=False, allow_null=True, default=None, help_text="one_off: exclusive.")
    cron = Text(max_length=200, required=False, allow_blank=True, default="", help_text="recurring: each start.")
    time_zone = Text(max_length=64, required=False, default="UTC", help_text="recurring: the zone of `cron`.")
    duration_seconds = Integer(min_value=1, required=False, allow_null=True, default=None)
    calendar = Text(max_length=100, required=False, allow_null=True, default=None, help_text="calendar: its name.")
    resume_policy = serializers.ChoiceField(ResumePolicy.values, default=ResumePolicy.SKIP)
    enabled = Boolean(default=True)
    note = Text(max_length=2000, required=False, allow_blank=True, default="")
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)

    def to_representation(self, window):
        return {
            "id": window.pk,
            "name": window.name,
            "job": window.job.name if window.job_id else None,
            "kind": window.kind,
            "starts_at": serializers.DateTimeField().to_representation(window.starts_at) if window.starts_at else None,
            "ends_at": serializers.DateTimeField().to_representation(window.ends_at) if window.ends_at else None,
            "cron": window.cron_expr,
            "time_zone": window.time_zone,
            "duration_seconds": window.duration_seconds,
            "calendar": window.calendar.name if window.calendar_id else None,
            "resume_policy": window.resume_policy,
            "enabled": window.enabled,
            "note": window.note,
            "created_at": serializers.DateTimeField().to_representation(window.created_at),
            "updated_at": serializers.DateTimeField().to_representation(window.updated_at),
        }


class HolidaySerializer(serializers.Serializer):
    name = Text(max_length=200)
    start = Text(max_length=40, help_text="YYYY-MM-DD for an all-day holiday, else an ISO 8601 instant with offset.")
    end = Text(max_length=40, help_text="Exclusive, like iCalendar's DTEND.")
    all_day = Boolean(default=True)


class CalendarSerializer(serializers.Serializer):
    """A business-day calendar: every day but its weekend days and holidays, in `time_zone`."""

    name = serializers.CharField(read_only=True)
    time_zone = Text(max_length=64, default="UTC")
    weekend_days = serializers.ListField(
        child=Integer(min_value=1, max_value=7),
        default=[6, 7],
        max_length=6,
        help_text="ISO weekday numbers that are not business days (6 Saturday, 7 Sunday).",
    )
    holidays = HolidaySerializer(many=True, default=list, max_length=MAX_HOLIDAYS)
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)
