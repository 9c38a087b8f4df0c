"""The body of a calendar's iCalendar import; the window and calendar bodies are scheduler_project/api/windows.py's
(the declared set of PUT /v1/schedules takes them too)."""

from rest_framework import serializers

from scheduler_project.api.fields import Boolean, Text


class ImportSerializer(serializers.Serializer):
    ical = Text(max_length=1_000_000, help_text="An iCalendar file's text (VEVENTs: all-day, timed, recurring).")
    replace = Boolean(default=False, help_text="Replace the calendar's holidays instead of adding to them.")
    note = Text(max_length=2000, required=False, allow_blank=True, default="")
