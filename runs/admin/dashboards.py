"""The portal's dashboards: custom admin views in the admin's look.

- overview: runs by state, ready backlog and oldest ready age per queue, lease
  expiries, dead letters per job and their growth, lateness at a glance;
- lateness: p50/p95/p99 of start − due over the last hour and the last day;
- job page: next occurrences, run history, why the last run failed.

Each page shows one tenant, chosen among the user's tenants through
scheduler_project.admin.scoping (another tenant's name or job is a 404), and
refreshes itself live (runs/admin/live.py) without a reload. The pages register
themselves on the portal site (`site.register_view`) when the admin
autodiscovery imports runs.admin.
"""

import datetime as dt
import json

from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from jobs import cron, occurrences, roles, schedules
from jobs.models import JobDefinition
from runs import canary, presence, rollups
from runs.admin.charts import bar_chart, line_chart
from runs.admin.stats import (
    DAY,
    HOUR,
    backlog_by_queue,
    dead_letters_by_job,
    dead_letters_per_hour,
    job_days,
    job_history,
    last_failure,
    lateness_series,
    lease_expiries,
    outcomes,
    state_counts,
    tenants_at_a_glance,
)
from runs.models import TERMINAL_STATES
from scheduler_project.admin import permissions, scoping
from scheduler_project.admin.display import derived_state, format_ms, schedule_words, zoned
from scheduler_project.admin.site import site


def _tenant(request):
    name = request.GET.get("tenant")
    if name:
        return scoping.tenant_or_404(request.user, name)
    tenant = scoping.default_tenant(request.user)
    if tenant is None:
        raise Http404("You belong to no tenant yet: ask an administrator to add you to one.")
    return tenant


def _context(request, title, tenant, **extra):
    return {
        **site.each_context(request),
        "title": title,
        "tenant": tenant,
        "tenants": scoping.tenants(request.user),
        "now": timezone.now(),
        **extra,
    }


def _age(delta):
    if delta is None:
        return "—"
    return format_ms(delta / dt.timedelta(milliseconds=1))


@site.register_view("dashboard/", name="portal_overview")
def overview(request):
    if "tenant" not in request.GET and scoping.tenants(request.user)[:2].count() > 1:
        # Someone who sees several tenants opens on all of them, worst first.
        return HttpResponseRedirect(reverse("admin:portal_tenants"))
    tenant = _tenant(request)
    now = timezone.now()
    counts = state_counts(tenant, now)
    backlog = backlog_by_queue(tenant, now)
    for row in backlog:
        row["oldest_age_text"] = _age(row["oldest_age"])
    hour = lateness_series(tenant, now, HOUR, dt.timedelta(minutes=1))["overall"]
    day_growth = dead_letters_per_hour(tenant, now)
    context = _context(
        request,
        f"Overview: {tenant.name}",
        tenant,
        live=[(state, n, capped) for state, (n, capped) in counts["live"].items()],
        finished=[(state, n) for state, (n, _) in counts["finished"].items()],
        backlog=backlog,
        expiries=lease_expiries(tenant, now),
        dead=dead_letters_by_job(tenant, now),
        lateness_hour={k: format_ms(hour.get(k)) for k in ("p50", "p95", "p99")},
        engine_alerts=canary.status(now).messages(),
        lateness_hour_count=hour["count"],
        outcomes_hour=outcomes(tenant, now, HOUR),
        dead_growth_total=sum(p["count"] for p in day_growth),
        dlq_chart=bar_chart(
            day_growth,
            title=f"New dead letters per hour, last 24 hours, {tenant.name}",
            description="One bar per hour; the number above each bar is the count.",
            label_time=lambda at: f"{at:%H}:00",
            chart_id="dlq-growth",
        ),
    )
    return TemplateResponse(request, "portal/overview.html", context)


@site.register_view("dashboard/tenants/", name="portal_tenants")
def all_tenants(request):
    now = timezone.now()
    rows = tenants_at_a_glance(scoping.tenant_ids(request.user), now)
    for row in rows:
        row["oldest_age_text"] = _age(row["oldest_age"])
        row["p99_text"] = format_ms(row.get("p99"))
    context = {
        **site.each_context(request),
        "title": "All tenants",
        "rows": rows,
        "now": now,
        "tenant_count": scoping.tenants(request.user).count(),
        "engine_alerts": canary.status(now).messages(),
    }
    return TemplateResponse(request, "portal/tenants.html", context)


