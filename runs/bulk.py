"""Set-based operator controls for the portal's bulk actions (10,000 rows in a few seconds).

The one-at-a-time functions (runs.controls.pause/resume/delete,
runs.enqueue.trigger, runs.transitions.cancel_run/replay/discard) cost four
or five ORM round trips per object, about 2 ms each on PostgreSQL: 10,000
selected rows would take half a minute. These do the same compare-and-sets on
the same expected states, with the same reasons and audit actions, as a few
statements per batch in one transaction; what they change is returned and
audited with one INSERT. Leased runs still go through transitions.cancel_run,
one by one, since each needs its attempt recorded and its fencing token checked.

Every run-state move here is made by runs/transitions.py (cancel_waiting,
replay_many, discard_many); this module adds the batching and the audit.
"""

import uuid

from django.db import transaction
from django.utils import timezone

from jobs import audit
from jobs.models import AuditEntry, JobDefinition
from runs import controls, transitions
from runs.materialize import build_runs
from runs.models import Run

Status = JobDefinition.Status
S = Run.State


_locked = transitions.locked


def pause_many(queryset, *, actor, note=""):
    """runs.controls.pause for every active job of `queryset`. Returns the jobs paused."""
    with transaction.atomic():
        jobs = _locked(queryset, status=Status.ACTIVE)
        JobDefinition.objects.filter(pk__in=[j.pk for j in jobs], status=Status.ACTIVE).update(status=Status.PAUSED)
        audit.record_many(actor, "pause", jobs, note=note)
    return jobs


def resume_many(queryset, *, actor, note="", now=None):
    """runs.controls.resume for every paused job: passed-over occurrences become one skipped row each."""
    now = now or timezone.now()
    with transaction.atomic():
        jobs = _locked(queryset, status=Status.PAUSED)
        skipped = []
        for job in jobs:
            skipped += controls.reactivate(job, now)
            job.updated_at = now
        Run.objects.bulk_create(skipped, ignore_conflicts=True, batch_size=1000)
        JobDefinition.objects.bulk_update(jobs, ["status", "next_due_at", "updated_at"], batch_size=1000)
        audit.record_many(actor, "resume", jobs, note=note)
    return jobs


def delete_many(queryset, *, actor, note="", now=None):
    """runs.controls.delete for every job not yet cancelled. Returns (jobs, runs cancelled)."""
    now = now or timezone.now()
    with transaction.atomic():
        jobs = _locked(queryset.exclude(status=Status.CANCELLED))
        ids = [j.pk for j in jobs]
        JobDefinition.objects.filter(pk__in=ids).update(status=Status.CANCELLED, next_due_at=None)
        cancelled = transitions.cancel_future_runs(ids, reason="job deleted", now=now)
        audit.record_many(actor, "delete", jobs, detail={"bulk": True}, note=note)
    return jobs, cancelled


def trigger_many(queryset, *, actor, note="", now=None):
    """runs.enqueue.trigger for every job not cancelled: one run each, due now. Returns the runs."""
    now = now or timezone.now()
    with transaction.atomic():
        jobs = list(queryset.exclude(status=Status.CANCELLED).select_related("tenant").order_by("pk"))
        runs = []
        for job in jobs:
            runs += build_runs(
                job, [now], origin=Run.Origin.TRIGGER, key=f"{job.name}@{Run.Origin.TRIGGER}-{uuid.uuid4()}"
            )
        runs = Run.objects.bulk_create(runs, batch_size=1000)
        AuditEntry.objects.bulk_create(
            [
                AuditEntry(
                    tenant_id=job.tenant_id,
                    actor=actor,
                    action=Run.Origin.TRIGGER,
                    object_type=job._meta.label_lower,
                    object_id=str(job.pk),
                    object_repr=str(job)[:200],
                    detail={"run": run.pk, "due_at": now.isoformat()},
                    note=note,
                )
                for job, run in zip(jobs, runs)
            ],
            batch_size=1000,
        )
    return runs


def cancel_runs(queryset, *, actor, reason, note="", now=None, limit=100_000):
    """transitions.cancel_run for every unfinished run of `queryset`. Returns the runs cancelled."""
    now = now or timezone.now()
    with transaction.atomic():
        waiting = transitions.cancel_waiting(queryset, reason=reason, now=now, limit=limit)
        leased = [
            run
            for run in queryset.filter(state=S.LEASED).select_related("tenant")[:limit]
            if transitions.cancel_run(run, reason=reason, now=now)
        ]
        done = waiting + leased
        audit.record_many(actor, "cancel", done, note=note)
    return done


def replay_many(dead_letters, *, actor, note="", now=None):
    """transitions.replay_many, audited. Returns those replayed."""
    with transaction.atomic():
        letters = transitions.replay_many(dead_letters, actor=actor, now=now)
        audit.record_many(actor, "replay", letters, note=note)
    return letters


def discard_many(dead_letters, *, actor, note="", now=None):
    """transitions.discard_many, audited. Returns those discarded."""
    with transaction.atomic():
        letters = transitions.discard_many(dead_letters, actor=actor, now=now)
        audit.record_many(actor, "discard", letters, note=note)
    return letters
