"""Schedules as code for maintenance windows and business-day calendars: their declarations, plan and writes.

A declared set (jobs/schedules.py, docs/schedules-as-code.md) holds, beside
its jobs, `calendars` and `windows`, each by name: a calendar as the body of
PUT /v1/calendars/{name}, a window as the body of POST /v1/windows without
its `name`. The surfaces hand over one *spec* per declaration: every field of
edits.CALENDAR_BODY or edits.WINDOW_BODY by model field name, as JSON values (a
window's job and calendar by name).

`plan()` compares the specs with the tenant's calendars and windows, in the
manner of jobs.schedules.plan: create, change (field by field), adopt (take
over one made outside any set), and for those of the set no longer declared,
delete with `prune`; without it a window is disabled and a calendar kept. It
builds and checks (the models' clean) everything it would save, and raises
jobs.schedules.SetInvalid naming the section, the name and the field of every
problem, so nothing is written. A window may name a job or a calendar
declared in the same set: it holds the planned object, saved before it.

`save()` and `delete()` write a plan through calendars.edits, as the portal
and /v1/windows, /v1/calendars do (validated, audited); runs.schedule_sets
calls them in the order the references need: calendars, jobs, windows, then
deleted calendars last.
"""

import copy
import dataclasses
import json

from django.core.exceptions import ValidationError
from django.utils.dateparse import parse_datetime

from calendars import edits, ical
from calendars.models import Calendar, Window
from jobs import cron
from jobs.schedules import FieldChange, SetInvalid, stored

# The one field map of each (model field -> body key) is calendars.edits': the API's bodies are the declarations.
CALENDAR_FIELDS, WINDOW_FIELDS = edits.CALENDAR_BODY, edits.WINDOW_BODY
REFERENCES = ("job", "calendar")  # named in a declaration, held as objects by the model
INSTANTS = ("starts_at", "ends_at")
# The order an apply writes in (runs.schedule_sets): saves first, deletes last.
ACTIONS = ("create", "change", "adopt", "disable", "delete")
SAVES = ("create", "change", "adopt", "disable")
SYMBOLS = {"create": "+", "change": "~", "adopt": "~", "disable": "=", "delete": "-"}


def calendar_spec(values):
    """A calendar's body (validated) as a spec: weekend days and holidays in the order save_calendar keeps them.

    `ical` (a declaration's own): an iCalendar file's text, whose events the
    plan adds to the holidays (calendars.ical, as the API's import does).
    """
    return {
        "time_zone": values["time_zone"],
        "weekend_days": sorted(set(values["weekend_days"])),
        "holidays": edits.distinct([dict(h) for h in values["holidays"]]),
        "ical": values.get("ical", ""),
    }


def window_spec(values):
    """A window's body (validated, keyed as WINDOW_FIELDS says) as a spec: instants in UTC, ISO 8601."""
    return {field: stored(field, values[key]) for field, key in WINDOW_FIELDS.items()}


@dataclasses.dataclass
class Edit:
    name: str
    action: str  # one of ACTIONS
    reason: str = ""
    fields: list = dataclasses.field(default_factory=list)  # [jobs.schedules.FieldChange]
    target: object = dataclasses.field(default=None, repr=False)  # the Calendar or Window to save or delete


@dataclasses.dataclass
class Section:
    """The plan of one section of a set ("calendars" or "windows"); jobs.schedules.Plan shows it in `sections`."""

    section: str
    changes: list = dataclasses.field(default_factory=list)  # [Edit]
    unchanged: list = dataclasses.field(default_factory=list)  # names already as declared

    def counts(self):
        counted = {action: 0 for action in ACTIONS}
        for change in self.changes:
            counted[change.action] += 1
        return {**counted, "unchanged": len(self.unchanged)}

    def in_order(self, actions=ACTIONS):
        chosen = [c for c in self.changes if c.action in actions]
        return sorted(chosen, key=lambda c: (ACTIONS.index(c.action), c.name))

    def as_json(self):
        return {
            "summary": self.counts(),
            "changes": [
                {
                    "name": c.name,
                    "action": c.action,
                    "reason": c.reason,
                    "fields": [dataclasses.asdict(f) for f in c.fields],
                }
                for c in self.in_order()
            ],
            "unchanged": sorted(self.unchanged),
        }

    def change_lines(self):
        """The section's changes for the text plan (manage.py apply_schedules), field by field."""
        lines = []
        for change in self.in_order():
            reason = f" ({change.reason})" if change.reason else ""
            lines.append(f"  {SYMBOLS[change.action]} {change.action} {self.section[:-1]} {change.name}{reason}")
            for f in change.fields:
                if change.action == "create" and f.after is None:
                    continue
                before = "" if change.action == "create" else f"{json.dumps(f.before)} -> "
                lines.append(f"      {f.field}: {before}{json.dumps(f.after)}")
        return lines

    def summary_line(self):
        """`Windows: 1 to create, ...; 2 unchanged.`, or "" when the section declares and changes nothing."""
        if not self.changes and not self.unchanged:
            return ""
        counts = self.counts()
        summary = ", ".join(f"{counts[a]} to {a}" for a in ACTIONS)
        return f"{self.section.capitalize()}: {summary}; {counts['unchanged']} unchanged."


