"""Job definitions over HTTP (team tokens): create or update, list, read, delete, pause,
resume and backfill (trigger is with the other run-creating views, in
runs/api/views.py). Every rule lives in the domain modules
(jobs.definitions, runs.controls); these views translate.
"""

import re

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from jobs import jitter, quotas, roles
from jobs.api.serializers import (
    BackfillResultSerializer,
    BackfillSerializer,
    DeletedJobSerializer,
    JobSerializer,
    body_errors,
)
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from jobs.validation import NAME_RE
from runs import backfill, controls, enqueue
from scheduler_project.api.endpoints import PAGE_PARAMETERS, CursorPage, TeamEndpoint, page_of
from scheduler_project.api.idempotent import IDEMPOTENCY_KEY, idempotent
from scheduler_project.api.lookups import NAME, job_or_404, live_job_or_409, scoped
from scheduler_project.api.problems import invalid, is_schedule_error, problem_responses, validated

Status = JobDefinition.Status


def job_url(job):
    return reverse("api-job", kwargs={"name": job.name})


class JobListView(TeamEndpoint):
    @extend_schema(
        operation_id="jobs_list",
        summary="List the tenant's jobs by name",
        parameters=[
            OpenApiParameter(
                "status", str, enum=["active", "paused", "cancelled"], description="Default: active and paused."
            ),
            *PAGE_PARAMETERS,
        ],
        responses={200: page_of(JobSerializer, "JobPage"), **problem_responses(400, 404)},
    )
    def get(self, request):
        jobs = scoped(request, JobDefinition.objects.select_related("tenant"))
        wanted = request.query_params.get("status")
        if wanted is None:
            jobs = jobs.exclude(status=Status.CANCELLED)
        elif wanted in Status.values:
            jobs = jobs.filter(status=wanted)
        else:
            raise invalid([{"field": "status", "pointer": "#", "detail": "must be active, paused or cancelled"}])
        page = JobNamePage()
        rows = page.paginate_queryset(jobs, request, view=self)
        return page.get_paginated_response(JobSerializer(rows, many=True).data)


class JobNamePage(CursorPage):
    ordering = "name"  # unique per tenant
    position_pattern = NAME_RE


class JobView(TeamEndpoint):
    @extend_schema(
        operation_id="jobs_get",
        summary="Read a job",
        parameters=[NAME],
        responses={200: JobSerializer, **problem_responses(404)},
    )
    def get(self, request, name):
        return Response(JobSerializer(job_or_404(request, name)).data)

    @extend_schema(
        operation_id="jobs_put",
        summary="Create or update a job (the body is the whole definition)",
        parameters=[NAME],
        request=JobSerializer,
        responses={200: JobSerializer, 201: JobSerializer, **problem_responses(400, 413, 415, 429)},
    )
    def put(self, request, name):
        if not re.fullmatch(NAME_RE, name):
            detail = (
                f"{name!r} is not a valid job name: use 1-200 lowercase letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (for example billing.export-invoices)"
            )
            raise invalid([{"field": "name", "pointer": "#", "detail": detail}])
        values = validated(JobSerializer, request.data)
        for attempt in range(2):
            try:
                job, created = self.store(request, name, values)
                break
            except IntegrityError:
                if attempt:  # a concurrent PUT created it first; the second pass updates it
                    raise
        status = 201 if created else 200
        headers = {"Location": job_url(job)} if created else {}
        return Response(JobSerializer(job).data, status=status, headers=headers)

    @transaction.atomic
    def store(self, request, name, values):
        """Create, change or leave the job; the version moves only when something changed."""
        job = scoped(request, JobDefinition.objects.select_for_update(of=("self",))).filter(name=name).first()
        created = job is None
        revived = not created and job.status == Status.CANCELLED
        if created or revived:
            quotas.check_definitions(request.auth.tenant)
        if created:
            job = JobDefinition(tenant=request.auth.tenant, name=name)
        # A jitter the body does not state is Duetime's to choose or keep (jobs.jitter), never a change.
        stated_jitter = values.pop("jitter_seconds", None)
        changed = [field for field, value in values.items() if getattr(job, field) != value]
        if stated_jitter is not None and stated_jitter != job.jitter_seconds:
            changed.append("jitter_seconds")
        if not (created or revived or changed):
            return job, False
        for field, value in values.items():
            setattr(job, field, value)
        jitter.state(job, stated_jitter)
        if revived:
            job.status = Status.ACTIVE  # save_definition starts it from its next occurrence, once it is valid
        try:
            save_definition(job, self.actor)
        except DjangoValidationError as exc:
            if created and scoped(request, JobDefinition.objects).filter(name=name).exists():
                raise IntegrityError(f"job {name} was created concurrently") from exc
            errors = body_errors(exc.message_dict)
            raise invalid(errors, "invalid-schedule" if is_schedule_error(errors) else "validation-error")
        return job, created

    @extend_schema(
        operation_id="jobs_delete",
        summary="Delete a job: no new runs; runs not yet started are cancelled",
        parameters=[NAME],
        responses={200: DeletedJobSerializer, **problem_responses(404)},
    )
    def delete(self, request, name):
        job = job_or_404(request, name)
        cancelled = 0
        if job.status != Status.CANCELLED:
            cancelled = controls.delete(job, actor=self.actor)
        return Response({"name": job.name, "status": Status.CANCELLED, "cancelled_runs": cancelled})


