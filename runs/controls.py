"""Operator controls on definitions and runs: pause, resume, delete, trigger,
cancel, replay, discard; one job at a time (the API) or thousands at once
(the portal's actions: 10,000 rows in a few seconds); and the pause and
resume of a whole tenant, or of one of its queues.

Each control is written once, set-based: a few statements per batch in one
transaction, the same compare-and-sets on the same expected states whatever
the number of objects, and one INSERT for the audit entries. The one-job
forms (`pause`, `resume`, `delete`) call it with a queryset of one.
Every run-state move is made by runs/transitions.py and every new run is
inserted by runs.enqueue.insert_runs; this module adds the selection, the
batching and the audit. Each control explains what it passes over: the
occurrences while a job was paused become one `skipped` row saying so.
Backfill lives in runs/backfill.py.
"""

import datetime as dt
import re
import uuid

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from jobs import audit, permissions
from jobs.definitions import first_due
from jobs.models import AuditEntry, JobDefinition, QueuePause, Tenant
from jobs.validation import QUEUE_RE
from runs import transitions
from runs.enqueue import build_runs, insert_runs, skipped_rows
from runs.materialize import missed_summary, upcoming
from runs.models import Run

Status = JobDefinition.Status
S = Run.State

_locked = transitions.locked


def _one(job):
    return JobDefinition.objects.filter(pk=job.pk)


def pause(job, *, actor, note="", now=None):
    """Stop materialising new runs and claiming existing ones. False if not active."""
    paused = pause_many(_one(job), actor=actor, note=note)
    job.refresh_from_db()
    return bool(paused)


def pause_many(queryset, *, actor, note=""):
    """`pause` for every active job of `queryset`. Returns the jobs paused."""
    with transaction.atomic():
        jobs = _locked(queryset, status=Status.ACTIVE)
        JobDefinition.objects.filter(pk__in=[j.pk for j in jobs], status=Status.ACTIVE).update(status=Status.PAUSED)
        audit.record_many(actor, "pause", jobs, note=note)
    return jobs


def resume(job, *, actor, note="", now=None):
    """Start again from the next occurrence after now; what was passed over is recorded skipped."""
    resumed = resume_many(_one(job), actor=actor, note=note, now=now)
    job.refresh_from_db()
    return bool(resumed)


def resume_many(queryset, *, actor, note="", now=None):
    """`resume` for every paused job: passed-over occurrences become one skipped row each. Returns the jobs.

    Raises jobs.permissions.Revoked, resuming none, when a job's tenant may no longer run its target.
    """
    now = now or timezone.now()
    with transaction.atomic():
        jobs = _locked(queryset, status=Status.PAUSED)
        permissions.refuse_revoked(jobs)
        skipped = []
        for job in jobs:
            skipped += reactivate(job, now)
            job.updated_at = now
        insert_runs(skipped)
        JobDefinition.objects.bulk_update(jobs, ["status", "next_due_at", "updated_at"], batch_size=1000)
        audit.record_many(actor, "resume", jobs, note=note)
    return jobs


def reactivate(job, now):
    """Set a paused `job` active again from its next occurrence after now (unsaved).

    Returns the skipped row that explains what was passed over while paused
    (none if nothing was). An `at` job keeps its instant: if it passed while
    paused, the missed-run policy decides.
    """
    skipped = catch_up(job, now, "passed over while the job was paused")
    job.status = Status.ACTIVE
    return skipped


def catch_up(job, now, reason):
    """Move a held cron or `every` `job` (unsaved) on to its next occurrence after now (none once spent).

    Returns the one skipped row, saying `reason`, for the occurrences it
    passed over while held (none if it passed none). An `at` job keeps its
    instant. A job's resume and a tenant's both use it.
    """
    skipped = []
    if job.schedule_kind in (JobDefinition.ScheduleKind.CRON, JobDefinition.ScheduleKind.EVERY):
        if job.next_due_at and job.next_due_at < now:
            missed, _ = upcoming(job, job.next_due_at - dt.timedelta(microseconds=1), now)
            if missed:
                skipped = skipped_rows(job, [missed_summary(missed, reason)], now)
        job.next_due_at = first_due(job, now)
    return skipped


def pause_tenant(tenant, *, actor, queue=None, note="", now=None):
    """Hold every run of `tenant`, or of one of its queues, until resumed. False if it was already held so.

    No claim leases a held run (runs/sql: lock_ready_tenants, claim_candidates)
    and no occurrence of a held job is materialised (runs.materialize._due);
    runs already leased run to the end. The pause locks the tenant row, which
    each claim of the tenant holds while it claims: once this returns, no
    claim leases the held runs. Stored on the tenant (`paused_at`, or a
    QueuePause row), so it survives restarts.
    """
    now = now or timezone.now()
    check_queue(queue)
    with transaction.atomic():
        held = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if queue is None:
            changed = Tenant.objects.filter(pk=held.pk, paused_at__isnull=True).update(paused_at=now)
        else:
            changed = QueuePause.objects.get_or_create(tenant=held, queue=queue, defaults={"paused_at": now})[1]
        if changed:
            audit.record(actor, "pause", held, tenant=held, detail={"queue": queue}, note=note)
    tenant.refresh_from_db()
    return bool(changed)


