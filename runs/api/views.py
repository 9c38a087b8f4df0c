"""Runs over HTTP.

Team tokens: a job's runs (list, enqueue one-off or delayed runs, trigger),
one run with its attempts, cancel. Worker tokens: lease (long-poll; runs
of `external` jobs only, and the token is announced as their consumer),
heartbeat, complete; a stale fencing token raises transitions.StaleLease,
which the problem table answers 409 `stale-lease`. All state changes go
through runs.claims, runs.enqueue and runs.transitions.
"""

import time

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from jobs import roles, tokens
from jobs.audit import actor_for_token
from jobs.idempotency import HEADER, KeyReused
from runs import claims, controls, enqueue, presence, transitions
from runs.api.serializers import (
    CancelSerializer,
    CompleteResultSerializer,
    CompleteSerializer,
    EnqueueSerializer,
    HeartbeatResultSerializer,
    HeartbeatSerializer,
    LeaseRequestSerializer,
    LeaseSerializer,
    LeasesSerializer,
    RunDetailSerializer,
    RunSerializer,
    TriggerSerializer,
)
from runs.models import Run
from scheduler_project.api.endpoints import PAGE_PARAMETERS, CursorPage, TeamEndpoint, WorkerEndpoint, page_of
from scheduler_project.api.idempotent import IDEMPOTENCY_KEY, idempotent, read_key
from scheduler_project.api.lookups import NAME, get_scoped, job_or_404, live_job_or_409
from scheduler_project.api.problems import Problem, problem_responses, validated

# The target kinds the lease endpoint hands out: jobs that external workers run. run_worker executes
# `python` and `http` (runs.targets.EXECUTED_KINDS) and the Celery dispatcher `celery`.
LEASED_KINDS = ("external",)
RUN_ID = OpenApiParameter("run_id", int, OpenApiParameter.PATH, description="The run's id.")


def run_or_404(request, run_id):
    runs = Run.objects.select_related("job", "tenant")
    return get_scoped(request, runs, "run", pk=int(run_id))


def detailed_run(request, run_id):
    runs = Run.objects.select_related("job", "tenant").prefetch_related("attempts")
    return get_scoped(request, runs, "run", pk=int(run_id))


def leased_run_or_404(request, run_id):
    """A worker's run: the token's tenant and one of the token's queues, or not found."""
    run = run_or_404(request, run_id)
    if run.queue not in request.auth.queues:
        raise Problem("not-found", f"No run with id {run_id}.")
    return run


class JobRunsView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="jobs_runs_list",
        summary="A job's runs, newest first",
        parameters=[
            NAME,
            *PAGE_PARAMETERS,
        ],
        responses={200: page_of(RunSerializer, "RunPage"), **problem_responses(400, 404)},
    )
    def get(self, request, name):
        job = job_or_404(request, name)
        page = CursorPage()
        rows = page.paginate_queryset(Run.objects.filter(job=job).select_related("job", "tenant"), request, view=self)
        return page.get_paginated_response(RunSerializer(rows, many=True).data)

    @extend_schema(
        operation_id="jobs_runs_create",
        summary="Enqueue a one-off or delayed run",
        parameters=[NAME, IDEMPOTENCY_KEY],
        request=EnqueueSerializer,
        responses={
            200: RunSerializer,
            201: RunSerializer,
            **problem_responses(400, 404, 409, 413, 415, 422, 429),
        },
    )
    @idempotent
    def post(self, request, name):
        job = live_job_or_409(request, name)
        values = validated(EnqueueSerializer, request.data)
        key = read_key(request)
        run, created = enqueue.enqueue(
            job,
            run_at=values["run_at"],
            delay_seconds=values["delay_seconds"],
            payload=values.get("payload"),
            idempotency_key=key,
            actor=self.actor,
            quota=enqueue.Quota.ENQUEUE,
        )
        if run.job_id != job.pk:
            # The idempotency record expired, but the run with this key belongs to another job.
            raise KeyReused(key, f"{HEADER} {key!r} was used for a run of another job.")
        run.job = job
        return Response(RunSerializer(run).data, status=201 if created else 200)


class JobTriggerView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="jobs_trigger",
        summary="Run a job now, outside its schedule",
        parameters=[NAME, IDEMPOTENCY_KEY],
        request=TriggerSerializer,
        responses={201: RunSerializer, **problem_responses(400, 404, 409, 413, 415, 422, 429)},
    )
    @idempotent
    def post(self, request, name):
        job = live_job_or_409(request, name)
        values = validated(TriggerSerializer, request.data)
        run = controls.trigger(job, actor=self.actor, payload=values.get("payload"), quota=enqueue.Quota.ENQUEUE)
        return Response(RunSerializer(run).data, status=201)


class RunView(TeamEndpoint):
    @extend_schema(
        operation_id="runs_get",
        summary="A run with its attempts",
        parameters=[RUN_ID],
        responses={200: RunDetailSerializer, **problem_responses(404)},
    )
    def get(self, request, run_id):
        return Response(RunDetailSerializer(detailed_run(request, run_id)).data)


