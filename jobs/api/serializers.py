"""The job body of the API and its mapping onto JobDefinition fields.

The body groups the model's flat fields:

    schedule.kind/cron/time_zone/at/jitter_seconds/missed_run_policy/starting_deadline_seconds
    target.kind/ref
    retry.max_attempts/base_seconds/max_seconds

Nested serializers use `source="*"`, so validated data comes out flat, keyed
by model field. Shapes and types are checked here; the rules of a definition
(cron syntax, zones, ranges that depend on each other) stay in
jobs.validation, reached through save_definition, and its errors are
renamed to body paths by `body_errors`.
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.models import JobDefinition
from jobs.validation import check_payload
from scheduler_project.api.problems import Problem

# Model field -> path in the API body, for error messages.
BODY_PATHS = {
    "schedule_kind": "schedule.kind",
    "cron_expr": "schedule.cron",
    "run_at": "schedule.at",
    "time_zone": "schedule.time_zone",
    "jitter_seconds": "schedule.jitter_seconds",
    "missed_run_policy": "schedule.missed_run_policy",
    "starting_deadline_seconds": "schedule.starting_deadline_seconds",
    "target_kind": "target.kind",
    "target_ref": "target.ref",
    "max_attempts": "retry.max_attempts",
    "retry_base_seconds": "retry.base_seconds",
    "retry_max_seconds": "retry.max_seconds",
}
SCHEDULE_FIELDS = {
    "schedule_kind",
    "cron_expr",
    "run_at",
    "time_zone",
    "jitter_seconds",
    "missed_run_policy",
    "starting_deadline_seconds",
}
PRIORITIES = {choice.label: choice.value for choice in JobDefinition.Priority}


class StrictJSON:
    """Refuse values of the wrong JSON type instead of coercing them (5 is not "5", "true" is not true)."""

    json_types = ()

    def to_internal_value(self, data):
        if isinstance(data, bool) and bool not in self.json_types or not isinstance(data, self.json_types):
            self.fail("wrong_type", type=type(data).__name__)
        return super().to_internal_value(data)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.error_messages["wrong_type"] = f"Expected {self.json_name}, got a JSON {{type}}."


class Text(StrictJSON, serializers.CharField):
    json_types, json_name = (str,), "a string"


class Pattern(StrictJSON, serializers.RegexField):
    json_types, json_name = (str,), "a string"


class Integer(StrictJSON, serializers.IntegerField):
    json_types, json_name = (int,), "an integer"


class Number(StrictJSON, serializers.FloatField):
    json_types, json_name = (int, float), "a number"


class Boolean(StrictJSON, serializers.BooleanField):
    json_types, json_name = (bool,), "true or false"


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with an explicit offset: a scheduler must not guess the zone of a bare time."""

    def to_internal_value(self, value):
        parsed = super().to_internal_value(value)
        text = str(value).strip()
        if not (text.endswith(("Z", "z")) or text[-6:-5] in ("+", "-") or text[-5:-4] in ("+", "-")):
            self.fail("naive")
        return parsed

    default_error_messages = {"naive": "Give a UTC offset, for example 2026-12-01T09:00:00+01:00 or ...Z."}


