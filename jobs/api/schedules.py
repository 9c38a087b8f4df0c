"""Schedules as code over HTTP (team tokens): `PUT /v1/schedules` with the whole set, idempotent.

The body is the set a team declares (docs/schedules-as-code.md): its name
(`source`), its jobs by name, each the job body of PUT /v1/jobs/{name}
plus `paused`, and its calendars and windows by name, each the body of
PUT /v1/calendars/{name} or of POST /v1/windows without `name` (the shared
bodies of scheduler_project/api/windows.py). `manage.py apply_schedules` reads the same set from TOML and
checks it with the same serializer, so a file and a body mean one thing.
Unknown keys are refused (a typo in a declaration must not pass silently).
The answer is the plan: applied, or only shown with `?dry_run=1`;
`?prune=1` deletes the jobs of the set that are no longer declared.
"""

import datetime as dt
import re

from django.db import IntegrityError
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from calendars import declarations
from jobs import roles, schedules
from jobs.api.serializers import JobSerializer
from jobs.models import Tenant
from jobs.validation import NAME_RE
from runs.schedule_sets import apply_set, check_tag, plan_set, set_tag
from scheduler_project.api.endpoints import TeamEndpoint
from scheduler_project.api.fields import Boolean, Pattern, Text
from scheduler_project.api.preconditions import if_match_tags
from scheduler_project.api.problems import field_errors, invalid, problem_responses
from scheduler_project.api.windows import CALENDAR_NAME_RE, CalendarSerializer, WindowSerializer

MAX_JOBS = 5000  # per set; a tenant with more splits them into several sets (sources)
MAX_WINDOWS = MAX_CALENDARS = 1000  # per set, likewise
SECTIONS = ("jobs", "calendars", "windows")  # the set's tables, each by name


class DeclaredJobSerializer(JobSerializer):
    """One job of a set: the job body of PUT /v1/jobs/{name}, plus whether it is declared paused."""

    paused = Boolean(
        default=False, help_text="Declared paused: the apply pauses the job, and resumes it once this is false again."
    )


class DeclaredCalendarSerializer(CalendarSerializer):
    """One calendar of a set: the body of PUT /v1/calendars/{name} (its name is its key in the set), and `ical`."""

    name = created_at = updated_at = None
    ical = Text(
        max_length=1_000_000,
        required=False,
        allow_blank=True,
        default="",
        help_text="An iCalendar file's text: its events are holidays too, as POST /v1/calendars/{name}:import adds them.",
    )


class DeclaredWindowSerializer(WindowSerializer):
    """One window of a set: the body of POST /v1/windows, its name its key in the set; `job` and `calendar` may
    name a job or a calendar declared in the same set."""

    id = name = created_at = updated_at = None


class ScheduleSetSerializer(serializers.Serializer):
    source = Pattern(
        NAME_RE,
        max_length=100,
        default=schedules.DEFAULT_SOURCE,
        help_text="The set's name: a tenant may have several (one per service); each applies and prunes only its own.",
    )
    jobs = serializers.DictField(
        child=DeclaredJobSerializer(),
        allow_empty=True,
        help_text="Job name -> its declaration. Every job of the set: those missing are paused (deleted with prune=1).",
    )
    calendars = serializers.DictField(
        child=DeclaredCalendarSerializer(),
        required=False,
        default=dict,
        help_text="Calendar name -> its declaration. Those of the set missing are kept (deleted with prune=1, "
        "and the windows that use them).",
    )
    windows = serializers.DictField(
        child=DeclaredWindowSerializer(),
        required=False,
        default=dict,
        help_text="Window name -> its declaration. Those of the set missing are disabled (deleted with prune=1).",
    )

    def to_internal_value(self, data):
        unknown = unknown_keys(self, data)
        if unknown:
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)

    def validate_jobs(self, jobs):
        bad = [name for name in jobs if not re.fullmatch(NAME_RE, name)]
        if bad:
            raise serializers.ValidationError(
                f"not a job name: {', '.join(sorted(bad)[:5])} (use lowercase letters, digits, '.', '_' or '-')"
            )
        if len(jobs) > MAX_JOBS:
            raise serializers.ValidationError(f"{len(jobs)} jobs; a set holds at most {MAX_JOBS}: split it by source")
        return jobs

    def validate_calendars(self, calendars):
        bad = [name for name in calendars if not re.fullmatch(CALENDAR_NAME_RE, name)]
        if bad:
            detail = "use 1-100 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit"
            raise serializers.ValidationError(f"not a calendar name: {', '.join(sorted(bad)[:5])} ({detail})")
        if len(calendars) > MAX_CALENDARS:
            raise serializers.ValidationError(f"{len(calendars)} calendars; a set holds at most {MAX_CALENDARS}")
        return calendars

    def validate_windows(self, windows):
        bad = [name for name in windows if not name.strip() or len(name) > 100]
        if bad:
            raise serializers.ValidationError("a window's name is 1 to 100 characters, not only spaces")
        if len(windows) > MAX_WINDOWS:
            raise serializers.ValidationError(f"{len(windows)} windows; a set holds at most {MAX_WINDOWS}")
        return windows