class RunCancelView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="runs_cancel",
        summary="Cancel a run that has not finished (a running one loses its lease)",
        parameters=[RUN_ID],
        request=CancelSerializer,
        responses={200: RunDetailSerializer, **problem_responses(400, 404, 409, 415)},
    )
    def post(self, request, run_id):
        run = run_or_404(request, run_id)
        values = validated(CancelSerializer, request.data)
        reason = values["reason"] or f"cancelled by {self.actor}"
        if not controls.cancel_run(run, actor=self.actor, reason=reason):
            run.refresh_from_db()
            raise Problem(
                "invalid-state", f"Run {run.pk} is {run.state}; only a run that has not finished can be cancelled."
            )
        return Response(RunDetailSerializer(detailed_run(request, run_id)).data)


class LeaseView(WorkerEndpoint):
    @extend_schema(
        operation_id="lease",
        summary="Lease due runs of external jobs on the token's queues (long-polls up to wait_seconds)",
        request=LeaseRequestSerializer,
        responses={200: LeasesSerializer, **problem_responses(400, 415)},
    )
    def post(self, request):
        values = validated(LeaseRequestSerializer, request.data)
        queues = tokens.leasable_queues(request.auth, values.get("queues"))
        announce_consumer(request.auth, queues)
        leases = wait_and_claim(
            queues,
            values["max"],
            values["worker_id"] or self.actor,
            lease_seconds=values["lease_seconds"],
            tenant_id=request.auth.tenant_id,
            wait_seconds=values["wait_seconds"],
        )
        return Response({"leases": LeaseSerializer(leases, many=True).data})


_announced = {}  # (token prefix, queue) -> time.monotonic() of this process's last announcement


def announce_consumer(token, queues):
    """Announce the token as a consumer of `external` runs on each of `queues`, at most every ANNOUNCE_SECONDS.

    One row per token and queue, so a token that leases from two queues in
    turns counts for both.
    """
    now = time.monotonic()
    for queue in queues:
        key = (token.prefix, queue)
        if now - _announced.get(key, -presence.ANNOUNCE_SECONDS) >= presence.ANNOUNCE_SECONDS:
            presence.announce(f"{actor_for_token(token)}@{queue}", LEASED_KINDS, [queue], tenant_id=token.tenant_id)
            _announced[key] = now


def wait_and_claim(queues, n, worker_id, *, lease_seconds, tenant_id, wait_seconds):
    """Claim now; if nothing was due, poll until something is or `wait_seconds` pass.

    Between claims only a cheap read asks whether anything looks due, so idle
    waiting workers take no write locks; no transaction is held while waiting.
    """
    poll = max(0.05, min(settings.DUETIME_POLL_SECONDS, 0.1))
    deadline = time.monotonic() + wait_seconds
    while True:
        leases = claims.claim(
            queues, n, worker_id, lease_seconds=lease_seconds, tenant_id=tenant_id, kinds=LEASED_KINDS
        )
        if leases or time.monotonic() >= deadline:
            return leases
        while time.monotonic() < deadline:
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
            if looks_due(queues, tenant_id):
                break


def looks_due(queues, tenant_id):
    """A hint only (the claim decides, on the database clock): is any run of an active job due?"""
    ready = Run.objects.ready(timezone.now())
    return ready.filter(
        tenant_id=tenant_id, queue__in=queues, job__status="active", job__target_kind__in=LEASED_KINDS
    ).exists()


class HeartbeatView(WorkerEndpoint):
    @extend_schema(
        operation_id="runs_heartbeat",
        summary="Extend a lease (fencing token required)",
        parameters=[RUN_ID],
        request=HeartbeatSerializer,
        responses={200: HeartbeatResultSerializer, **problem_responses(400, 404, 409, 415)},
    )
    def post(self, request, run_id):
        run = leased_run_or_404(request, run_id)
        values = validated(HeartbeatSerializer, request.data)
        expires = transitions.heartbeat(run.pk, values["fencing_token"], values["lease_seconds"])
        return Response(HeartbeatResultSerializer({"run_id": run.pk, "lease_expires_at": expires}).data)


class CompleteView(WorkerEndpoint):
    @extend_schema(
        operation_id="runs_complete",
        summary="Finish an attempt: succeeded, or failed (retried while attempts are left)",
        parameters=[RUN_ID],
        request=CompleteSerializer,
        responses={200: CompleteResultSerializer, **problem_responses(400, 404, 409, 415)},
    )
    def post(self, request, run_id):
        run = leased_run_or_404(request, run_id)
        values = validated(CompleteSerializer, request.data)
        state = transitions.complete(
            run.pk, values["fencing_token"], values["outcome"], values["error"], values["retryable"]
        )
        return Response({"run_id": run.pk, "state": state})