class PayloadField(serializers.DictField):
    """A JSON object of at most DUETIME_MAX_PAYLOAD_BYTES (compact UTF-8); larger: 413."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        unstorable = unstorable_text(value)
        if unstorable:
            raise serializers.ValidationError(unstorable)
        problem = check_payload(value)
        if problem:
            raise Problem("payload-too-large", f"payload {problem}")
        return value


def unstorable_text(value):
    """Why a JSON value's text cannot be stored, or None.

    PostgreSQL's jsonb refuses the NUL character, and no database stores a lone
    UTF-16 surrogate (which JSON's \\u escapes can produce). Iterative: nesting
    as deep as the JSON parser allows must not overflow the stack here.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "The NUL character (\\u0000) cannot be stored; encode binary data, e.g. as base64."
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "Lone UTF-16 surrogates (\\ud800-\\udfff without their pair) are not text; send valid UTF-8."
    return None


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
    jitter_seconds = Integer(min_value=0, max_value=3600, default=0)
    missed_run_policy = serializers.ChoiceField(
        JobDefinition.MissedRunPolicy.values, default=JobDefinition.MissedRunPolicy.RUN_ONCE
    )
    starting_deadline_seconds = Integer(min_value=1, max_value=2**31 - 1, allow_null=True, default=None)

    def to_representation(self, job):
        data = super().to_representation(job)
        data["cron"] = job.cron_expr or None
        return data

    def validate(self, attrs):
        attrs["cron_expr"] = attrs.get("cron_expr") or ""
        return attrs


class TargetSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(JobDefinition.TargetKind.values, source="target_kind")
    ref = Text(
        source="target_ref",
        max_length=2000,
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        help_text="python: dotted path; http: URL; celery: task name; external: null.",
    )

    def to_representation(self, job):
        return {"kind": job.target_kind, "ref": job.target_ref or None}

    def validate(self, attrs):
        attrs["target_ref"] = attrs.get("target_ref") or ""
        return attrs


class RetrySerializer(serializers.Serializer):
    max_attempts = Integer(min_value=1, max_value=100, default=5)
    base_seconds = Integer(source="retry_base_seconds", min_value=0, max_value=7 * 86400, default=30)
    max_seconds = Integer(source="retry_max_seconds", min_value=0, max_value=7 * 86400, default=1800)


class JobSerializer(serializers.Serializer):
    """A job definition. PUT sends the whole definition; omitted fields take their defaults."""

    name = serializers.CharField(read_only=True)
    tenant = serializers.CharField(source="tenant.name", read_only=True)
    status = serializers.CharField(read_only=True, help_text="active, paused or cancelled.")
    schedule = ScheduleSerializer(source="*")
    target = TargetSerializer(source="*")
    queue = Text(max_length=64, default="default")
    priority = PriorityField(required=False, help_text="critical, default or bulk; default: default.")
    timeout_seconds = Integer(min_value=1, max_value=6 * 3600, default=900)
    retry = RetrySerializer(source="*", required=False)
    concurrency = Integer(min_value=1, max_value=2**31 - 1, allow_null=True, default=None)
    overlap_policy = serializers.ChoiceField(
        JobDefinition.OverlapPolicy.values, default=JobDefinition.OverlapPolicy.FORBID
    )
    payload = PayloadField(default=dict)
    next_due_at = serializers.DateTimeField(read_only=True, allow_null=True)
    version = serializers.IntegerField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)

    def to_internal_value(self, data):
        if isinstance(data, dict) and "retry" not in data:
            data = {**data, "retry": {}}  # the whole retry policy defaults
        values = super().to_internal_value(data)
        values.setdefault("priority", JobDefinition.Priority.DEFAULT)
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


def is_schedule_error(errors):
    return any(e["field"].startswith("schedule") for e in errors)


class DeletedJobSerializer(serializers.Serializer):
    name = serializers.CharField(read_only=True)
    status = serializers.CharField(read_only=True)
    cancelled_runs = serializers.IntegerField(read_only=True, help_text="Runs not yet started, now cancelled.")


class TriggerSerializer(serializers.Serializer):
    payload = PayloadField(required=False, help_text="Defaults to the job's payload.")


class BackfillSerializer(serializers.Serializer):
    start = AwareDateTimeField(help_text="Window start, inclusive.")
    end = AwareDateTimeField(help_text="Window end, exclusive; not after now.")
    max_runs = Integer(min_value=1, max_value=10_000, default=100)


class BackfillResultSerializer(serializers.Serializer):
    created = serializers.IntegerField(help_text="Runs created, due now.")
    truncated = serializers.BooleanField(help_text="True when the window held more than max_runs occurrences.")
    first_due_at = serializers.DateTimeField(allow_null=True)
    last_due_at = serializers.DateTimeField(allow_null=True)
