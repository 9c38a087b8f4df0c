"""Job definitions over HTTP (team tokens): create or update, list, read, delete, pause,
resume and backfill (trigger is with the other run-creating views, in
runs/api/views.py). Every rule lives in the domain modules
(jobs.definitions, runs.controls); these views translate.
"""

import re

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response

from jobs import definitions, jitter, roles
from jobs.api.serializers import (
    BackfillResultSerializer,
    BackfillSerializer,
    DeletedJobSerializer,
    JobSerializer,
    SigningSecretSerializer,
    body_errors,
    signing_secret_of,
)
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from jobs.validation import NAME_RE
from runs import backfill, controls, enqueue
from scheduler_project.api.endpoints import PAGE_PARAMETERS, CursorPage, TeamEndpoint, page_of
from scheduler_project.api.idempotent import IDEMPOTENCY_KEY, idempotent
from scheduler_project.api.lookups import NAME, job_or_404, live_job_or_409, scoped
from scheduler_project.api.preconditions import if_match_tags
from scheduler_project.api.problems import Problem, invalid, is_schedule_error, problem_responses, validated

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
        jobs = scoped(request, JobDefinition.objects.select_related("tenant", "signing_secret"))
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


IF_MATCH = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    description="The job's ETag as you read it: the PUT applies only if nobody changed the job since "
    "(412 precondition-failed otherwise). `*`: only if the job exists.",
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match", str, OpenApiParameter.HEADER, description="`*`: create only; 412 if the job exists."
)


def etag(job):
    """A job's entity tag: its id and definition version (a strong validator; the version moves on every change)."""
    return f'"{job.pk}-{job.version}"'


def read_preconditions(request):
    """(`If-Match` tags or None, whether `If-None-Match: *`): RFC 9110 conditional PUT of a job."""
    tags = if_match_tags(request, r'(W/)?"[^"\x00-\x1f]{0,64}"', '"17-3"')
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match is not None and if_none_match.strip() != "*":
        raise invalid([{"field": "If-None-Match", "pointer": "#", "detail": 'only "*" (create, never replace)'}])
    return tags, if_none_match is not None


def check_preconditions(job, name, preconditions):
    tags, create_only = preconditions
    if create_only and job is not None:
        raise Problem(
            "precondition-failed", f"Job {name} exists (version {job.version}); If-None-Match: * creates only."
        )
    if tags is None:
        return
    if job is None:
        raise Problem("precondition-failed", f"Job {name} does not exist; If-Match needs a job to compare with.")
    if "*" not in tags and etag(job) not in tags:  # a weak tag never matches a strong comparison
        raise Problem(
            "precondition-failed",
            f"Job {name} is at version {job.version} (ETag {etag(job)}), not the one If-Match names: "
            "read it again, merge your change, and retry.",
        )


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
        job = job_or_404(request, name)
        return Response(JobSerializer(job).data, headers={"ETag": etag(job)})

    @extend_schema(
        operation_id="jobs_put",
        summary="Create or update a job (the body is the whole definition)",
        parameters=[NAME, IF_MATCH, IF_NONE_MATCH],
        request=JobSerializer,
        responses={200: JobSerializer, 201: JobSerializer, **problem_responses(400, 412, 413, 415, 429)},
    )
    def put(self, request, name):
        if not re.fullmatch(NAME_RE, name):
            detail = (
                f"{name!r} is not a valid job name: use 1-200 lowercase letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (for example billing.export-invoices)"
            )
            raise invalid([{"field": "name", "pointer": "#", "detail": detail}])
        values = validated(JobSerializer, request.data)
        preconditions = read_preconditions(request)
        for attempt in range(2):
            try:
                job, created = self.store(request, name, values, preconditions)
                break
            except IntegrityError:
                if attempt:  # a concurrent PUT created it first; the second pass updates it
                    raise
        status = 201 if created else 200
        headers = {"ETag": etag(job), **({"Location": job_url(job)} if created else {})}
        return Response(JobSerializer(job).data, status=status, headers=headers)

    @transaction.atomic
    def store(self, request, name, values, preconditions):
        """Create, change or leave the job; the version moves only when something changed.

        The preconditions are judged on the locked row, so of two owners who read
        version 3 and both PUT with `If-Match`, the second gets 412, not a silent
        overwrite. The tenant's max_definitions is save_definition's to check.
        """
        job = scoped(request, JobDefinition.objects.select_for_update(of=("self",))).filter(name=name).first()
        check_preconditions(job, name, preconditions)
        created = job is None
        revived = not created and job.status == Status.CANCELLED
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
        summary="Run a cron or every job's occurrences in [start, end) again, now",
        parameters=[NAME, IDEMPOTENCY_KEY],
        request=BackfillSerializer,
        responses={
            201: BackfillResultSerializer,
            200: OpenApiResponse(BackfillResultSerializer, description="A dry run: the plan, nothing created."),
            **problem_responses(400, 404, 409, 415, 422, 429),
        },
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
            if plan.times and not values["dry_run"]
            else []
        )
        times = plan.times
        body = {
            "dry_run": values["dry_run"],
            "created": len(created),
            "planned": len(times),
            "due_at": times[:100] if values["dry_run"] else [],
            "truncated": plan.truncated,
            "held_back": plan.held_back,
            "first_due_at": times[0] if times else None,
            "last_due_at": times[-1] if times else None,
        }
        return Response(BackfillResultSerializer(body).data, status=200 if values["dry_run"] else 201)


class JobRotateSigningSecretView(TeamEndpoint):
    """Owners only (TeamEndpoint's default for a POST): the secret is what a receiver trusts."""

    @extend_schema(
        operation_id="jobs_rotate_signing_secret",
        summary="Replace an http job's signing secret and show the new one, once",
        description="The old secret stops signing at once (docs/tasks.md, Verifying Duetime's signature). Audited.",
        parameters=[NAME],
        request=None,
        responses={200: SigningSecretSerializer, **problem_responses(404, 409)},
    )
    def post(self, request, name):
        job = live_job_or_409(request, name)
        if job.target_kind != JobDefinition.TargetKind.HTTP:
            raise Problem("invalid-state", f"Job {name} is not an http job: only http calls are signed.")
        secret = definitions.rotate_signing_secret(job, self.actor)
        job = JobDefinition.objects.select_related("signing_secret").get(pk=job.pk)
        return Response({**signing_secret_of(job), "secret": secret})