def tag_rows(tenant, source):
    """What the set's entity tag digests of its calendars and windows: each one's name, id and last save."""
    rows = []
    for kind, model in (("calendar", Calendar), ("window", Window)):
        found = model.objects.filter(tenant=tenant, managed_by=source).order_by("name", "pk")
        rows += [[kind, name, pk, at.isoformat()] for name, pk, at in found.values_list("name", "pk", "updated_at")]
    return rows


def plan(tenant, calendars, windows, *, source, prune, jobs):
    """The calendar and window Sections of applying these specs ({name: spec}) as the set `source`.

    `jobs`: {name: JobDefinition} a window may name (the set's declared jobs
    as planned, the tenant's other live jobs). The tenant's calendars and
    windows are read here (runs.schedule_sets has locked them). Raises
    SetInvalid with every problem; writes nothing.
    """
    problems = {"calendars": [], "windows": []}
    on_hand = {c.name: c for c in Calendar.objects.filter(tenant=tenant)}
    calendar_plan = Section("calendars")
    for name in sorted(calendars):
        problems["calendars"] += _plan_calendar(calendar_plan, tenant, name, calendars[name], on_hand.get(name), source)
    for current in sorted(on_hand.values(), key=lambda c: c.name):
        if current.managed_by == source and current.name not in calendars and prune:
            reason = "no longer declared (prune): the windows that use it go with it"
            calendar_plan.changes.append(Edit(current.name, "delete", reason, target=current))
    deleted = {c.name for c in calendar_plan.changes if c.action == "delete"}
    named = {n: c for n, c in on_hand.items() if n not in deleted}
    named.update({c.name: c.target for c in calendar_plan.changes if c.action != "delete"})
    # A declared calendar with problems of its own is still declared: its windows are not told it is missing.
    named.update({n: on_hand.get(n) or Calendar(tenant=tenant, name=n) for n in calendars if n not in named})
    lookups = {"job": jobs, "calendar": named}
    names = {"job": {j.pk: n for n, j in jobs.items() if j.pk}, "calendar": {c.pk: n for n, c in on_hand.items()}}
    window_plan, windows_problems = _plan_windows(tenant, windows, source, prune, lookups, names)
    problems["windows"] += windows_problems
    if any(problems.values()):
        raise SetInvalid([], sections=problems)
    return calendar_plan, window_plan


def _plan_calendar(section, tenant, name, spec, current, source):
    """Add what one declared calendar needs to `section`; returns its problems [(name, path, message)]."""
    if current is not None and current.managed_by not in ("", source):
        message = f"calendar {name} belongs to the set '{current.managed_by}': remove it there first to declare it here"
        return [(name, "", message)]
    target = copy.copy(current) if current is not None else Calendar(tenant=tenant, name=name)
    try:
        spec = {**spec, "holidays": _with_ical(spec)}
    except ical.ICalError as exc:
        return [(name, "ical", str(exc))]
    for field in CALENDAR_FIELDS:
        setattr(target, field, copy.deepcopy(spec[field]))
    try:
        target.full_clean(validate_unique=False, validate_constraints=False)  # as save_calendar will
    except ValidationError as exc:
        return _problems(name, exc, CALENDAR_FIELDS)
    before = {f: getattr(current, f) for f in CALENDAR_FIELDS} if current is not None else {}
    fields = [
        FieldChange(key, _measured(f, before[f]) if before else None, _measured(f, spec[f]))
        for f, key in CALENDAR_FIELDS.items()
        if not before or before[f] != spec[f]
    ]
    _add(section, name, current, source, fields, target)
    return []


def _with_ical(spec):
    """The declared holidays and those of the declared iCalendar text, each once. Raises ical.ICalError."""
    if not spec.get("ical"):
        return spec["holidays"]
    try:
        found = ical.holidays(spec["ical"], spec["time_zone"])
    except cron.ZoneError:
        return spec["holidays"]  # the calendar's clean() names its time_zone
    return edits.distinct(spec["holidays"] + edits.valid_holidays(found))


def _measured(field, value):
    """Holidays are shown by their number, as the audit log shows them: the list is long."""
    return len(value) if field == "holidays" else value


