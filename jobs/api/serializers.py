"""The job body of the API and its mapping onto JobDefinition fields.

The body groups the model's flat fields:

    schedule.kind/cron/time_zone/at/every_seconds/start_at/end_at/remaining_runs/jitter_seconds/
             missed_run_policy/starting_deadline_seconds (and the read-only ended, jitter, jitter_chosen_by)
    target.kind/ref/method/headers/bearer_secret (signing_secret: read only)
    retry.max_attempts/base_seconds/max_seconds

Nested serializers use `source="*"`, so validated data comes out flat, keyed
by model field. Shapes and types are checked here; the rules of a definition
(cron syntax, zones, ranges that depend on each other) stay in
jobs.validation, reached through save_definition, and its errors are
renamed to body paths by `body_errors`.
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs import jitter, occurrences, schedules
from jobs.models import JobDefinition, JobSigningSecret
from scheduler_project.api.fields import AwareDateTimeField, Boolean, Integer, PayloadField, Text

# Model field -> path in the API body, for error messages: the one field map, jobs.schedules.FIELDS (a
# declaration's paths are the body's), less `status`, which a body does not carry.
BODY_PATHS = {field: path for field, path in schedules.FIELDS.items() if field != "status"}
PRIORITIES = {choice.label: choice.value for choice in JobDefinition.Priority}


@extend_schema_field({"type": "string", "enum": list(PRIORITIES), "default": "default"})
class PriorityField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=list(PRIORITIES), **kwargs)

    def to_internal_value(self, data):
        return PRIORITIES[super().to_internal_value(data)]

    def to_representation(self, value):
        return JobDefinition.Priority(value).label


class ScheduleSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(JobDefinition.ScheduleKind.values, source="schedule_kind")
    cron = Text(
        source="cron_expr",
        max_length=200,
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        help_text="Five fields or a macro (@daily); kind cron only.",
    )
    time_zone = Text(max_length=64, default="UTC", help_text="IANA zone, e.g. Europe/Berlin.")
    at = AwareDateTimeField(source="run_at", required=False, allow_null=True, default=None, help_text="Kind at only.")
    every_seconds = Integer(
        min_value=1,
        max_value=occurrences.MAX_EVERY_SECONDS,
        allow_null=True,
        default=None,
        help_text="Kind every only: the period in whole seconds (at least 1). Runs fall on start_at + k periods "
        "(from 1970-01-01T00:00:00Z without a start_at), however late one ran; a DST change never alters the spacing.",
    )
    start_at = AwareDateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Any scheduled kind: no occurrence before this instant (inclusive); kind every counts from it.",
    )
    end_at = AwareDateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Any scheduled kind: no occurrence at or after this instant; after start_at.",
    )
    remaining_runs = Integer(
        min_value=0,
        max_value=2**31 - 1,
        allow_null=True,
        default=None,
        help_text="Any scheduled kind: run this many more times, then stop. Counts down as runs are scheduled "
        "(skipped occurrences, triggers and backfills do not count); a PUT sets it, so send the value you read. "
        "null: no limit.",
    )
    ended = serializers.SerializerMethodField(
        help_text="Why the job has no next occurrence: remaining_runs (it ran its count), at (its one run is "
        "scheduled), end_at (its end passed), no_occurrence (its cron expression matches no later time); "
        "null while it has one, and for a paused or on-demand job."
    )
    jitter_seconds = Integer(
        min_value=0,
        max_value=3600,
        allow_null=True,
        default=None,
        help_text="Omitted or null: Duetime chooses for a new job (10 % of the schedule's shortest interval, "
        "at most 300 s) and an existing job keeps its own; 0 opts out. docs/schedules-as-code.md, Jitter by default.",
    )
    jitter_chosen_by = serializers.SerializerMethodField(help_text="duetime (the default) or owner (stated).")
    jitter = serializers.SerializerMethodField(
        help_text="The jitter in words: how long, who chose it, this job's offset."
    )
    missed_run_policy = serializers.ChoiceField(
        JobDefinition.MissedRunPolicy.values, default=JobDefinition.MissedRunPolicy.RUN_ONCE
    )
    starting_deadline_seconds = Integer(min_value=1, max_value=2**31 - 1, allow_null=True, default=None)

    def to_representation(self, job):
        data = super().to_representation(job)
        data["cron"] = job.cron_expr or None
        return data

    @extend_schema_field(
        {"type": "string", "nullable": True, "enum": ["remaining_runs", "at", "end_at", "no_occurrence", None]}
    )
    def get_ended(self, job):
        return occurrences.ended(job)

    @extend_schema_field({"type": "string", "enum": ["duetime", "owner"]})
    def get_jitter_chosen_by(self, job):
        return "duetime" if job.jitter_is_default else "owner"

    def get_jitter(self, job) -> str:
        return jitter.describe(job)

    def validate(self, attrs):
        attrs["cron_expr"] = attrs.get("cron_expr") or ""
        return attrs


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "maxProperties": 20,
        "example": {"X-Team": "billing"},
    }
)
class HeadersField(serializers.JSONField):
    """An http target's own headers: any JSON here; jobs.validation says what is wrong with them, by name."""


