"""Schedules as code: a team's declared set of jobs, the plan that brings its tenant there, and drift.

A *set* is what a team declares in a TOML file (docs/schedules-as-code.md):
its name (`source`, "code" unless stated) and its jobs, each written as the
body of PUT /v1/jobs/{name} plus `paused`. The surfaces (manage.py
apply_schedules, PUT /v1/schedules) check the shapes and hand over one
*spec* per job: every declarable field by model field name, defaults filled
in, `jitter_seconds` None when not stated (jobs.jitter decides), `status`
active or paused.

`plan()` compares the specs with the tenant's jobs and says, like a
Terraform plan, what an apply would do: create, change (field by field,
marking the portal edits it reverts), adopt (take over a job made outside
the set), pause, resume, and for jobs of the set no longer declared, pause
(or delete, with `prune`). It builds every job it would write and validates
it (jobs.validation, through full_clean) first: any problem raises
SetInvalid listing all of them, so one bad job writes nothing.
runs.schedule_sets writes a plan, through save_definition and runs.controls.
A set may also declare calendars and windows: calendars/declarations.py
plans those (jobs never imports calendars), and its plans ride in
`Plan.sections`, shown by `as_text` and `as_json` after the jobs'.

A job of a set is marked (`managed_by` = the set's name) and keeps the spec
as applied (`applied_spec`). It may still be edited in the portal or the
API; `drift(job)` then lists each field where it differs from that spec
(code vs portal) until the next apply reverts the edits, or `adopt` makes
its current definition the applied one and `declaration(job)` prints the
TOML to paste into the set.
"""

import copy
import dataclasses
import datetime as dt
import hashlib
import json

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs import audit, jitter
from jobs.choices import Priority, Status
from jobs.definitions import SCHEDULE_FIELDS
from jobs.models import JobDefinition

DEFAULT_SOURCE = "code"
# Model field -> its path in a declaration (the same as in the API's job body), in the order shown.
FIELDS = {
    "schedule_kind": "schedule.kind",
    "cron_expr": "schedule.cron",
    "run_at": "schedule.at",
    "every_seconds": "schedule.every_seconds",
    "start_at": "schedule.start_at",
    "end_at": "schedule.end_at",
    "remaining_runs": "schedule.remaining_runs",
    "time_zone": "schedule.time_zone",
    "jitter_seconds": "schedule.jitter_seconds",
    "missed_run_policy": "schedule.missed_run_policy",
    "starting_deadline_seconds": "schedule.starting_deadline_seconds",
    "target_kind": "target.kind",
    "target_ref": "target.ref",
    "http_method": "target.method",
    "http_headers": "target.headers",
    "http_bearer_secret": "target.bearer_secret",
    "queue": "queue",
    "priority": "priority",
    "timeout_seconds": "timeout_seconds",
    "max_attempts": "retry.max_attempts",
    "retry_base_seconds": "retry.base_seconds",
    "retry_max_seconds": "retry.max_seconds",
    "concurrency": "concurrency",
    "concurrency_group": "concurrency_group",
    "concurrency_group_limit": "concurrency_group_limit",
    "overlap_policy": "overlap_policy",
    "payload": "payload",
    "owner_email": "owner.email",
    "owner_webhook_url": "owner.webhook_url",
    "notify_lateness_p99_seconds": "owner.lateness_p99_seconds",
    "notify_skip_streak": "owner.skip_streak",
    "status": "paused",
}
DEFINITION_FIELDS = [f for f in FIELDS if f != "status"]
# Left out of a declaration when they hold these (every job but an http one does): the set's file stays short.
DECLARED_ONLY_WHEN_SET = {"http_method": "POST", "http_headers": {}}
INSTANTS = ("run_at", "start_at", "end_at")
# A count the scheduler spends (runs.materialize): the plan and drift compare the declared number with the
# one the set last applied, not with the live count, so applying the same file again leaves it alone.
COUNTDOWN = "remaining_runs"
# The order an apply writes in: definitions first, then pauses and resumes, deletes last.
ACTIONS = ("create", "change", "adopt", "pause", "resume", "delete")
SYMBOLS = {"create": "+", "change": "~", "adopt": "~", "pause": "=", "resume": ">", "delete": "-"}