def resume_tenant(tenant, *, actor, queue=None, note="", now=None):
    """Release a tenant's pause, or one queue's. Returns the jobs caught up, or None if it was not held so.

    Each active job the pause held, and that nothing holds any more, starts
    again from its next occurrence after now; what it passed over while held
    is recorded as one skipped run saying so (`catch_up`), as a job's resume
    does. Runs scheduled before the pause become claimable again at once.
    """
    now = now or timezone.now()
    check_queue(queue)
    with transaction.atomic():
        held = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if queue is None:
            released = Tenant.objects.filter(pk=held.pk, paused_at__isnull=False).update(paused_at=None)
            jobs = JobDefinition.objects.filter(tenant=held).exclude(queue__in=held.queue_pauses.values("queue"))
        else:
            released = QueuePause.objects.filter(tenant=held, queue=queue).delete()[0]
            jobs = JobDefinition.objects.filter(tenant=held, queue=queue) if held.paused_at is None else None
        if not released:
            return None
        caught_up = _catch_up_held(jobs, now, _held_reason(queue)) if jobs is not None else []
        passed_over = sum(1 for job in caught_up if getattr(job, "passed_over", None))
        detail = {"queue": queue, "jobs_caught_up": len(caught_up), "jobs_that_passed_over_runs": passed_over}
        audit.record(actor, "resume", held, tenant=held, detail=detail, note=note)
    tenant.refresh_from_db()
    return caught_up


def _catch_up_held(jobs, now, reason):
    """`catch_up` for the active jobs of `jobs` whose next occurrence passed while they were held, in one write each way."""
    locked = _locked(jobs.filter(next_due_at__lt=now), status=Status.ACTIVE)
    skipped = []
    for job in locked:
        rows = catch_up(job, now, reason)
        job.passed_over = bool(rows)
        skipped += rows
    insert_runs(skipped)
    JobDefinition.objects.bulk_update(locked, ["next_due_at"], batch_size=1000)
    return locked


def _held_reason(queue):
    return "passed over while the tenant was paused" if queue is None else f"passed over while queue {queue} was paused"


def check_queue(queue):
    """None (every queue) or a queue name; anything else raises ValidationError naming the field."""
    if queue is not None and not (isinstance(queue, str) and re.fullmatch(QUEUE_RE, queue)):
        raise ValidationError(
            {"queue": f"{queue!r} is not a queue name: use 1-64 lowercase letters, digits, '.', '_' or '-'"}
        )


def delete(job, *, actor, note="", now=None):
    """Cancel the job: no new runs; runs not yet started are cancelled; running ones finish.

    Returns how many runs were cancelled.
    """
    _, cancelled = delete_many(_one(job), actor=actor, note=note, now=now)
    job.refresh_from_db()
    return cancelled


def delete_many(queryset, *, actor, note="", now=None):
    """`delete` for every job not yet cancelled. Returns (jobs, runs cancelled)."""
    with transaction.atomic():
        jobs = _locked(queryset.exclude(status=Status.CANCELLED))
        ids = [j.pk for j in jobs]
        JobDefinition.objects.filter(pk__in=ids).update(status=Status.CANCELLED, next_due_at=None)
        cancelled = transitions.cancel_future_runs(ids, reason="job deleted", now=now)
        # One job: its own count; several: the count is their total, so none is recorded per job.
        detail = {"cancelled_runs": cancelled} if len(jobs) == 1 else {"bulk": True}
        audit.record_many(actor, "delete", jobs, detail=detail, note=note)
    return jobs, cancelled


class ConcurrencyLimit(Exception):
    """A trigger of a job that already runs as many runs as its `concurrency` allows (the API's 409)."""

    def __init__(self, job, running):
        self.job, self.running = job, running
        super().__init__(
            f"Job {job.name} already runs {running} of at most {job.concurrency} at once; trigger it again "
            "when one finishes, or enqueue a run to wait its turn."
        )


def trigger(job, *, actor, note="", now=None, payload=None, quota=None):
    """Run `job` now, outside its schedule: `trigger_many` for one job. Returns the run (None if cancelled)."""
    runs = trigger_many(_one(job), actor=actor, note=note, now=now, payload=payload, quota=quota)
    return runs[0] if runs else None