class JobPauseView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="jobs_pause",
        summary="Pause a job: no new runs, due runs wait (a paused job stays paused)",
        parameters=[NAME],
        request=None,
        responses={200: JobSerializer, **problem_responses(404, 409)},
    )
    def post(self, request, name):
        job = live_job_or_409(request, name)
        controls.pause(job, actor=self.actor)
        job.refresh_from_db()
        return Response(JobSerializer(job).data)


class JobResumeView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="jobs_resume",
        summary="Resume a job from its next occurrence; what was passed over is recorded skipped",
        parameters=[NAME],
        request=None,
        responses={200: JobSerializer, **problem_responses(404, 409)},
    )
    def post(self, request, name):
        job = live_job_or_409(request, name)
        controls.resume(job, actor=self.actor)
        job.refresh_from_db()
        return Response(JobSerializer(job).data)


class JobBackfillView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="jobs_backfill",
        summary="Run a cron job's occurrences in [start, end) again, now",
        parameters=[NAME, IDEMPOTENCY_KEY],
        request=BackfillSerializer,
        responses={201: BackfillResultSerializer, **problem_responses(400, 404, 409, 415, 422, 429)},
    )
    @idempotent
    def post(self, request, name):
        job = live_job_or_409(request, name)
        values = validated(BackfillSerializer, request.data)
        start, end, max_runs = values["start"], values["end"], values["max_runs"]
        try:
            plan = backfill.backfill_plan(job, start, end, max_runs, ignore_windows=values["ignore_windows"])
        except DjangoValidationError as exc:
            errors = body_errors({"schedule_kind" if k == "job" else k: v for k, v in exc.message_dict.items()})
            raise invalid(errors, "invalid-schedule" if is_schedule_error(errors) else "validation-error")
        created = (
            backfill.backfill(
                job,
                start,
                end,
                actor=self.actor,
                max_runs=max_runs,
                quota=enqueue.Quota.PENDING,
                ignore_windows=values["ignore_windows"],
                plan=plan,
            )
            if plan.times
            else []
        )
        times = plan.times
        body = {
            "created": len(created),
            "truncated": plan.truncated,
            "held_back": plan.held_back,
            "first_due_at": times[0] if times else None,
            "last_due_at": times[-1] if times else None,
        }
        return Response(BackfillResultSerializer(body).data, status=201)