class SetInvalid(Exception):
    """The set cannot be applied: every problem found, each (name, body path or "", message).

    `errors` are the jobs'; `sections` the other sections' ({"windows": [...]}, calendars/declarations.py).
    """

    def __init__(self, errors, sections=None):
        self.errors = errors
        self.sections = {section: found for section, found in (sections or {}).items() if found}
        super().__init__("; ".join(f"{s}.{n}{'.' + p if p else ''}: {m}" for s, n, p, m in self.every()))

    def every(self):
        """(section, name, body path, message) of every problem, the jobs' first."""
        yield from (("jobs", *problem) for problem in self.errors)
        for section, found in self.sections.items():
            yield from ((section, *problem) for problem in found)

    @classmethod
    def joined(cls, found):
        """One SetInvalid of the problems of several (`found`: SetInvalid or None); None when there are none."""
        found = [exc for exc in found if exc is not None]
        if not found:
            return None
        sections = {}
        for exc in found:
            for section, problems in exc.sections.items():
                sections.setdefault(section, []).extend(problems)
        return cls([p for exc in found for p in exc.errors], sections=sections)


class SetChanged(Exception):
    """The set is no longer the version the caller read (its `If-Match`): someone applied or edited it since."""

    def __init__(self, source, current):
        self.source, self.current = source, current
        super().__init__(
            f"Set {source} changed since you read it (it is at {current} now): plan again, then apply with that ETag."
        )


def set_tag(tenant, source, extra=()):
    """The entity tag of a tenant's set: a digest of each of its jobs' id, version and status, and of `extra`.

    It moves whenever an apply or a portal edit changes a job of the set, a
    job joins or leaves it, or one is paused, resumed or deleted. `extra`:
    rows (JSON) of the set's other sections (runs.schedule_sets passes its
    calendars' and windows'); a set without them keeps the tag it had.
    """
    rows = JobDefinition.objects.filter(tenant=tenant, managed_by=source).order_by("name")
    described = json.dumps(list(rows.values_list("name", "pk", "version", "status")) + list(extra))
    return f'"set-{hashlib.sha256(described.encode()).hexdigest()[:20]}"'


def check_tag(tenant, source, tags, extra=()):
    """Raise SetChanged unless the set's tag is one of `tags` (`*` matches any set), or no tags were given."""
    if tags is None or "*" in tags:
        return
    current = set_tag(tenant, source, extra)
    if current not in tags:
        raise SetChanged(source, current)


@dataclasses.dataclass
class FieldChange:
    field: str  # body path, e.g. schedule.cron
    before: object  # None for a new job
    after: object
    reverts_portal_edit: bool = False  # the job was edited outside the set since the last apply


@dataclasses.dataclass
class Change:
    job: str
    action: str  # one of ACTIONS
    reason: str = ""
    fields: list = dataclasses.field(default_factory=list)  # [FieldChange]
    definition: JobDefinition | None = dataclasses.field(
        default=None, repr=False
    )  # what to save (create, change, adopt)
    applied: dict | None = dataclasses.field(default=None, repr=False)  # the spec recorded as applied


@dataclasses.dataclass
class Plan:
    tenant: object
    source: str
    prune: bool
    changes: list = dataclasses.field(default_factory=list)
    unchanged: list = dataclasses.field(default_factory=list)  # names of declared jobs already as declared
    # The spec as applied of each declared job, recorded by the apply even when nothing else moves.
    applied: dict = dataclasses.field(default_factory=dict, repr=False)
    # The set's other sections by name ("calendars", "windows": calendars.declarations.Section), each with
    # `changes`, `as_json()`, `change_lines()` and `summary_line()`; attached by runs.schedule_sets.
    sections: dict = dataclasses.field(default_factory=dict)

    @property
    def changed(self):
        """True when applying it writes something, in any section."""
        return bool(self.changes) or any(section.changes for section in self.sections.values())

    def counts(self):
        counted = {action: 0 for action in ACTIONS}
        for change in self.changes:
            counted[change.action] += 1
        return {**counted, "unchanged": len(self.unchanged)}

    def in_order(self):
        return sorted(self.changes, key=lambda c: (ACTIONS.index(c.action), c.job))

    def as_text(self, *, declared):
        """The plan in the manner of a Terraform plan, for people (manage.py apply_schedules)."""
        head = f"Plan for tenant {self.tenant.name}, set '{self.source}' ({declared} declared job(s)):"
        if not self.changed:
            return f"{head}\n\nNo changes: the tenant's jobs, calendars and windows are as declared.\n"
        lines = [head, ""]
        for change in self.in_order():
            reason = f" ({change.reason})" if change.reason else ""
            lines.append(f"  {SYMBOLS[change.action]} {change.action} {change.job}{reason}")
            for f in change.fields:
                if change.action == "create":
                    if f.after is not None:
                        lines.append(f"      {f.field}: {json.dumps(f.after)}")
                    continue
                edit = "  (reverts an edit made outside the set)" if f.reverts_portal_edit else ""
                lines.append(f"      {f.field}: {json.dumps(f.before)} -> {json.dumps(f.after)}{edit}")
        counts = self.counts()
        summary = ", ".join(f"{counts[a]} to {a}" for a in ACTIONS)
        for section in self.sections.values():
            lines += section.change_lines()
        lines += ["", f"Plan: {summary}; {counts['unchanged']} unchanged."]
        lines += [section.summary_line() for section in self.sections.values() if section.summary_line()]
        return "\n".join(lines) + "\n"

    def as_json(self):
        """The plan as the API answers it and the audit log keeps it."""
        return {
            "source": self.source,
            "prune": self.prune,
            "summary": self.counts(),
            "changes": [
                {
                    "job": c.job,
                    "action": c.action,
                    "reason": c.reason,
                    "fields": [dataclasses.asdict(f) for f in c.fields],
                }
                for c in self.in_order()
            ],
            "unchanged": sorted(self.unchanged),
            **{name: section.as_json() for name, section in self.sections.items()},
        }


