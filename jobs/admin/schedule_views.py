"""Portal views about schedules: the live preview on the job form, and the heatmap.

Both are pages of the portal site (registered below with `site.register_view`),
so they need a portal login; the heatmap shows one of the user's tenants only.
"""

import datetime as dt

from django.http import JsonResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.safestring import mark_safe

from jobs import cron
from jobs.heatmap import advice, heatmap
from jobs.models import JobDefinition
from scheduler_project.admin import scoping
from scheduler_project.admin.site import site

MAX_PREVIEW = 20


def preview_data(expr, zone, now, count=8):
    """The next `count` runs of `expr` in `zone` with DST notes, or the error saying how to fix it."""
    try:
        zone_info = cron.get_zone(zone)
    except cron.ZoneError as exc:
        return {"ok": False, "field": "time_zone", "error": str(exc)}
    try:
        cron.validate(expr)
        occurrences = cron.preview(expr, zone, now, count)
        words = cron.describe(expr, zone)
    except cron.CronError as exc:
        return {"ok": False, "field": "cron_expr", "error": str(exc)}
    return {
        "ok": True,
        "description": words,
        "zone": zone_info.key,
        "wildcard": cron.is_wildcard(expr),
        "occurrences": [
            {
                "utc": o.at_utc.isoformat(),
                "utc_text": f"{o.at_utc:%a %Y-%m-%d %H:%M} UTC",
                "local_text": f"{o.local:%a %Y-%m-%d %H:%M %Z}",
                "note": o.note,
            }
            for o in occurrences
        ],
    }


@site.register_view("schedule-preview/", name="portal_schedule_preview")
def preview(request):
    """GET ?cron_expr=&time_zone=&count= -> JSON (the job form's preview, as the operator types)."""
    expr = request.GET.get("cron_expr", "").strip()
    zone = request.GET.get("time_zone", "").strip() or "UTC"
    try:
        count = max(1, min(MAX_PREVIEW, int(request.GET.get("count", "8"))))
    except ValueError:
        count = 8
    if not expr:
        return JsonResponse(
            {"ok": False, "field": "cron_expr", "error": "Enter a cron expression, e.g. 0 2 * * * for 02:00 every day."}
        )
    return JsonResponse(preview_data(expr, zone, timezone.now(), count))


@site.register_view("dashboard/heatmap/", name="portal_heatmap")
def heatmap_page(request):
    tenant = _tenant(request)
    now = timezone.now()
    jobs = []
    if tenant is not None:
        jobs = list(
            JobDefinition.objects.filter(tenant=tenant, status="active", schedule_kind="cron").select_related("tenant")[
                :5000
            ]
        )
    hm = heatmap(jobs, now)
    top = max(hm.counts) if jobs else 0
    rows = []
    for hour, counts in enumerate(hm.grid()):
        at = hm.start + dt.timedelta(hours=hour)
        # 1,440 cells: joined here, as the template engine would take a tenth of a second.
        cells = "".join(f'<td class="heat-{_level(n, top)}">{n or ""}</td>' for n in counts)
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
    }
    return TemplateResponse(request, "portal/heatmap.html", context)


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