class SigningSecretSerializer(serializers.Serializer):
    prefix = serializers.CharField(help_text="The first characters, to recognise the secret.")
    rotated_at = serializers.DateTimeField()
    secret = serializers.CharField(
        required=False,
        help_text="Only in the answer that made it (the job became http, or a rotation): shown once, never again.",
    )


class TargetSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(JobDefinition.TargetKind.values, source="target_kind")
    ref = Text(
        source="target_ref",
        max_length=2000,
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        help_text="python, celery: dotted path to a registered Django task; http: URL; external: null.",
    )
    method = serializers.ChoiceField(
        JobDefinition.HttpMethod.values,
        source="http_method",
        default=JobDefinition.HttpMethod.POST,
        help_text="http: POST and PUT send the payload as JSON; GET sends no body (the payload must be {}).",
    )
    headers = HeadersField(
        source="http_headers",
        required=False,
        allow_null=True,
        default=None,
        help_text="http: headers of the job's own, by name (docs/tasks.md, HTTP targets): no credentials, "
        "hop-by-hop headers, Host, Content-Length, Content-Type or Duetime's own.",
    )
    bearer_secret = Text(
        source="http_bearer_secret",
        max_length=100,
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        help_text="http: the name of a secret the operator configured for the tenant (DUETIME_HTTP_SECRETS), "
        "sent as Authorization: Bearer. Its value is never stored nor shown.",
    )
    signing_secret = serializers.SerializerMethodField(
        help_text="http: the key of the Duetime-Signature header (docs/tasks.md); null for other kinds."
    )

    def to_representation(self, job):
        data = {"kind": job.target_kind, "ref": job.target_ref or None}
        data.update(method=job.http_method, headers=job.http_headers, bearer_secret=job.http_bearer_secret or None)
        data["signing_secret"] = self.get_signing_secret(job)
        return data

    @extend_schema_field(SigningSecretSerializer(allow_null=True))
    def get_signing_secret(self, job):
        if job.target_kind != JobDefinition.TargetKind.HTTP:
            return None
        shown = signing_secret_of(job)
        issued = getattr(job, "issued_signing_secret", None)
        return {**shown, "secret": issued} if issued and shown else shown

    def validate(self, attrs):
        attrs["target_ref"] = attrs.get("target_ref") or ""
        attrs["http_headers"] = {} if attrs.get("http_headers") is None else attrs["http_headers"]
        attrs["http_bearer_secret"] = attrs.get("http_bearer_secret") or ""
        return attrs


def signing_secret_of(job):
    """{prefix, rotated_at} of an http job's signing secret, or None before it has one."""
    try:
        secret = job.signing_secret
    except JobSigningSecret.DoesNotExist:
        return None
    return {"prefix": secret.prefix, "rotated_at": serializers.DateTimeField().to_representation(secret.rotated_at)}


class RetrySerializer(serializers.Serializer):
    max_attempts = Integer(min_value=1, max_value=100, default=5)
    base_seconds = Integer(source="retry_base_seconds", min_value=0, max_value=7 * 86400, default=30)
    max_seconds = Integer(source="retry_max_seconds", min_value=0, max_value=7 * 86400, default=1800)


class OwnerSerializer(serializers.Serializer):
    """Who hears of the job's trouble (docs/operations.md, Owner notifications); all optional."""

    email = Text(
        source="owner_email",
        max_length=254,
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        help_text="Emailed when a run dead-letters, on a skip streak, on lateness past the threshold.",
    )
    webhook_url = Text(
        source="owner_webhook_url",
        max_length=2000,
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        help_text="POSTed the same events as JSON, signed (header Duetime-Signature); public addresses only.",
    )
    lateness_p99_seconds = Integer(
        source="notify_lateness_p99_seconds",
        min_value=1,
        max_value=2**31 - 1,
        allow_null=True,
        default=None,
        help_text="Notify when the job's p99 lateness over the last hour passes this; null: never.",
    )
    skip_streak = Integer(
        source="notify_skip_streak",
        min_value=1,
        max_value=10_000,
        allow_null=True,
        default=None,
        help_text="Notify when this many runs in a row were skipped; null: never.",
    )

    def to_representation(self, job):
        data = super().to_representation(job)
        data["email"], data["webhook_url"] = job.owner_email or None, job.owner_webhook_url or None
        return data

    def validate(self, attrs):
        attrs["owner_email"] = attrs.get("owner_email") or ""
        attrs["owner_webhook_url"] = attrs.get("owner_webhook_url") or ""
        return attrs


