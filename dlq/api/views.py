"""The dead-letter queue over HTTP (team tokens): list, replay, discard.

Replay sends the run back to `scheduled` with the same idempotency key and a
fresh attempt budget; discard closes the letter. Both go through runs.controls
(the portal's actions call the same functions), both are audited, and both answer 409 `invalid-state` for a closed letter.
"""

import re

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from dlq.api.serializers import (
    BULK_LIMIT,
    BulkResolveSerializer,
    BulkResultSerializer,
    DeadLetterSerializer,
    ResolveSerializer,
)
from dlq.models import DeadLetter
from jobs import roles
from jobs.validation import NAME_RE
from runs import controls
from scheduler_project.api.endpoints import PAGE_PARAMETERS, CursorPage, TeamEndpoint, page_of
from scheduler_project.api.lookups import get_scoped, scoped
from scheduler_project.api.problems import Problem, invalid, problem_responses, validated

LETTER_ID = OpenApiParameter("letter_id", int, OpenApiParameter.PATH, description="The dead letter's id.")
STATUS_FILTERS = {
    "open": {"replayed_at__isnull": True, "discarded_at__isnull": True},
    "replayed": {"replayed_at__isnull": False},
    "discarded": {"discarded_at__isnull": False},
    "all": {},
}


def letter_or_404(request, letter_id):
    return get_scoped(request, DeadLetter.objects.select_related("job", "tenant"), "dead letter", pk=int(letter_id))


class DeadLetterListView(TeamEndpoint):
    @extend_schema(
        operation_id="dlq_list",
        summary="The tenant's dead letters, newest first",
        parameters=[
            OpenApiParameter("status", str, enum=list(STATUS_FILTERS), description="Default: open."),
            OpenApiParameter(
                "job", {"type": "string", "pattern": NAME_RE}, description="Only this job's dead letters."
            ),
            *PAGE_PARAMETERS,
        ],
        responses={200: page_of(DeadLetterSerializer, "DeadLetterPage"), **problem_responses(400, 404)},
    )
    def get(self, request):
        wanted = request.query_params.get("status", "open")
        if wanted not in STATUS_FILTERS:
            raise invalid([{"field": "status", "pointer": "#", "detail": "must be open, replayed, discarded or all"}])
        letters = scoped(request, DeadLetter.objects.select_related("job", "tenant")).filter(**STATUS_FILTERS[wanted])
        if "job" in request.query_params:
            name = request.query_params["job"]
            if not re.fullmatch(NAME_RE, name):
                raise invalid([{"field": "job", "pointer": "#", "detail": "is not a job name"}])
            letters = letters.filter(job__name=name)
        page = CursorPage()
        rows = page.paginate_queryset(letters, request, view=self)
        return page.get_paginated_response(DeadLetterSerializer(rows, many=True).data)


class _Resolve(TeamEndpoint):
    move_name = None  # "replay" or "discard"
    method_roles = {"POST": roles.OPERATE}

    def post(self, request, letter_id):
        letter = letter_or_404(request, letter_id)
        values = validated(ResolveSerializer, request.data)
        move = controls.replay if self.move_name == "replay" else controls.discard
        if not move(letter, actor=self.actor, note=values["note"]):
            letter.refresh_from_db()
            status = DeadLetterSerializer(letter).data["status"]
            raise Problem("invalid-state", f"Dead letter {letter.pk} is already {status}.")
        letter.refresh_from_db()
        return Response(DeadLetterSerializer(letter).data)


class DeadLetterReplayView(_Resolve):
    move_name = "replay"

    @extend_schema(
        operation_id="dlq_replay",
        summary="Run a dead run again (same idempotency key, fresh attempts)",
        parameters=[LETTER_ID],
        request=ResolveSerializer,
        responses={200: DeadLetterSerializer, **problem_responses(400, 404, 409, 415)},
    )
    def post(self, request, letter_id):
        return super().post(request, letter_id)


class DeadLetterDiscardView(_Resolve):
    move_name = "discard"

    @extend_schema(
        operation_id="dlq_discard",
        summary="Close a dead letter without running it again",
        parameters=[LETTER_ID],
        request=ResolveSerializer,
        responses={200: DeadLetterSerializer, **problem_responses(400, 404, 409, 415)},
    )
    def post(self, request, letter_id):
        return super().post(request, letter_id)


class _BulkResolve(TeamEndpoint):
    """Replay or discard many open letters at once, by ids or by filter; `dry_run` says what would change.

    The same runs.controls functions as the portal's bulk actions, in one transaction per call.
    """

    move_name = None  # "replay" or "discard"
    method_roles = {"POST": roles.OPERATE}

    def post(self, request):
        values = validated(BulkResolveSerializer, request.data)
        letters = scoped(request, DeadLetter.objects.all()).filter(**STATUS_FILTERS["open"])
        if "ids" in values:
            letters = letters.filter(pk__in=values["ids"])
        if "job" in values:
            if not re.fullmatch(NAME_RE, values["job"]):
                raise invalid([{"field": "job", "pointer": "/job", "detail": "is not a job name"}])
            letters = letters.filter(job__name=values["job"])
        if "dead_after" in values:
            letters = letters.filter(dead_at__gte=values["dead_after"])
        if "dead_before" in values:
            letters = letters.filter(dead_at__lt=values["dead_before"])
        selected = list(letters.order_by("pk").values_list("pk", flat=True)[: BULK_LIMIT + 1])
        more, selected = len(selected) > BULK_LIMIT, selected[:BULK_LIMIT]
        changed = []
        if selected and not values["dry_run"]:
            move = controls.replay_many if self.move_name == "replay" else controls.discard_many
            chosen = DeadLetter.objects.filter(pk__in=selected)
            changed = sorted(letter.pk for letter in move(chosen, actor=self.actor, note=values["note"]))
        body = {
            "dry_run": values["dry_run"],
            "matched": len(selected),
            "changed": len(changed),
            "letters": selected if values["dry_run"] else changed,
            "more": more,
        }
        return Response(BulkResultSerializer(body).data)


class DeadLetterBulkReplayView(_BulkResolve):
    move_name = "replay"

    @extend_schema(
        operation_id="dlq_replay_many",
        summary="Replay many open dead letters (by ids or by filter); dry_run answers what would change",
        request=BulkResolveSerializer,
        responses={200: BulkResultSerializer, **problem_responses(400, 415)},
    )
    def post(self, request):
        return super().post(request)


class DeadLetterBulkDiscardView(_BulkResolve):
    move_name = "discard"

    @extend_schema(
        operation_id="dlq_discard_many",
        summary="Discard many open dead letters (by ids or by filter); dry_run answers what would change",
        request=BulkResolveSerializer,
        responses={200: BulkResultSerializer, **problem_responses(400, 415)},
    )
    def post(self, request):
        return super().post(request)