def unknown_keys(serializer, data, path=()):
    """{key: [message]} (nested like DRF's errors) for each key `serializer` has no field for."""
    if not isinstance(data, dict):
        return {}
    found = {}
    fields = {name: field for name, field in serializer.fields.items() if not field.read_only}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            found[key] = [f"unknown field; expected one of: {', '.join(sorted(fields))}"]
        elif isinstance(field, serializers.DictField) and isinstance(field.child, serializers.Serializer):
            inner = {k: unknown_keys(field.child, v) for k, v in (value.items() if isinstance(value, dict) else ())}
            inner = {k: v for k, v in inner.items() if v}
            if inner:
                found[key] = inner
        elif isinstance(field, serializers.Serializer):
            inner = unknown_keys(field, value)
            if inner:
                found[key] = inner
        elif isinstance(field, serializers.ListSerializer) and isinstance(value, list):  # a calendar's holidays
            inner = {index: unknown_keys(field.child, item) for index, item in enumerate(value)}
            inner = {index: v for index, v in inner.items() if v}
            if inner:
                found[key] = inner
    return found


def declared_specs(values):
    """The validated set's jobs as jobs.schedules specs: {name: {model field: JSON value, "status": ...}}."""
    specs = {}
    for name, job in values["jobs"].items():
        job = dict(job)
        job["status"] = "paused" if job.pop("paused") else "active"
        specs[name] = {field: schedules.stored(field, value) for field, value in job.items()}
    return specs


def declared_sections(values):
    """The validated set's calendars and windows as calendars.declarations specs, as apply_set takes them."""
    return {
        "calendars": {name: declarations.calendar_spec(body) for name, body in values["calendars"].items()},
        "windows": {name: declarations.window_spec(body) for name, body in values["windows"].items()},
    }


def jsonable(value):
    """A TOML document's values as JSON's (instants as ISO 8601), so a file reads like a body."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return value


def error(section, name, path, message):
    """A problem `errors` entry for `name` of `section` (a name may hold dots: the pointer keeps it one step)."""
    field = f"{section}.{name}" + (f".{path}" if path else "")
    steps = [section, name.replace("~", "~0").replace("/", "~1"), *(path.split(".") if path else [])]
    return {"field": field, "pointer": "#/" + "/".join(steps), "detail": message}


def body_errors(detail):
    """The set serializer's errors as problem `errors`: a declaration's own under <section>.<name>.<path>."""
    found = []
    for key, value in detail.items():
        if key in SECTIONS and isinstance(value, dict):
            for name, inner in value.items():
                found += [error(key, name, e["field"], e["detail"]) for e in field_errors(inner)]
        else:
            found += field_errors({key: value})
    return found


def set_errors(exc):
    """jobs.schedules.SetInvalid as problem `errors`, every section's."""
    return [error(*problem) for problem in exc.every()]


def refused(errors):
    """The 400 problem for `errors`: invalid-schedule when a schedule is at fault."""
    scheduled = any(e["field"].startswith("jobs.") and ".schedule." in e["field"] for e in errors)
    return invalid(errors, "invalid-schedule" if scheduled else "validation-error")


class FieldChangeSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="Its path in a declaration, e.g. schedule.cron.")
    before = serializers.JSONField(allow_null=True, help_text="Now; null for a new job.")
    after = serializers.JSONField(allow_null=True, help_text="As declared.")
    reverts_portal_edit = serializers.BooleanField(help_text="The job was edited outside the set since its last apply.")


class ChangeSerializer(serializers.Serializer):
    job = serializers.CharField()
    action = serializers.ChoiceField(schedules.ACTIONS)
    reason = serializers.CharField(allow_blank=True)
    fields = FieldChangeSerializer(many=True)


