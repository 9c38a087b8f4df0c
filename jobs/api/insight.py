"""What a job will do and how it has done, over HTTP (team tokens, any role).

`GET /v1/jobs/{name}/preview`: the next occurrences in UTC and in the job's
zone, with the DST notes and what maintenance windows do to each, as the
portal's job form shows them. `GET /v1/jobs/{name}/stats` and
`GET /v1/tenant/stats`: lateness percentiles (start minus due of first
attempts) over the last hour, day or week, read from the rollups as the
portal's pages read them (runs.rollups).
"""

import datetime as dt

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from calendars import blackouts
from calendars.models import Window
from jobs import cron, occurrences
from runs import rollups
from scheduler_project.api.endpoints import TeamEndpoint
from scheduler_project.api.lookups import NAME, job_or_404
from scheduler_project.api.problems import invalid, problem_responses

MAX_PREVIEW = 100
WINDOWS = {"1h": dt.timedelta(hours=1), "24h": dt.timedelta(days=1), "7d": dt.timedelta(days=7)}


class OccurrenceSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When it is due, UTC.")
    local = serializers.CharField(help_text="The same instant on the job's zone's clock, with its abbreviation.")
    note = serializers.CharField(help_text="A DST note when the zone's rules moved this occurrence; else empty.")
    window = serializers.CharField(help_text="What a maintenance window does to it (skip, hold until ...); else empty.")


class PreviewSerializer(serializers.Serializer):
    description = serializers.CharField(help_text="The schedule in words.")
    time_zone = serializers.CharField()
    occurrences = OccurrenceSerializer(many=True)


class LatenessSerializer(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True, help_text="Milliseconds; null when nothing started.")
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)
    count = serializers.IntegerField(help_text="First attempts counted.")


class StatsSerializer(serializers.Serializer):
    window = serializers.ChoiceField(list(WINDOWS))
    since = serializers.DateTimeField()
    lateness_ms = LatenessSerializer()


def count_param(request):
    raw = request.query_params.get("count", "10")
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_PREVIEW):
        raise invalid([{"field": "count", "pointer": "#", "detail": f"must be a whole number from 1 to {MAX_PREVIEW}"}])
    return int(raw)


def window_param(request):
    wanted = request.query_params.get("window", "24h")
    if wanted not in WINDOWS:
        raise invalid([{"field": "window", "pointer": "#", "detail": "must be 1h, 24h or 7d"}])
    return wanted


def stats(window, summary, now):
    return {"window": window, "since": now - WINDOWS[window], "lateness_ms": summary}


WINDOW_PARAMETER = OpenApiParameter("window", str, enum=list(WINDOWS), description="Default: 24h.")


class JobPreviewView(TeamEndpoint):
    @extend_schema(
        operation_id="jobs_preview",
        summary="The job's next occurrences, with DST notes and maintenance windows",
        parameters=[
            NAME,
            OpenApiParameter(
                "count", {"type": "integer", "minimum": 1, "maximum": MAX_PREVIEW}, description="Default 10."
            ),
        ],
        responses={200: PreviewSerializer, **problem_responses(400, 404)},
    )
    def get(self, request, name):
        job = job_or_404(request, name)
        count = count_param(request)
        schedule = occurrences.Schedule.of(job)
        windows = Window.objects.by_job([job])[job.pk]
        shown = occurrences.preview(schedule, timezone.now(), count)
        body = {
            "description": occurrences.describe(schedule),
            "time_zone": cron.get_zone(job.time_zone).key,
            "occurrences": [
                {
                    "at": o.at_utc,
                    "local": f"{o.local:%Y-%m-%d %H:%M %Z}",
                    "note": o.note,
                    "window": blackouts.note_at(windows, o.at_utc),
                }
                for o in shown
            ],
        }
        return Response(PreviewSerializer(body).data)


class JobStatsView(TeamEndpoint):
    @extend_schema(
        operation_id="jobs_stats",
        summary="The job's lateness percentiles over the last hour, day or week",
        parameters=[NAME, WINDOW_PARAMETER],
        responses={200: StatsSerializer, **problem_responses(400, 404)},
    )
    def get(self, request, name):
        job = job_or_404(request, name)
        window, now = window_param(request), timezone.now()
        return Response(StatsSerializer(stats(window, rollups.job_lateness(job, now, WINDOWS[window]), now)).data)


class TenantStatsView(TeamEndpoint):
    @extend_schema(
        operation_id="tenant_stats",
        summary="The tenant's lateness percentiles over the last hour, day or week",
        parameters=[WINDOW_PARAMETER],
        responses={200: StatsSerializer, **problem_responses(400)},
    )
    def get(self, request):
        window, now = window_param(request), timezone.now()
        summary = rollups.tenant_lateness(request.auth.tenant_id, now, WINDOWS[window])
        return Response(StatsSerializer(stats(window, summary, now)).data)