def _plan_windows(tenant, specs, source, prune, lookups, names):
    section, problems = Section("windows"), []
    ours, free = {}, {}
    for window in Window.objects.filter(tenant=tenant).order_by("pk"):
        if window.managed_by == source:
            ours.setdefault(window.name, window)
        elif not window.managed_by:
            free.setdefault(window.name, []).append(window)
    for name in sorted(specs):
        current = ours.get(name)
        if current is None and len(free.get(name, ())) > 1:
            message = f"{len(free[name])} windows made outside any set are named {name!r}: rename all but one"
            problems.append((name, "", message))
            continue
        current = current or (free.get(name) or [None])[0]
        problems += _plan_window(section, tenant, name, specs[name], current, source, lookups, names)
    for name, current in sorted(ours.items()):
        if name in specs:
            continue
        if prune:
            section.changes.append(Edit(name, "delete", "no longer declared (prune)", target=current))
        elif current.enabled:
            target = copy.copy(current)
            target.enabled = False
            reason = "no longer declared: disabled until declared again; a prune deletes it"
            section.changes.append(Edit(name, "disable", reason, [FieldChange("enabled", True, False)], target))
    return section, problems


def _plan_window(section, tenant, name, spec, current, source, lookups, names):
    """Add what one declared window needs to `section`; returns its problems [(name, path, message)]."""
    target = copy.copy(current) if current is not None else Window(tenant=tenant, name=name)
    problems = []
    for field, key in WINDOW_FIELDS.items():
        value = spec[field]
        if field in REFERENCES:
            found = lookups[field].get(value) if value is not None else None
            if value is not None and found is None:
                problems.append((name, key, f"no {field} named {value!r} in this tenant (declare it in the set)"))
            setattr(target, field, found)
        else:
            setattr(target, field, parse_datetime(value) if field in INSTANTS and value else value)
    if problems:
        return problems
    try:
        target.full_clean(validate_unique=False, validate_constraints=False)  # as save_window will, ids aside
    except ValidationError as exc:
        return _problems(name, exc, WINDOW_FIELDS)
    before = _window_spec_of(current, names) if current is not None else {}
    fields = [
        FieldChange(key, before[f] if before else None, spec[f])
        for f, key in WINDOW_FIELDS.items()
        if not before or before[f] != spec[f]
    ]
    _add(section, name, current, source, fields, target)
    return []


def _window_spec_of(window, names):
    """A saved window as a spec, its job and calendar by name."""
    spec = {}
    for field in WINDOW_FIELDS:
        if field in REFERENCES:
            pk = getattr(window, f"{field}_id")
            spec[field] = names[field].get(pk, pk) if pk is not None else None
        else:
            spec[field] = stored(field, getattr(window, field))
    return spec


def _add(section, name, current, source, fields, target):
    if current is None:
        section.changes.append(Edit(name, "create", "", fields, target))
    elif current.managed_by != source:
        reason = "made outside the set: the set owns it from now on"
        section.changes.append(Edit(name, "adopt", reason, fields, target))
    elif fields:
        section.changes.append(Edit(name, "change", "", fields, target))
    else:
        section.unchanged.append(name)


def _problems(name, exc, field_map):
    """[(name, body key, message)] of a model's ValidationError."""
    by_field = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
    return [
        (name, field_map.get(f, "" if f == "__all__" else f), m) for f, messages in by_field.items() for m in messages
    ]


def save(section, *, source, actor, note):
    """Create, change, adopt and disable what `section` plans, through calendars.edits (validated, audited).

    A window's job and calendar are saved by then: runs.schedule_sets saves
    calendars, then jobs, then windows. Raises SetInvalid if the models refuse
    what the plan checked (the caller's transaction then writes nothing).
    """
    write = edits.save_calendar if section.section == "calendars" else edits.save_window
    for change in section.in_order(SAVES):
        change.target.managed_by = source
        if section.section == "windows":
            for field in REFERENCES:  # the planned job or calendar has its id now: the window takes it
                setattr(change.target, field, getattr(change.target, field))
        try:
            write(change.target, actor=actor, note=note)
        except ValidationError as exc:
            fields = CALENDAR_FIELDS if section.section == "calendars" else WINDOW_FIELDS
            raise SetInvalid([], sections={section.section: _problems(change.name, exc, fields)}) from exc


def delete(section, *, actor, note):
    """Delete what `section` plans to (a prune), through calendars.edits: audited, a calendar with its windows."""
    doomed = [c.target.pk for c in section.in_order(("delete",))]
    if not doomed:
        return
    if section.section == "calendars":
        edits.delete_calendars(Calendar.objects.filter(pk__in=doomed), actor=actor, note=note)
    else:
        edits.delete_windows(Window.objects.filter(pk__in=doomed), actor=actor, note=note)
