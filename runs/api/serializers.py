"""Runs, attempts and leases as the API shows them, and the bodies that act on them.

Everything a client may not set (`tenant`, `state`, `attempt`,
`fencing_token`, ...) is read-only: it comes from the engine, never from a body.
"""

from django.conf import settings
from rest_framework import serializers

from jobs import identifiers
from jobs.validation import QUEUE_RE
from runs.models import Attempt, Run
from scheduler_project.api.fields import AwareDateTimeField, Boolean, Integer, Number, Pattern, PayloadField, Text

MAX_BIGINT = 2**63 - 1
LEASE_SECONDS = (5, 3600)
MAX_WAIT_SECONDS = 20
MAX_DELAY_SECONDS = 366 * 86400


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = ["attempt", "fencing_token", "worker_id", "started_at", "ended_at", "outcome", "error"]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    """A run in a list: no payload, no attempts."""

    job = serializers.CharField(source="job.name", read_only=True)
    tenant = serializers.CharField(source="tenant.name", read_only=True)
    priority = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id", "job", "tenant", "origin", "state", "attempt", "max_attempts", "due_at", "available_at",
            "idempotency_key", "fencing_token", "worker_id", "lease_expires_at", "queue", "priority",
            "started_at", "finished_at", "reason", "last_error", "created_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_priority(self, run) -> str:
        return run.get_priority_display()

    def get_args(self, run) -> list:
        return list(run.args or [])


class RunDetailSerializer(RunSerializer):
    """A run with its payload, its positional args (a Django task's) and every attempt, oldest first."""

    attempts = AttemptSerializer(many=True, read_only=True)
    args = serializers.SerializerMethodField(
        help_text="A Django task's positional arguments, as enqueued ([] for every other run); "
        "`payload` holds its keyword arguments."
    )

    class Meta(RunSerializer.Meta):
        fields = RunSerializer.Meta.fields + ["payload", "args", "attempts"]
        read_only_fields = fields


class EnqueueSerializer(serializers.Serializer):
    payload = PayloadField(required=False, help_text="Defaults to the job's payload.")
    run_at = AwareDateTimeField(required=False, allow_null=True, default=None, help_text="When to run; absent: now.")
    delay_seconds = Integer(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=MAX_DELAY_SECONDS,
        help_text="Run this many seconds from now (instead of run_at).",
    )

    def validate(self, attrs):
        if attrs.get("run_at") is not None and attrs.get("delay_seconds") is not None:
            raise serializers.ValidationError({"run_at": ["give run_at or delay_seconds, not both"]})
        return attrs


class TriggerSerializer(serializers.Serializer):
    payload = PayloadField(required=False, help_text="Defaults to the job's payload.")


class CancelSerializer(serializers.Serializer):
    reason = Text(required=False, allow_blank=True, max_length=500, default="")


class LeaseRequestSerializer(serializers.Serializer):
    queues = serializers.ListField(
        child=Pattern(QUEUE_RE, max_length=64),
        required=False,
        max_length=50,
        help_text="Queues to lease from (default: all the token's queues); others are ignored.",
    )
    max = Integer(min_value=1, max_value=100, default=10, help_text="Most runs to lease.")
    lease_seconds = Integer(min_value=LEASE_SECONDS[0], max_value=LEASE_SECONDS[1], required=False)
    wait_seconds = Number(
        min_value=0, max_value=MAX_WAIT_SECONDS, default=0, help_text="Long-poll: wait up to this long for a due run."
    )
    worker_id = Text(
        max_length=identifiers.MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text=f"Recorded on the runs and attempts and in the move log: {identifiers.RULE}, never a credential "
        "(default: token:<prefix>).",
    )

    def validate_worker_id(self, value):
        problem = identifiers.problem(value) if value else None
        if problem:
            raise serializers.ValidationError(problem)  # the value itself is never repeated
        return value

    def validate(self, attrs):
        attrs.setdefault("lease_seconds", settings.DUETIME_LEASE_SECONDS)
        return attrs


class LeaseSerializer(serializers.Serializer):
    run_id = serializers.IntegerField()
    job = serializers.CharField(source="job_name")
    queue = serializers.CharField()
    attempt = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    idempotency_key = serializers.CharField(help_text="The same on every execution of this run.")
    fencing_token = serializers.IntegerField(help_text="Send with heartbeat and complete; pass to shared resources.")
    lease_expires_at = serializers.DateTimeField()
    timeout_seconds = serializers.IntegerField()
    due_at = serializers.DateTimeField()
    payload = serializers.JSONField()


class LeasesSerializer(serializers.Serializer):
    leases = LeaseSerializer(many=True)


class HeartbeatSerializer(serializers.Serializer):
    fencing_token = Integer(min_value=0, max_value=MAX_BIGINT)
    lease_seconds = Integer(min_value=LEASE_SECONDS[0], max_value=LEASE_SECONDS[1], required=False)

    def validate(self, attrs):
        attrs.setdefault("lease_seconds", settings.DUETIME_LEASE_SECONDS)
        return attrs


class HeartbeatResultSerializer(serializers.Serializer):
    run_id = serializers.IntegerField()
    lease_expires_at = serializers.DateTimeField(help_text="Capped by the job's timeout_seconds.")


class CompleteSerializer(serializers.Serializer):
    fencing_token = Integer(min_value=0, max_value=MAX_BIGINT)
    outcome = serializers.ChoiceField(["succeeded", "failed"])
    error = Text(required=False, allow_blank=True, max_length=10_000, default="")
    retryable = Boolean(default=True, help_text="false: a permanent failure, straight to the DLQ.")


class CompleteResultSerializer(serializers.Serializer):
    run_id = serializers.IntegerField()
    state = serializers.ChoiceField(
        Run.State.choices, help_text="succeeded, retry_wait (retried later) or dead (in the DLQ)."
    )