def trigger_many(queryset, *, actor, note="", now=None, payload=None, quota=None):
    """Every door's "trigger now": one run each for the jobs not cancelled, due now. Returns the runs.

    The rules, for all the runs at once (nothing is created if one refuses):
    the job's concurrency limit (ConcurrencyLimit when a job already runs as
    many as it allows; the overlap policy is for scheduled occurrences only)
    and `quota`, the runs.enqueue.Quota the door obeys (Quota.ENQUEUE for the
    API and the portal; jobs.quotas.QuotaExceeded). The jobs stay locked until
    the runs are in, so two triggers of one job are judged one after the other.
    `payload` replaces the job's for these runs (the API's body).
    jobs.permissions.Revoked, when a job's tenant may no longer run its
    target, creates none either.
    """
    now = now or timezone.now()
    with transaction.atomic():
        jobs = _locked(queryset.exclude(status=Status.CANCELLED))
        permissions.refuse_revoked(jobs)
        limited = [job for job in jobs if job.concurrency is not None]
        if limited:
            running = _running_by_job(limited)
            for job in limited:
                if running.get(job.pk, 0) >= job.concurrency:
                    raise ConcurrencyLimit(job, running.get(job.pk, 0))
        rows = []
        for job in jobs:
            key = f"{job.name}@{Run.Origin.TRIGGER}-{uuid.uuid4()}"
            rows += build_runs(job, [now], origin=Run.Origin.TRIGGER, key=key, payload=payload)
        runs = insert_runs(rows, quota=quota, now=now)
        AuditEntry.objects.bulk_create(
            [
                audit.entry(
                    actor, Run.Origin.TRIGGER, job, detail={"run": run.pk, "due_at": now.isoformat()}, note=note
                )
                for job, run in zip(jobs, runs)
            ],
            batch_size=1000,
        )
    return runs


def _running_by_job(jobs):
    leased = Run.objects.filter(job_id__in=[job.pk for job in jobs], state=S.LEASED)
    return dict(leased.values("job_id").annotate(n=Count("pk")).values_list("job_id", "n"))


def cancel_run(run, *, actor, reason, note="", now=None):
    """`cancel_runs` for one run: True if this call cancelled it (False: it had already finished)."""
    return bool(cancel_runs(Run.objects.filter(pk=run.pk), actor=actor, reason=reason, note=note, now=now))


def cancel_runs(queryset, *, actor, reason, note="", now=None, limit=100_000):
    """transitions.cancel_run for every unfinished run of `queryset`, audited. Returns the runs cancelled.

    Leased runs go through transitions.cancel_run one by one, since each
    needs its attempt recorded and its fencing token checked.
    """
    now = now or timezone.now()
    with transaction.atomic():
        waiting = transitions.cancel_waiting(queryset, reason=reason, now=now, limit=limit)
        leased = [
            run
            for run in queryset.filter(state=S.LEASED).select_related("tenant")[:limit]
            if transitions.cancel_run(run, reason=reason, now=now)
        ]
        done = waiting + leased
        audit.record_many(actor, "cancel", done, note=note or reason)
    return done


def _one_letter(dead_letter):
    """A queryset of one dead letter (runs.controls reads dlq.models through the letter it is given: rule 5)."""
    return type(dead_letter)._default_manager.filter(pk=dead_letter.pk)


def replay(dead_letter, *, actor, note="", now=None):
    """`replay_many` for one dead letter: True if this call replayed it (False: already closed)."""
    return bool(replay_many(_one_letter(dead_letter), actor=actor, note=note, now=now))


def replay_many(dead_letters, *, actor, note="", now=None):
    """transitions.replay_many and its audit, in one transaction. Returns those replayed
    (jobs.permissions.Revoked: none).

    A letter a concurrent replay or discard closed meanwhile has moved to its history partition under
    this one's lock: the whole step runs once more and passes it over (transitions.again_if_moved).
    """
    return transitions.again_if_moved(_replay_many, dead_letters, actor, note, now)


def _replay_many(dead_letters, actor, note, now):
    with transaction.atomic():
        letters = transitions.replay_many(dead_letters, actor=actor, now=now)
        audit.record_many(actor, "replay", letters, note=note)
    return letters


def discard(dead_letter, *, actor, note="", now=None):
    """`discard_many` for one dead letter: True if this call discarded it (False: already closed)."""
    return bool(discard_many(_one_letter(dead_letter), actor=actor, note=note, now=now))


def discard_many(dead_letters, *, actor, note="", now=None):
    """transitions.discard_many and its audit, in one transaction. Returns those discarded
    (once more if a concurrent close moved a letter under it, as `replay_many`)."""
    return transitions.again_if_moved(_discard_many, dead_letters, actor, note, now)


def _discard_many(dead_letters, actor, note, now):
    with transaction.atomic():
        letters = transitions.discard_many(dead_letters, actor=actor, now=now)
        audit.record_many(actor, "discard", letters, note=note)
    return letters
