"""Every door's edits of maintenance windows and business-day calendars: validate, save, audit, in one transaction.

The portal's forms, the API (calendars/api) and schedules-as-code call these,
never `save()` or `delete()` on the models directly, so each change is checked
by the models' clean() and leaves one audit entry (with the fields that
changed) whichever door it came through.
"""

from django.db import transaction

from calendars import blackouts
from calendars.models import Calendar, Window
from jobs import audit

# Model field -> its key in the body of every door that takes one (the API, a declared set), in the order shown.
WINDOW_BODY = {
    "job": "job",
    "kind": "kind",
    "starts_at": "starts_at",
    "ends_at": "ends_at",
    "cron_expr": "cron",
    "duration_seconds": "duration_seconds",
    "time_zone": "time_zone",
    "calendar": "calendar",
    "resume_policy": "resume_policy",
    "enabled": "enabled",
    "note": "note",
}
CALENDAR_BODY = {"time_zone": "time_zone", "weekend_days": "weekend_days", "holidays": "holidays"}
# The fields an audit entry of a window records.
WINDOW_FIELDS = (
    "name",
    "job_id",
    "kind",
    "starts_at",
    "ends_at",
    "cron_expr",
    "duration_seconds",
    "time_zone",
    "calendar_id",
    "resume_policy",
    "enabled",
)


def window_snapshot(window):
    """The audited fields of `window` as JSON values."""
    values = {field: getattr(window, field) for field in WINDOW_FIELDS}
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in values.items()}


def calendar_snapshot(calendar):
    return {
        "name": calendar.name,
        "time_zone": calendar.time_zone,
        "weekend_days": calendar.weekend_days,
        "holidays": calendar.holidays,
    }


@transaction.atomic
def save_window(window, *, actor, note="", validate=True):
    """Create or change `window` (raises django ValidationError on bad fields); audited with what changed."""
    if validate:
        window.full_clean()
    stored = Window.objects.select_for_update().filter(pk=window.pk).first() if window.pk else None
    before = window_snapshot(stored) if stored else {}
    window.save()
    detail = audit.changes(before, window_snapshot(window))
    audit.record(actor, "update" if stored else "create", window, tenant=window.tenant, detail=detail, note=note)
    return window


@transaction.atomic
def delete_windows(windows, *, actor, note=""):
    """Delete the windows of `windows` (a queryset); one audit entry each with what it was. Returns how many."""
    # Locked through a plain query by id: the caller's queryset may join nullable relations (the portal's list
    # selects job and calendar), which PostgreSQL cannot lock FOR UPDATE.
    gone = list(Window.objects.select_for_update().filter(pk__in=windows.values("pk")).select_related("tenant"))
    for window in gone:
        audit.record(actor, "delete", window, tenant=window.tenant, detail=window_snapshot(window), note=note)
    Window.objects.filter(pk__in=[w.pk for w in gone]).delete()
    return len(gone)


@transaction.atomic
def save_calendar(calendar, *, actor, note="", validate=True):
    """Create or change `calendar` (holidays made distinct and sorted); audited with what changed."""
    calendar.holidays = distinct(calendar.holidays or [])
    if validate:
        calendar.full_clean()
    stored = Calendar.objects.select_for_update().filter(pk=calendar.pk).first() if calendar.pk else None
    before = calendar_snapshot(stored) if stored else {}
    calendar.save()
    detail = audit.changes(before, calendar_snapshot(calendar))
    if "holidays" in detail:  # a long list: say what moved, not the whole list twice
        detail["holidays"] = {k: len(v) if isinstance(v, list) else v for k, v in detail["holidays"].items()}
    audit.record(actor, "update" if stored else "create", calendar, tenant=calendar.tenant, detail=detail, note=note)
    return calendar


@transaction.atomic
def delete_calendars(calendars, *, actor, note=""):
    """Delete the calendars of `calendars` (a queryset) and the windows that use them; audited. Returns how many."""
    gone = list(Calendar.objects.select_for_update().filter(pk__in=calendars.values("pk")).select_related("tenant"))
    for calendar in gone:
        delete_windows(
            Window.objects.filter(calendar=calendar), actor=actor, note=f"its calendar {calendar} was deleted"
        )
        audit.record(actor, "delete", calendar, tenant=calendar.tenant, note=note)
    Calendar.objects.filter(pk__in=[c.pk for c in gone]).delete()
    return len(gone)


def distinct(holidays):
    """The holidays sorted by start, each (start, end, name) once."""
    seen, kept = set(), []
    for h in sorted(holidays, key=lambda h: (str(h.get("start")), str(h.get("name")))):
        key = (h.get("start"), h.get("end"), h.get("name"))
        if key not in seen:
            seen.add(key)
            kept.append(h)
    return kept


def valid_holidays(holidays):
    """The holidays of `holidays` that calendars.blackouts can read (the rest are a form's or a problem's errors)."""
    return [h for h in holidays if not blackouts.holiday_problem(h)]