class JobSerializer(serializers.Serializer):
    """A job definition. PUT sends the whole definition; omitted fields take their defaults."""

    name = serializers.CharField(read_only=True)
    tenant = serializers.CharField(source="tenant.name", read_only=True)
    status = serializers.CharField(read_only=True, help_text="active, paused or cancelled.")
    schedule = ScheduleSerializer(source="*")
    target = TargetSerializer(source="*")
    queue = Text(
        max_length=64,
        required=False,
        help_text="Default: `external` for external jobs (run_worker never serves them), `default` otherwise.",
    )
    priority = PriorityField(required=False, help_text="critical, default or bulk; default: default.")
    timeout_seconds = Integer(min_value=1, max_value=6 * 3600, default=900)
    retry = RetrySerializer(source="*", required=False)
    concurrency = Integer(min_value=1, max_value=2**31 - 1, allow_null=True, default=None)
    concurrency_group = Text(
        max_length=64,
        required=False,
        default="",
        allow_blank=True,
        help_text="A group key shared with other jobs of the tenant: together they run at most "
        "concurrency_group_limit runs at once (1: never two at the same time). Empty: no group.",
    )
    concurrency_group_limit = Integer(
        min_value=1,
        max_value=2**31 - 1,
        default=1,
        help_text="This job starts a run only while fewer than this many runs of its group run; default 1.",
    )
    overlap_policy = serializers.ChoiceField(
        JobDefinition.OverlapPolicy.values, default=JobDefinition.OverlapPolicy.FORBID
    )
    payload = PayloadField(default=dict)
    owner = OwnerSerializer(source="*", required=False)
    next_due_at = serializers.DateTimeField(read_only=True, allow_null=True)
    managed_by = serializers.CharField(
        read_only=True, help_text="The schedules-as-code set (its `source`) that declares the job; empty if none."
    )
    drift = serializers.SerializerMethodField(
        help_text="For a job declared in code: each field edited outside the set since its last apply, with the "
        "value the set gave it (`code`) and the value now (`now`); the next apply reverts them. Empty otherwise."
    )
    version = serializers.IntegerField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)

    @extend_schema_field(
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "code": {}, "now": {}},
                "required": ["field", "code", "now"],
            },
        }
    )
    def get_drift(self, job):
        return [{"field": d.field, "code": d.code, "now": d.portal} for d in schedules.drift(job)]

    def to_internal_value(self, data):
        if isinstance(data, dict) and "retry" not in data:
            data = {**data, "retry": {}}  # the whole retry policy defaults
        if isinstance(data, dict) and "owner" not in data:
            data = {**data, "owner": {}}  # no owner contact: nobody is notified
        values = super().to_internal_value(data)
        values.setdefault("priority", JobDefinition.Priority.DEFAULT)
        # An external job's runs wait for workers that lease over HTTP: without a queue of
        # its own it would share `default` with the built-in workers' runs.
        external = values.get("target_kind") == JobDefinition.TargetKind.EXTERNAL
        values.setdefault("queue", "external" if external else "default")
        return values


def body_errors(message_dict):
    """jobs.validation's {model field: [messages]} as problem `errors` named by body path."""
    return [
        {
            "field": BODY_PATHS.get(field, field),
            "pointer": "#/" + BODY_PATHS.get(field, field).replace(".", "/"),
            "detail": message,
        }
        for field, messages in message_dict.items()
        for message in messages
    ]


class DeletedJobSerializer(serializers.Serializer):
    name = serializers.CharField(read_only=True)
    status = serializers.CharField(read_only=True)
    cancelled_runs = serializers.IntegerField(read_only=True, help_text="Runs not yet started, now cancelled.")


class BackfillSerializer(serializers.Serializer):
    start = AwareDateTimeField(help_text="Window start, inclusive.")
    end = AwareDateTimeField(help_text="Window end, exclusive; not after now.")
    max_runs = Integer(min_value=1, max_value=10_000, default=100)
    ignore_windows = Boolean(
        default=False, help_text="Run the occurrences that maintenance windows and calendars would hold back too."
    )
    dry_run = Boolean(default=False, help_text="Answer the plan (which occurrences would run) and create nothing.")


class BackfillResultSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    created = serializers.IntegerField(help_text="Runs created, due now (0 on a dry run).")
    planned = serializers.IntegerField(help_text="Occurrences the backfill runs (or, on a dry run, would run).")
    due_at = serializers.ListField(
        child=serializers.DateTimeField(), help_text="On a dry run, each planned occurrence (at most 100 listed)."
    )
    truncated = serializers.BooleanField(help_text="True when the window held more than max_runs occurrences.")
    held_back = serializers.IntegerField(help_text="Occurrences that maintenance windows and calendars left out.")
    first_due_at = serializers.DateTimeField(allow_null=True)
    last_due_at = serializers.DateTimeField(allow_null=True)