def stored(field, value):
    """A field's value as a spec keeps it (JSON): instants as ISO 8601 in UTC."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    return copy.deepcopy(value)


def shown(field, value):
    """A spec's value as a declaration writes it: priorities by name, empty text as null, paused as a bool."""
    if field == "priority" and value is not None:
        return Priority(value).label
    if field == "status":
        return {Status.ACTIVE: False, Status.PAUSED: True}.get(value, value)  # a deleted job shows "cancelled"
    if value == "" and field in ("cron_expr", "target_ref", "http_bearer_secret", "owner_email", "owner_webhook_url"):
        return None
    return value


def spec_of(job):
    """The job's declarable fields as a spec (JSON values), its status included."""
    return {field: stored(field, getattr(job, field)) for field in FIELDS}


def plan(tenant, specs, *, source=DEFAULT_SOURCE, prune=False, now=None, jobs=None):
    """What applying `specs` ({name: spec}) as the set `source` of `tenant` would do. Raises SetInvalid.

    `jobs`: the tenant's jobs ({name: JobDefinition}), read here when None
    (runs.schedule_sets passes them locked). Nothing is written.
    """
    now = now or timezone.now()
    jobs = jobs if jobs is not None else {j.name: j for j in JobDefinition.objects.filter(tenant=tenant)}
    result, errors = Plan(tenant=tenant, source=source, prune=prune), []
    for name in sorted(specs):
        try:
            _plan_job(result, tenant, name, specs[name], jobs.get(name), now)
        except ValidationError as exc:
            errors += _problems(name, exc)
    if errors:
        raise SetInvalid(errors)
    for job in sorted(jobs.values(), key=lambda j: j.name):
        if job.managed_by == source and job.name not in specs and job.status != Status.CANCELLED:
            _plan_undeclared(result, job)
    return result


def _problems(name, exc):
    """[(name, body path, message)] of a ValidationError, by field or for the whole job."""
    by_field = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
    return [(name, FIELDS.get(f, "" if f == "__all__" else f), m) for f, messages in by_field.items() for m in messages]


def _plan_job(result, tenant, name, spec, job, now):
    """Add what one declared job needs to `result`; raises ValidationError naming the fields at fault."""
    if job is not None and job.managed_by not in ("", result.source) and job.status != Status.CANCELLED:
        raise ValidationError(
            f"job {name} belongs to the set '{job.managed_by}': remove it there first (or delete it) to declare it here"
        )
    revived = job is not None and job.status == Status.CANCELLED
    fresh = job is None or revived
    definition = copy.copy(job) if job is not None else JobDefinition(tenant=tenant, name=name)
    wanted = spec.get("status", Status.ACTIVE)
    for field in DEFINITION_FIELDS:
        if field != "jitter_seconds":
            setattr(definition, field, _loaded(field, spec[field]))
    counting = _counting(job, result.source, spec)
    if counting:
        definition.remaining_runs = job.remaining_runs  # declared as last applied: the live count goes on
    jitter.state(definition, spec.get("jitter_seconds"))
    rescheduled = fresh or any(getattr(definition, f) != getattr(job, f) for f in SCHEDULE_FIELDS)
    jitter.settle(definition, rescheduled=rescheduled, now=now)
    if fresh:
        definition.status = wanted
    definition.full_clean(validate_unique=False, validate_constraints=False)  # as save_definition will
    applied = {**spec_of(definition), "status": wanted, COUNTDOWN: spec[COUNTDOWN]}
    result.applied[name] = applied
    before = spec_of(job) if job is not None and not revived else {}
    fields = [
        FieldChange(
            FIELDS[f],
            shown(f, before.get(f)) if before else None,
            shown(f, applied[f]),
            _reverts(job, f, before),
        )
        for f in DEFINITION_FIELDS
        if (not before or before[f] != applied[f]) and not (counting and f == COUNTDOWN)
    ]
    moved = False
    if fresh:
        reason = "revives the deleted job" if revived else ""
        result.changes.append(Change(name, "create", reason, fields, definition, applied))
        return
    if fields or job.managed_by != result.source:
        action = "adopt" if job.managed_by != result.source else "change"
        reason = "made outside the set: the set owns it from now on" if action == "adopt" else ""
        result.changes.append(Change(name, action, reason, fields, definition, applied))
        moved = True
    if job.status != wanted:
        was = _reverts(job, "status", before)
        why = "declared paused" if wanted == Status.PAUSED else "declared active"
        field = FieldChange("paused", shown("status", job.status), shown("status", wanted), was)
        result.changes.append(Change(name, "pause" if wanted == Status.PAUSED else "resume", why, [field]))
        moved = True
    if not moved:
        result.unchanged.append(name)