class PlanSummarySerializer(serializers.Serializer):
    create = serializers.IntegerField()
    change = serializers.IntegerField()
    adopt = serializers.IntegerField()
    pause = serializers.IntegerField()
    resume = serializers.IntegerField()
    delete = serializers.IntegerField()
    unchanged = serializers.IntegerField()


class DeclarationChangeSerializer(serializers.Serializer):
    name = serializers.CharField()
    action = serializers.ChoiceField(declarations.ACTIONS)
    reason = serializers.CharField(allow_blank=True)
    fields = FieldChangeSerializer(many=True)


class DeclarationSummarySerializer(serializers.Serializer):
    create = serializers.IntegerField()
    change = serializers.IntegerField()
    adopt = serializers.IntegerField()
    disable = serializers.IntegerField()
    delete = serializers.IntegerField()
    unchanged = serializers.IntegerField()


class SectionPlanSerializer(serializers.Serializer):
    summary = DeclarationSummarySerializer()
    changes = DeclarationChangeSerializer(many=True)
    unchanged = serializers.ListField(child=serializers.CharField(), help_text="Names already as declared.")


class PlanSerializer(serializers.Serializer):
    source = serializers.CharField()
    prune = serializers.BooleanField()
    applied = serializers.BooleanField(help_text="False for a dry run: nothing was written.")
    summary = PlanSummarySerializer()
    changes = ChangeSerializer(many=True)
    unchanged = serializers.ListField(child=serializers.CharField(), help_text="Declared jobs already as declared.")
    calendars = SectionPlanSerializer(help_text="The set's calendars: created, changed, adopted or deleted (prune).")
    windows = SectionPlanSerializer(
        help_text="The set's windows: created, changed, adopted, disabled (no longer declared) or deleted (prune)."
    )


def flag(request, name):
    raw = request.query_params.get(name, "0")
    if raw not in ("0", "1", "true", "false"):
        raise invalid([{"field": name, "pointer": "#", "detail": "must be 1 or 0 (true or false)"}])
    return raw in ("1", "true")


FLAGS = [
    OpenApiParameter("dry_run", {"type": "string", "enum": ["0", "1", "true", "false"]}, description="1: only plan."),
    OpenApiParameter(
        "prune", {"type": "string", "enum": ["0", "1", "true", "false"]}, description="1: delete undeclared jobs."
    ),
]


SET_IF_MATCH = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    description="The set's ETag from your last plan or apply: applied only if nobody changed the set since "
    "(412 precondition-failed otherwise).",
)


class ScheduleSetView(TeamEndpoint):
    def role_needed(self, request):
        """Applying needs an owner; a dry run only plans, so a viewer's token may ask (a CI check of a change)."""
        if request.method == "PUT" and request.query_params.get("dry_run") in ("1", "true"):
            return roles.VIEW
        return super().role_needed(request)

    @extend_schema(
        operation_id="schedules_put",
        summary="Apply the tenant's declared set of jobs, calendars and windows (the whole set); answers the plan",
        parameters=[*FLAGS, SET_IF_MATCH],
        request=ScheduleSetSerializer,
        responses={200: PlanSerializer, **problem_responses(400, 412, 413, 415, 429)},
    )
    def put(self, request):
        dry_run, prune = flag(request, "dry_run"), flag(request, "prune")
        serializer = ScheduleSetSerializer(data=request.data)
        if not serializer.is_valid():
            raise refused(body_errors(serializer.errors))
        values = serializer.validated_data
        specs, sections, source = declared_specs(values), declared_sections(values), values["source"]
        tenant = Tenant.objects.get(pk=request.auth.tenant_id)
        if_match = if_match_tags(request, r'"[A-Za-z0-9-]{1,64}"', '"set-3f9a..."')
        for attempt in range(2):
            try:
                if dry_run:
                    check_tag(tenant, source, if_match)
                    plan = plan_set(tenant, specs, **sections, source=source, prune=prune)
                else:
                    plan = apply_set(
                        tenant, specs, **sections, source=source, prune=prune, actor=self.actor, if_match=if_match
                    )
                break
            except schedules.SetInvalid as exc:
                raise refused(set_errors(exc)) from exc
            except IntegrityError:
                if (
                    attempt
                ):  # a concurrent apply created one of the jobs or calendars first; the second pass plans from it
                    raise
        headers = {"ETag": set_tag(tenant, source)}
        return Response(PlanSerializer({**plan.as_json(), "applied": not dry_run}).data, headers=headers)
