"""Portal views about schedules: the live preview on the job form (cron and every, with their bounds), and the heatmap.

Both are pages of the portal site (registered below with `site.register_view`),
so they need a portal login; the heatmap shows one of the user's tenants only.
Both show maintenance windows (calendars/, docs/windows.md): the preview says
which upcoming runs a window skips or holds, the heatmap counts starts where
the windows put them and shades the minutes inside the tenant's windows.
"""

import datetime as dt

from django import forms
from django.core.exceptions import ValidationError
from django.http import JsonResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe

from calendars import blackouts
from calendars.models import Window
from jobs import cron, occurrences
from jobs.heatmap import MINUTES, advice, heatmap
from jobs.models import JobDefinition
from scheduler_project.admin import scoping
from scheduler_project.admin.site import site

MAX_PREVIEW = 20
SCHEDULED = ("cron", "every", "at")  # the kinds the heatmap counts (`none`: on demand only)


def preview_data(expr, zone, now, count=8, windows=()):
    """The next `count` runs of `expr` in `zone` with DST notes and what `windows` do to them, or the error."""
    return schedule_data(occurrences.Schedule("cron", time_zone=zone, cron_expr=expr), now, count, windows)


def schedule_data(schedule, now, count=8, windows=()):
    """The next `count` runs of a jobs.occurrences.Schedule (any kind, bounds included) with DST notes and
    what `windows` do to them, or the error naming the field to fix."""
    try:
        zone_info = cron.get_zone(schedule.time_zone)
    except cron.ZoneError as exc:
        return {"ok": False, "field": "time_zone", "error": str(exc)}
    if schedule.kind == "every":
        most = occurrences.MAX_EVERY_SECONDS
        if not 1 <= (schedule.every_seconds or 0) <= most:
            error = f"Enter the period in whole seconds, from 1 to {most}, e.g. 90 or 5400 (90 minutes)."
            return {"ok": False, "field": "every_seconds", "error": error}
    else:
        try:
            cron.validate(schedule.cron_expr)
        except cron.CronError as exc:
            return {"ok": False, "field": "cron_expr", "error": str(exc)}
    if schedule.start_at and schedule.end_at and schedule.end_at <= schedule.start_at:
        return {"ok": False, "field": "end_at", "error": "The end must be after the start: no run would remain."}
    shown = occurrences.preview(schedule, now, count)
    clock = "%H:%M:%S" if schedule.kind == "every" else "%H:%M"  # a period may be seconds
    return {
        "ok": True,
        "description": occurrences.describe(schedule),
        "zone": zone_info.key,
        "wildcard": schedule.kind == "cron" and cron.is_wildcard(schedule.cron_expr),
        "occurrences": [
            {
                "utc": o.at_utc.isoformat(),
                "utc_text": f"{o.at_utc:%a %Y-%m-%d {clock}} UTC",
                "local_text": f"{o.local:%a %Y-%m-%d {clock} %Z}",
                "note": o.note,
                "window": blackouts.note_at(windows, o.at_utc),
            }
            for o in shown
        ],
    }


def _preview_windows(request):
    """The windows that would hold the job being edited (?job=) or a new job of ?tenant= (its tenant-wide ones)."""
    job_id, tenant_id = request.GET.get("job", ""), request.GET.get("tenant", "")
    if job_id.isdigit():
        job = scoping.scope(JobDefinition.objects.all(), request.user).filter(pk=int(job_id)).first()
        return Window.objects.by_job([job])[job.pk] if job else []
    if tenant_id.isdigit() and scoping.can_see_tenant(request.user, int(tenant_id)):
        return list(
            Window.objects.filter(tenant_id=int(tenant_id), job__isnull=True, enabled=True).select_related("calendar")
        )
    return []