def _plan_undeclared(result, job):
    if result.prune:
        result.changes.append(Change(job.name, "delete", "no longer declared (prune)"))
    elif job.status == Status.ACTIVE:
        reason = "no longer declared: paused until declared again; a prune deletes it"
        result.changes.append(Change(job.name, "pause", reason, [FieldChange("paused", False, True)]))


def _counting(job, source, spec):
    """True when the set declares the remaining_runs it last applied to `job`: the count is the scheduler's now."""
    applied = (job.applied_spec or {}) if job is not None and job.managed_by == source else {}
    return COUNTDOWN in applied and applied[COUNTDOWN] == spec[COUNTDOWN] and job.status != Status.CANCELLED


def _reverts(job, field, before):
    """True when the job's current value of `field` is not what the set last applied: a portal or API edit."""
    applied = (job.applied_spec or {}) if job is not None and job.managed_by else None
    return bool(applied) and field in applied and applied[field] != before.get(field)


def _loaded(field, value):
    """A spec's JSON value as the model field takes it."""
    if field in INSTANTS and isinstance(value, str):
        return parse_datetime(value)
    return copy.deepcopy(value)


# --- drift and adoption -------------------------------------------------------


@dataclasses.dataclass
class Drift:
    field: str  # body path
    code: object  # as the set last applied it
    portal: object  # as it is now


def drift(job):
    """[Drift] of a job of a set: each field edited outside the set since its last apply; [] for other jobs."""
    if not job.managed_by or job.applied_spec is None:
        return []
    now = spec_of(job)
    return [
        Drift(FIELDS[f], shown(f, job.applied_spec[f]), shown(f, now[f]))
        for f in FIELDS
        if f in job.applied_spec and job.applied_spec[f] != now[f] and f != COUNTDOWN  # it counts down by itself
    ]


def drifted_ids(queryset):
    """The pks of the jobs of `queryset` owned by a set that drifted from it (read in Python: specs are JSON)."""
    return [job.pk for job in queryset.exclude(managed_by="").select_related("tenant") if drift(job)]


def adopt(jobs, *, actor, note=""):
    """Make each job's current definition the one its set applied: its drift is accepted. Returns those adopted.

    Audited with the drift each accepted; the set's file should then get
    `declaration(job)`, or its next apply reverts the edits after all.
    """
    adopted = []
    for job in jobs:
        accepted = drift(job)
        if not accepted:
            continue
        JobDefinition.objects.filter(pk=job.pk, managed_by=job.managed_by).update(applied_spec=spec_of(job))
        detail = {"source": job.managed_by, "accepted": [dataclasses.asdict(d) for d in accepted]}
        audit.record(actor, "adopt", job, detail=detail, note=note)
        adopted.append(job)
    return adopted


def declaration(job):
    """The job as a TOML table to paste into its set's file: every field that is not null.

    A jitter Duetime chose is left out, so Duetime keeps choosing it. TOML
    has no null: a payload holding one cannot be written, and says so.
    """
    spec = spec_of(job)
    entries = {}  # key or group -> value or [(key, value)], in the order of FIELDS
    for field, path in FIELDS.items():
        value = shown(field, spec[field])
        if field == "status":
            value = True if job.status == Status.PAUSED else None  # `paused = true`, or nothing
        if value is None or field == "jitter_seconds" and job.jitter_is_default:
            continue
        if field in DECLARED_ONLY_WHEN_SET and value == DECLARED_ONLY_WHEN_SET[field]:
            continue
        group, _, key = path.rpartition(".")
        if group:
            entries.setdefault(group, []).append((key, value))
        else:
            entries[key] = value
    lines = [f"[jobs.{_toml(job.name)}]"]
    for key, value in entries.items():
        if isinstance(value, list) and key in ("schedule", "target", "retry", "owner"):
            value = "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value) + " }"
            lines.append(f"{key} = {value}")
        else:
            lines.append(f"{key} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def _toml(value):
    """A JSON value as TOML: strings (JSON's escapes are TOML's), numbers, booleans, arrays, inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise ValueError("TOML has no null: declare this payload through PUT /v1/schedules (JSON) instead")
