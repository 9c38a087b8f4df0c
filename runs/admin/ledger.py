"""The portal's occurrence ledger of one job: "why didn't my job run at 02:30?" (runs/ledger.py).

Linked from the job page. A window is chosen with `start` and `end` (the
job's zone unless an offset is given; default: the last 24 hours), a page of
at most 200 occurrences with a link to the next; missing occurrences are red
and say "missing" in words.
"""

import datetime as dt

from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs import cron
from jobs.models import JobDefinition
from runs import ledger
from scheduler_project.admin import scoping
from scheduler_project.admin.display import STATE_SYMBOLS, format_ms
from scheduler_project.admin.site import site

PAGE = 200
SYMBOLS = {
    **STATE_SYMBOLS,
    "ran": "✓",
    "retrying": "↻",
    "running": "⟳",
    "waiting": "▷",
    "not_yet_due": "◷",
    "not_materialized": "◷",
    "earlier_schedule": "↶",
    "before_schedule": "—",
    "ended": "■",
    "missing": "✗",
}


def _instant(text, zone, default):
    """An instant typed in the form: ISO 8601, read in the job's zone when it has no offset."""
    if not text:
        return default, ""
    value = parse_datetime(text.strip())
    if value is None:
        return default, f"'{text}' is not a date and time: write e.g. 2026-06-01 02:30"
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(dt.UTC), ""


@site.register_view("dashboard/jobs/<int:job_id>/ledger/", name="portal_job_ledger")
def ledger_page(request, job_id):
    job = get_object_or_404(
        scoping.scope(JobDefinition.objects.select_related("tenant"), request.user, system=True), pk=job_id
    )
    now = timezone.now()
    zone = cron.get_zone(job.time_zone)
    end, end_error = _instant(request.GET.get("end", ""), zone, now)
    start, start_error = _instant(request.GET.get("start", ""), zone, end - dt.timedelta(days=1))
    errors = [e for e in (start_error, end_error) if e]
    if start >= end:
        errors.append("The window's end must be after its start.")
        start = end - dt.timedelta(days=1)
    page = ledger.ledger(job, start, end, now, limit=PAGE)
    rows = [
        {
            "entry": e,
            "symbol": SYMBOLS.get(e.fate, "•"),
            "lateness": format_ms(e.lateness / dt.timedelta(milliseconds=1)) if e.lateness is not None else "",
            "local": f"{e.local:%a %Y-%m-%d %H:%M %Z}",
        }
        for e in page.entries
    ]
    context = {
        **site.each_context(request),
        "title": f"Ledger: {job.name}",
        "job": job,
        "tenant": job.tenant,
        "page": page,
        "rows": rows,
        "errors": errors,
        "start_text": f"{start.astimezone(zone):%Y-%m-%d %H:%M}",
        "end_text": f"{end.astimezone(zone):%Y-%m-%d %H:%M}",
        "next_text": f"{page.next_start.astimezone(zone):%Y-%m-%dT%H:%M:%S.%f%z}" if page.next_start else "",
        "end_param": f"{end.astimezone(zone):%Y-%m-%dT%H:%M:%S%z}",
        "fates": ledger.FATES,
    }
    return TemplateResponse(request, "portal/ledger.html", context)