@site.register_view("schedule-preview/", name="portal_schedule_preview")
def preview(request):
    """GET ?schedule_kind=&cron_expr=&every_seconds=&time_zone=&start_at_0=&start_at_1=&end_at_0=&end_at_1=&count=
    -> JSON (the job form's preview, as the operator types; the bounds as the form's date and time boxes)."""
    kind = request.GET.get("schedule_kind", "cron")
    expr = request.GET.get("cron_expr", "").strip()
    zone = request.GET.get("time_zone", "").strip() or "UTC"
    try:
        count = max(1, min(MAX_PREVIEW, int(request.GET.get("count", "8"))))
    except ValueError:
        count = 8
    bounds = {}
    for field in ("start_at", "end_at"):
        try:
            bounds[field] = _instant(request, field)
        except ValidationError:
            return JsonResponse({"ok": False, "field": field, "error": "Enter a date and a time, or neither."})
    if kind == "every":
        period = request.GET.get("every_seconds", "").strip()
        seconds = int(period) if period.isascii() and period.isdigit() else None
        schedule = occurrences.Schedule("every", time_zone=zone, every_seconds=seconds, **bounds)
        return JsonResponse(schedule_data(schedule, timezone.now(), count, _preview_windows(request)))
    if kind != "cron":
        return JsonResponse({"ok": False, "field": "schedule_kind", "error": "Only cron and every schedules repeat."})
    if not expr:
        return JsonResponse(
            {"ok": False, "field": "cron_expr", "error": "Enter a cron expression, e.g. 0 2 * * * for 02:00 every day."}
        )
    schedule = occurrences.Schedule("cron", time_zone=zone, cron_expr=expr, **bounds)
    return JsonResponse(schedule_data(schedule, timezone.now(), count, _preview_windows(request)))


def _instant(request, field):
    """A bound from the form's date and time boxes (`field`_0, `field`_1), in the portal's zone; None when empty."""
    parts = [request.GET.get(f"{field}_{i}", "").strip() for i in (0, 1)]
    return forms.SplitDateTimeField(required=False).clean(parts)


@site.register_view("dashboard/heatmap/", name="portal_heatmap")
def heatmap_page(request):
    tenant = _tenant(request)
    now = timezone.now()
    jobs = []
    if tenant is not None:
        jobs = list(
            JobDefinition.objects.filter(tenant=tenant, status="active", schedule_kind__in=SCHEDULED).select_related(
                "tenant"
            )[:5000]
        )
    windows = Window.objects.by_job(jobs) if jobs else {}
    hm = heatmap(jobs, now, held=_Held(windows))
    blocked = _blocked(tenant, hm.start)
    top = max(hm.counts) if jobs else 0
    rows = []
    for hour, counts in enumerate(hm.grid()):
        at = hm.start + dt.timedelta(hours=hour)
        # 1,440 cells: joined here, as the template engine would take a tenth of a second.
        cells = "".join(_cell(n, top, blocked.get(hour * 60 + m)) for m, n in enumerate(counts))
        rows.append({"label": f"{at:%H}:00", "cells": mark_safe(cells)})
    context = {
        **site.each_context(request),
        "title": "Scheduled starts per minute",
        "tenant": tenant,
        "tenants": scoping.tenants(request.user),
        "rows": rows,
        "minutes": list(range(60)),
        "by_minute": hm.by_minute_of_hour(),
        "advice": advice(hm),
        "start": hm.start,
        "job_count": len(jobs),
        "tenant_windows": sorted(set(blocked.values())),
    }
    return TemplateResponse(request, "portal/heatmap.html", context)


class _Held:
    """heatmap's `held`: a job's starts where its windows put them (jitter is added by the heatmap)."""

    def __init__(self, windows):
        self.windows = windows
        self.jobs = {pk for pk, found in windows.items() if found}

    def __call__(self, job, instants):
        walk = blackouts.Walk.of(job)
        held = blackouts.hold(instants, walk, self.windows[job.pk], 1000)
        return sorted([*held.free, *(available for available, _ in held.held.values())])


def _blocked(tenant, start):
    """{minute index: window name} of the 24 hours from `start` inside the tenant's tenant-wide windows."""
    if tenant is None:
        return {}
    end = start + dt.timedelta(minutes=MINUTES)
    found = {}
    for window in Window.objects.filter(tenant=tenant, job__isnull=True, enabled=True).select_related("calendar"):
        for b in blackouts.intervals(window, start, end):
            first = max(0, int((b.start - start) / dt.timedelta(minutes=1)))
            last = min(MINUTES, -int(-(b.end - start) / dt.timedelta(minutes=1)))
            for minute in range(first, last):
                found.setdefault(minute, b.name)
    return found


def _cell(n, top, window):
    if window is None:
        return f'<td class="heat-{_level(n, top)}">{n or ""}</td>'
    return f'<td class="heat-{_level(n, top)} heat-window" title="{escape(window)}">{n or ""}</td>'


def _level(n, top):
    """0-4: how hot a cell is (also printed as a number, so colour is never the only cue)."""
    if not n or not top:
        return 0
    return 1 + min(3, int(3 * n / top))


def _tenant(request):
    name = request.GET.get("tenant")
    if name:
        return scoping.tenant_or_404(request.user, name)
    return scoping.default_tenant(request.user)
