"""Applying a declared set of schedules (jobs/schedules.py) to a tenant, all or nothing.

A set declares jobs, and may declare business-day calendars and maintenance
windows (calendars/declarations.py). `plan_set` plans all three: the jobs
(jobs.schedules.plan), then the calendars and the windows, which may name a
job or a calendar declared in the same set; it raises one SetInvalid naming
every problem of every section before anything is written.

`apply_set` locks the tenant's jobs, calendars and windows, plans again from
what they are now, then writes the plan through the same doors as everyone:
calendars.edits for calendars (first: the jobs' windows name them), then
jobs.definitions.save_definition for the jobs' creates, changes and
adoptions (each audited with its diff), runs.controls for their pauses,
resumes and deletes (audited, and a resume records what it passed over),
calendars.edits for the windows, and last the calendars a prune deletes. It
ends with one `apply_schedules` audit entry on the tenant holding the whole
plan. Applying the same set again finds nothing to do: its plan is empty.

Locking the jobs (not the tenant row, which every claim of the tenant holds
for a moment) makes two applies to one tenant take turns and leaves claims
alone; the materialiser passes over a locked job until the next pass.
"""

from django.db import transaction
from django.utils import timezone

from calendars import declarations
from calendars.models import Calendar, Window
from jobs import audit, schedules
from jobs.choices import Status
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs import controls

WRITES_DEFINITION = ("create", "change", "adopt")


def set_tag(tenant, source):
    """The set's entity tag: its jobs, calendars and windows (jobs.schedules.set_tag)."""
    return schedules.set_tag(tenant, source, declarations.tag_rows(tenant, source))


def check_tag(tenant, source, tags):
    """Raise jobs.schedules.SetChanged unless the set's tag is one of `tags` (none given: any)."""
    if tags is not None:
        schedules.check_tag(tenant, source, tags, declarations.tag_rows(tenant, source))


def plan_set(
    tenant, specs, *, calendars=None, windows=None, source=schedules.DEFAULT_SOURCE, prune=False, now=None, jobs=None
):
    """What applying the set would do: the jobs' plan, its `sections` the calendars' and windows'. Writes nothing.

    `specs`, `calendars`, `windows`: {name: spec} (a section left out
    declares none). `jobs`: the tenant's jobs by name, read when None.
    Raises jobs.schedules.SetInvalid with the problems of every section.
    """
    jobs = jobs if jobs is not None else {j.name: j for j in JobDefinition.objects.filter(tenant=tenant)}
    plan, found = None, []
    try:
        plan = schedules.plan(tenant, specs, source=source, prune=prune, now=now, jobs=jobs)
    except schedules.SetInvalid as exc:
        found.append(exc)
    try:
        sections = declarations.plan(
            tenant,
            calendars or {},
            windows or {},
            source=source,
            prune=prune,
            jobs=_nameable(tenant, specs, jobs, plan),
        )
    except schedules.SetInvalid as exc:
        found.append(exc)
    if found:
        raise schedules.SetInvalid.joined(found)
    plan.sections = {section.section: section for section in sections}
    return plan


def _nameable(tenant, specs, jobs, plan):
    """{name: job} a declared window may name: the set's jobs as planned (saved before the windows), live others."""
    dropped = {c.job for c in plan.changes if c.action == "delete"} if plan else set()
    named = {n: j for n, j in jobs.items() if j.status != Status.CANCELLED and n not in dropped}
    named.update({n: jobs.get(n) or JobDefinition(tenant=tenant, name=n) for n in specs})
    if plan:
        named.update({c.job: c.definition for c in plan.changes if c.definition is not None})
    return named


def apply_set(
    tenant,
    specs,
    *,
    calendars=None,
    windows=None,
    source=schedules.DEFAULT_SOURCE,
    prune=False,
    actor,
    note="",
    now=None,
    if_match=None,
):
    """Bring `tenant`'s jobs, calendars and windows of the set `source` to the specs. Returns the plan applied.

    Raises jobs.schedules.SetInvalid (every problem, nothing written),
    jobs.quotas.QuotaExceeded (more new jobs than the tenant may have) or
    jobs.schedules.SetChanged when `if_match` (entity tags) does not name the
    set as it is, judged with the tenant's jobs, calendars and windows locked.
    """
    now = now or timezone.now()
    note = note or f"applied from code (set {source})"
    with transaction.atomic():
        locked = JobDefinition.objects.select_for_update(of=("self",)).filter(tenant=tenant).order_by("pk")
        jobs = {job.name: job for job in locked.select_related("tenant")}
        for model in (Calendar, Window):  # plain queries by tenant: planned from below, under these locks
            list(model.objects.select_for_update().filter(tenant=tenant).order_by("pk").values_list("pk"))
        check_tag(tenant, source, if_match)
        plan = plan_set(
            tenant, specs, calendars=calendars, windows=windows, source=source, prune=prune, now=now, jobs=jobs
        )
        sections, written = plan.sections, {"source": source, "actor": actor, "note": note}
        declarations.save(sections["calendars"], **written)
        for change in plan.in_order():
            if change.action in WRITES_DEFINITION:
                _save(change, source, actor, note, now)
        _move(plan, jobs, actor, note, now)
        _record_applied(plan, jobs, source)
        declarations.save(sections["windows"], **written)
        declarations.delete(sections["windows"], actor=actor, note=note)
        declarations.delete(sections["calendars"], actor=actor, note=note)
        if plan.changed:
            audit.record(actor, "apply_schedules", tenant, tenant=tenant, detail=plan.as_json(), note=note)
    return plan


def _save(change, source, actor, note, now):
    job = change.definition
    job.managed_by, job.applied_spec = source, change.applied
    diff = {f.field: {"before": f.before, "after": f.after} for f in change.fields}
    detail = {"schedules_as_code": source, "action": change.action, "changes": diff}
    save_definition(job, actor, now=now, note=note, detail=detail)


def _move(plan, jobs, actor, note, now):
    """The status moves of the plan, through runs.controls: pauses, resumes, then deletes."""
    for action, control in (
        ("pause", controls.pause_many),
        ("resume", controls.resume_many),
        ("delete", controls.delete_many),
    ):
        names = [c.job for c in plan.changes if c.action == action]
        if not names:
            continue
        chosen = JobDefinition.objects.filter(pk__in=[jobs[n].pk for n in names])
        kwargs = {"now": now} if action != "pause" else {}
        control(chosen, actor=actor, note=note, **kwargs)


def _record_applied(plan, jobs, source):
    """Every declared job keeps the spec as applied (drift is measured from it), saved or not.

    Bookkeeping of the set, not a change to a definition: a plain update for
    the jobs whose definition the plan did not save. A job no longer declared
    keeps its spec, paused as the plan left it.
    """
    saved = {c.job for c in plan.changes if c.action in WRITES_DEFINITION}
    for name, applied in plan.applied.items():
        job = jobs.get(name)
        if name in saved or job is None or (job.managed_by, job.applied_spec) == (source, applied):
            continue
        JobDefinition.objects.filter(pk=job.pk).update(managed_by=source, applied_spec=applied)
    for change in plan.changes:
        if change.action == "pause" and change.job not in plan.applied:
            job = jobs[change.job]
            JobDefinition.objects.filter(pk=job.pk).update(
                applied_spec={**(job.applied_spec or {}), "status": "paused"}
            )
