"""GET /v1/jobs/{name}/ledger: every occurrence a job's schedule implied in a window, with its fate.

The rules are runs/ledger.py's; this view reads the window from the query
(`start`, `end`: ISO 8601 instants with an offset, `Z` or `%2B02:00`;
`limit` 1-500), answers one page in time order, and a `next` URL for the
rest of the window while there is more.
"""

import datetime as dt

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from runs import ledger
from scheduler_project.api.endpoints import TeamEndpoint
from scheduler_project.api.fields import AwareDateTimeField
from scheduler_project.api.lookups import NAME, job_or_404
from scheduler_project.api.problems import invalid, problem_responses, validated

DEFAULT_SPAN = dt.timedelta(days=1)


class LedgerQuerySerializer(serializers.Serializer):
    start = AwareDateTimeField(required=False, help_text="Window start, inclusive; default: a day before end.")
    end = AwareDateTimeField(required=False, help_text="Window end, exclusive; default: now.")
    limit = serializers.IntegerField(min_value=1, max_value=ledger.MAX_LIMIT, default=100)


class LedgerEntrySerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="The occurrence, UTC.")
    local = serializers.CharField(help_text="The occurrence in the job's zone, with its offset.")
    fate = serializers.ChoiceField(choices=list(ledger.FATES), help_text="See docs/ledger.md.")
    detail = serializers.CharField(help_text="The reason, error or note that goes with the fate.")
    run = serializers.IntegerField(
        allow_null=True, source="run_id", help_text="The run (or skipped row) that records it."
    )
    attempts = serializers.IntegerField()
    lateness_seconds = serializers.FloatField(allow_null=True, help_text="First attempt's start minus available.")
    outcome = serializers.CharField(help_text="The last attempt's outcome, if any.")
    cancelled_by = serializers.CharField(help_text="Who cancelled it (audit actor), if it was cancelled.")
    windows = serializers.ListField(child=serializers.CharField(), help_text="Today's maintenance windows covering it.")
    backfilled = serializers.IntegerField(help_text="Backfill runs of this occurrence.")


class LedgerSerializer(serializers.Serializer):
    job = serializers.CharField()
    time_zone = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    missing = serializers.IntegerField(help_text="Occurrences of this page with no record at all.")
    assumptions = serializers.ListField(child=serializers.CharField())
    next = serializers.URLField(allow_null=True, help_text="The rest of the window, or null.")
    results = LedgerEntrySerializer(many=True)


def entry_data(entry):
    return {
        "at": entry.at,
        "local": entry.local.isoformat(),
        "fate": entry.fate,
        "detail": entry.detail,
        "run_id": entry.run_id,
        "attempts": entry.attempts,
        "lateness_seconds": entry.lateness.total_seconds() if entry.lateness is not None else None,
        "outcome": entry.outcome,
        "cancelled_by": entry.cancelled_by,
        "windows": list(entry.windows),
        "backfilled": entry.backfilled,
    }


class JobLedgerView(TeamEndpoint):
    @extend_schema(
        operation_id="jobs_ledger",
        summary="Every occurrence the job's schedule implied in a window, and what became of it",
        parameters=[
            NAME,
            OpenApiParameter("start", str, description="ISO 8601 with an offset; default: a day before end."),
            OpenApiParameter("end", str, description="ISO 8601 with an offset, exclusive; default: now."),
            OpenApiParameter("limit", int, description=f"Occurrences per page, 1-{ledger.MAX_LIMIT} (default 100)."),
        ],
        responses={200: LedgerSerializer, **problem_responses(400, 404)},
    )
    def get(self, request, name):
        job = job_or_404(request, name)
        values = validated(LedgerQuerySerializer, request.query_params)
        now = timezone.now()
        end = values.get("end") or now
        start = values.get("start") or end - DEFAULT_SPAN
        if start >= end:
            raise invalid([{"field": "end", "pointer": "#", "detail": "must be after start"}])
        page = ledger.ledger(job, start, end, now, limit=values["limit"])
        following = None
        if page.next_start is not None:
            query = request.query_params.copy()
            query["start"], query["end"] = page.next_start.isoformat(), end.isoformat()
            following = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
        body = {
            "job": job.name,
            "time_zone": job.time_zone,
            "start": start,
            "end": end,
            "missing": page.missing,
            "assumptions": page.assumptions,
            "next": following,
            "results": [entry_data(e) for e in page.entries],
        }
        return Response(LedgerSerializer(body).data)
