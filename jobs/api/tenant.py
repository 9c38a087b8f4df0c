"""The caller's tenant over HTTP (team tokens): read it, pause and resume it or one of its queues.

`POST /v1/tenant:pause` and `:resume` call runs.controls.pause_tenant and
resume_tenant, as the portal's tenant actions do: the same pause stored on
the tenant, the same audit entry, and on resume the same skipped run per job
for what it passed over. Pausing what is paused (or resuming what is not)
changes nothing and answers the state as it is, like a job's pause.
"""

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from jobs import roles
from jobs.models import QueuePause, Tenant
from jobs.validation import QUEUE_RE
from runs import breaker, controls, limits
from scheduler_project.api.endpoints import TeamEndpoint
from scheduler_project.api.fields import Pattern, Text
from scheduler_project.api.problems import problem_responses, validated


class BreakerSerializer(serializers.Serializer):
    open = serializers.BooleanField(read_only=True, help_text="True while the tenant's retries wait.")
    opened_at = serializers.DateTimeField(read_only=True, allow_null=True, help_text="Since when; null if closed.")
    detail = serializers.CharField(read_only=True, help_text="The failure rate that opened it; empty if closed.")
    window_seconds = serializers.IntegerField(read_only=True, help_text="The window the rate is measured over.")
    failure_percent = serializers.IntegerField(
        read_only=True, help_text="It opens above this share of failed attempts (0: the breaker is off)."
    )
    min_attempts = serializers.IntegerField(read_only=True, help_text="... over at least this many attempts.")
    attempts = serializers.IntegerField(read_only=True, help_text="Attempts in the current window.")
    failures = serializers.IntegerField(read_only=True, help_text="Of which failed, timed out or lost their lease.")


class LimitSerializer(serializers.Serializer):
    name = serializers.CharField(read_only=True, help_text="The limit: a tenant quota's field name or a limit kind.")
    scope = serializers.CharField(read_only=True, help_text='What it applies to: "tenant", "job NAME", ...')
    limit = serializers.IntegerField(read_only=True, allow_null=True, help_text="The limit; null: none set.")
    used = serializers.IntegerField(read_only=True, help_text="What the tenant uses of it now.")
    at_limit = serializers.BooleanField(read_only=True, help_text="True while use has reached the limit.")
    enforced_by = serializers.CharField(read_only=True, help_text="Where it is enforced: the doors or the claim.")
    description = serializers.CharField(read_only=True)


class TenantSerializer(serializers.Serializer):
    name = serializers.CharField(read_only=True)
    paused = serializers.BooleanField(read_only=True, help_text="True while the whole tenant is paused.")
    paused_at = serializers.DateTimeField(read_only=True, allow_null=True, help_text="Since when; null if not.")
    paused_queues = serializers.DictField(
        child=serializers.DateTimeField(),
        read_only=True,
        help_text="Queues paused on their own, each with the instant it was paused.",
    )
    breaker = BreakerSerializer(
        read_only=True,
        help_text="The tenant-wide failure breaker: while open, retries wait and first attempts still run.",
    )
    limits = LimitSerializer(
        many=True, read_only=True, help_text="Every quota, cap and limit that applies to the tenant, with its use now."
    )


class TenantPauseSerializer(serializers.Serializer):
    queue = Pattern(
        QUEUE_RE,
        required=False,
        allow_null=True,
        default=None,
        help_text="One queue of the tenant; omitted or null: the whole tenant, every queue.",
    )
    note = Text(max_length=2000, required=False, default="", allow_blank=True, help_text="Why, for the audit log.")


class TenantResumeResultSerializer(TenantSerializer):
    jobs_caught_up = serializers.IntegerField(
        read_only=True,
        help_text="Jobs the pause held that start again from their next occurrence; each records what it passed "
        "over as one skipped run. 0 when nothing was paused so.",
    )


def state(tenant):
    pauses = QueuePause.objects.filter(tenant=tenant).order_by("queue")
    now = timezone.now()
    rate = breaker.tenant_rate(tenant, now)  # read once: the breaker's state and its row of the limits
    return {
        "name": tenant.name,
        "paused": tenant.paused_at is not None,
        "paused_at": tenant.paused_at,
        "paused_queues": {p.queue: p.paused_at for p in pauses},
        "breaker": breaker_state(tenant, rate),
        "limits": limits.usage(tenant, now, rate),
    }


def breaker_state(tenant, rate):
    return {
        "open": tenant.breaker_opened_at is not None,
        "opened_at": tenant.breaker_opened_at,
        "detail": tenant.breaker_detail,
        "window_seconds": settings.DUETIME_BREAKER_WINDOW_SECONDS,
        "failure_percent": settings.DUETIME_BREAKER_FAILURE_PERCENT,
        "min_attempts": settings.DUETIME_BREAKER_MIN_ATTEMPTS,
        "attempts": rate.attempts,
        "failures": rate.failures,
    }


def callers_tenant(request):
    return Tenant.objects.get(pk=request.auth.tenant_id)


class TenantView(TeamEndpoint):
    @extend_schema(
        operation_id="tenant_get",
        summary="Read the caller's tenant: whether it, or any of its queues, is paused",
        responses={200: TenantSerializer, **problem_responses()},
    )
    def get(self, request):
        return Response(TenantSerializer(state(callers_tenant(request))).data)


class TenantPauseView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="tenant_pause",
        summary="Pause the tenant, or one of its queues: no run is claimed or created until resumed",
        request=TenantPauseSerializer,
        responses={200: TenantSerializer, **problem_responses(400, 415)},
    )
    def post(self, request):
        values = validated(TenantPauseSerializer, request.data)
        tenant = callers_tenant(request)
        controls.pause_tenant(tenant, actor=self.actor, queue=values["queue"], note=values["note"])
        return Response(TenantSerializer(state(tenant)).data)


class TenantResumeView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="tenant_resume",
        summary="Resume the tenant, or one of its queues; what each job passed over is recorded skipped",
        request=TenantPauseSerializer,
        responses={200: TenantResumeResultSerializer, **problem_responses(400, 415)},
    )
    def post(self, request):
        values = validated(TenantPauseSerializer, request.data)
        tenant = callers_tenant(request)
        jobs = controls.resume_tenant(tenant, actor=self.actor, queue=values["queue"], note=values["note"])
        body = {**state(tenant), "jobs_caught_up": len(jobs or [])}
        return Response(TenantResumeResultSerializer(body).data)


class BreakerCloseSerializer(serializers.Serializer):
    note = Text(max_length=2000, required=False, default="", allow_blank=True, help_text="Why, for the audit log.")


class TenantCloseBreakerView(TeamEndpoint):
    method_roles = {"POST": roles.OPERATE}

    @extend_schema(
        operation_id="tenant_close_breaker",
        summary="Close the tenant's failure breaker: its retries are claimed again (audited)",
        description="Failures before the close no longer count, so the breaker opens again only if the attempts "
        "after it fail as badly over a whole window. Closing a closed breaker changes nothing.",
        request=BreakerCloseSerializer,
        responses={200: TenantSerializer, **problem_responses(400, 415)},
    )
    def post(self, request):
        values = validated(BreakerCloseSerializer, request.data)
        tenant = callers_tenant(request)
        breaker.close(tenant, actor=self.actor, note=values["note"])
        return Response(TenantSerializer(state(callers_tenant(request))).data)