@site.register_view("dashboard/lateness/", name="portal_lateness")
def lateness_page(request):
    tenant = _tenant(request)
    now = timezone.now()
    hour = lateness_series(tenant, now, HOUR, dt.timedelta(minutes=1))
    day = lateness_series(tenant, now, DAY, dt.timedelta(minutes=15))
    panels = []
    for key, label, series, fmt in (
        ("hour", "last hour, per minute", hour, "%H:%M"),
        ("day", "last 24 hours, per 15 minutes", day, "%H:%M"),
    ):
        panels.append(
            {
                "key": key,
                "label": label,
                "overall": {k: format_ms(series["overall"].get(k)) for k in ("p50", "p95", "p99")},
                "count": series["overall"]["count"],
                "chart": line_chart(
                    series["points"],
                    title=f"Lateness of first attempts (start − due), {label}, {tenant.name}",
                    description="Three lines: p50 solid with circles, p95 dashed with squares, p99 dotted with triangles. Times in UTC.",
                    format_value=format_ms,
                    label_time=lambda at, fmt=fmt: at.strftime(fmt),
                    chart_id=f"lateness-{key}",
                ),
                "rows": [
                    {
                        "at": p["at"],
                        "count": p["count"],
                        **{k: format_ms(p.get(k)) for k in ("p50", "p95", "p99")},
                    }
                    for p in series["points"]
                    if p["count"]
                ][-60:],
            }
        )
    return TemplateResponse(
        request, "portal/lateness.html", _context(request, f"Lateness: {tenant.name}", tenant, panels=panels)
    )


@site.register_view("dashboard/jobs/<int:job_id>/", name="portal_job")
def job_page(request, job_id):
    job = get_object_or_404(
        scoping.scope(JobDefinition.objects.select_related("tenant"), request.user, system=True), pk=job_id
    )
    now = timezone.now()
    upcoming = []
    if job.schedule_kind != JobDefinition.ScheduleKind.NONE and job.remaining_runs != 0:
        shown = occurrences.preview(occurrences.Schedule.of(job), now, min(10, job.remaining_runs or 10))
        clock = "%H:%M:%S" if job.schedule_kind == JobDefinition.ScheduleKind.EVERY else "%H:%M"  # periods in seconds
        upcoming = [
            {"local": f"{o.local:%a %Y-%m-%d {clock} %Z}", "utc": f"{o.at_utc:%Y-%m-%d {clock}}", "note": o.note}
            for o in shown
        ]
    lateness_24h = rollups.job_lateness(job, now)
    history = job_history(job)
    for run in history:
        run.shown_state = derived_state(run, now)
        run.local_due = f"{run.due_at.astimezone(cron.get_zone(job.time_zone)):%Y-%m-%d %H:%M:%S %Z}"
    failure = last_failure(job)
    if failure:
        for attempt in failure["attempts"]:
            attempt.lateness_text = format_ms(attempt.lateness / dt.timedelta(milliseconds=1))
    daily = job_days(job, now)
    context = _context(
        request,
        f"Job: {job.name}",
        job.tenant,
        job=job,
        schedule=schedule_words(job),
        next_due=zoned(job.next_due_at, job.time_zone),
        upcoming=upcoming,
        lateness={k: format_ms(lateness_24h.get(k)) for k in ("p50", "p95", "p99")},
        lateness_count=lateness_24h["count"],
        history=history,
        failure=failure,
        last_finished=next((r for r in history if r.state in TERMINAL_STATES), None),
        daily={k: format_ms(daily["overall"].get(k)) for k in ("p50", "p95", "p99")},
        daily_totals=daily["overall"],
        daily_chart=line_chart(
            daily["points"],
            title=f"Lateness of {job.name}'s first attempts per day, last 400 days",
            description="Three lines: p50 solid with circles, p95 dashed with squares, p99 dotted with triangles. "
            "UTC days; kept 400 days, after the runs themselves are dropped.",
            format_value=format_ms,
            label_time=lambda at: at.strftime("%Y-%m-%d"),
            chart_id="job-days",
        ),
        unserved=presence.unserved(job.target_kind, job.queue, now, tenant_id=job.tenant_id),
        soft_timeouts=presence.soft_timeouts(
            job.target_kind, job.queue, job.timeout_seconds, now, tenant_id=job.tenant_id
        ),
        # The buttons a role allows (the actions check again when posted: scheduler_project.admin.permissions).
        role=permissions.role_in(request, job.tenant_id),
        can_operate=permissions.allows(request, job.tenant_id, roles.OPERATE),
        can_own=permissions.allows(request, job.tenant_id, roles.OWN),
        code_drift=[(d.field, json.dumps(d.code), json.dumps(d.portal)) for d in schedules.drift(job)],
    )
    return TemplateResponse(request, "portal/job.html", context)
