"""Applying a declared set of schedules (jobs/schedules.py) to a tenant, all or nothing.

`apply_set` locks the tenant's jobs, plans again from what they are now
(jobs.schedules.plan, which validates every job first and raises SetInvalid
before anything is written), then writes the plan through the same doors as
everyone: jobs.definitions.save_definition for creates, changes and
adoptions (each audited with its diff), runs.controls for pauses, resumes
and deletes (audited, and a resume records what it passed over). It ends
with one `apply_schedules` audit entry on the tenant holding the whole plan.
Applying the same set again finds nothing to do: its plan is empty.

Locking the jobs (not the tenant row, which every claim of the tenant holds
for a moment) makes two applies to one tenant take turns and leaves claims
alone; the materialiser passes over a locked job until the next pass.
"""

from django.db import transaction
from django.utils import timezone

from jobs import audit, schedules
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs import controls

WRITES_DEFINITION = ("create", "change", "adopt")


def apply_set(tenant, specs, *, source=schedules.DEFAULT_SOURCE, prune=False, actor, note="", now=None, if_match=None):
    """Bring `tenant`'s jobs of the set `source` to `specs` ({name: spec}). Returns the plan applied.

    Raises jobs.schedules.SetInvalid (every problem, nothing written),
    jobs.quotas.QuotaExceeded (more new jobs than the tenant may have) or
    jobs.schedules.SetChanged when `if_match` (entity tags) does not name the
    set as it is, judged with the tenant's jobs locked.
    """
    now = now or timezone.now()
    note = note or f"applied from code (set {source})"
    with transaction.atomic():
        locked = JobDefinition.objects.select_for_update(of=("self",)).filter(tenant=tenant).order_by("pk")
        jobs = {job.name: job for job in locked.select_related("tenant")}
        schedules.check_tag(tenant, source, if_match)
        plan = schedules.plan(tenant, specs, source=source, prune=prune, now=now, jobs=jobs)
        for change in plan.in_order():
            if change.action in WRITES_DEFINITION:
                _save(change, source, actor, note, now)
        _move(plan, jobs, actor, note, now)
        _record_applied(plan, jobs, source)
        if plan.changes:
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
