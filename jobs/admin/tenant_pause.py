"""The tenant actions of the portal: pause and resume a whole tenant, or one of its queues.

The same preview, audit note and passed-over summary as a job's pause and
resume (jobs/admin/actions.py), acting through runs.controls.pause_tenant and
resume_tenant. The banner every page of a paused tenant shows is
templates/portal/paused_banner.html.
"""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import OuterRef
from django.utils import timezone

from jobs.admin.actions import _passed_over
from jobs.audit import actor_for_user
from jobs.models import JobDefinition, QueuePause
from jobs.roles import OPERATE
from runs import breaker, controls
from runs.models import CLAIMABLE_STATES, Run
from scheduler_project.admin.confirm import NoteForm, confirm_action
from scheduler_project.admin.counts import capped_count
from scheduler_project.admin.permissions import needs

Status = JobDefinition.Status


class TenantPauseForm(NoteForm):
    queue = forms.CharField(
        label="Queue",
        required=False,
        max_length=64,
        help_text="Empty: the whole tenant, every queue. A queue name (e.g. reports): only that queue of each tenant.",
    )
    field_order = ["queue", "note"]

    def clean_queue(self):
        queue = self.cleaned_data["queue"].strip() or None
        try:
            controls.check_queue(queue)
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["queue"]) from exc
        return queue


def _scope_words(queue):
    return "every queue" if queue is None else f"queue {queue}"


def _held_jobs(tenants, queue):
    jobs = JobDefinition.objects.filter(tenant__in=tenants, status=Status.ACTIVE)
    return jobs if queue is None else jobs.filter(queue=queue)


@needs(OPERATE)
@admin.action(description="Pause selected tenants (or one of their queues)")
def pause_tenants(modeladmin, request, queryset):
    def preview(qs, data):
        queue = data["queue"]
        tenants = list(qs[:1000])
        held = {t.pk for t in _paused_so(tenants, queue)}
        fresh = [t for t in tenants if t.pk not in held]
        jobs = _held_jobs(fresh, queue)
        waiting = capped_count(Run.objects.filter(job__in=jobs, state__in=CLAIMABLE_STATES))
        return {
            "lines": [
                f"{len(fresh)} tenant(s) will be paused on {_scope_words(queue)}; {len(held)} already paused so stay as they are.",
                f"No run of theirs{'' if queue is None else ' on ' + queue} is claimed and no new run is created for "
                f"their {jobs.count()} active job(s) until resumed; {waiting} run(s) already scheduled wait, unclaimed.",
                "Runs already leased keep running to the end. The pause is stored on the tenant: it survives restarts.",
            ],
            "rows": [
                (
                    t,
                    f"unchanged (already paused on {_scope_words(queue)})"
                    if t.pk in held
                    else f"pause {_scope_words(queue)}",
                )
                for t in tenants[:60]
            ],
            "blocked": not fresh,
        }

    def perform(qs, data):
        actor = actor_for_user(request.user)
        paused = [t for t in qs if controls.pause_tenant(t, actor=actor, queue=data["queue"], note=data["note"])]
        return f"Paused {_scope_words(data['queue'])} of {len(paused)} tenant(s)."

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="pause_tenants",
        title="Pause tenants",
        preview=preview,
        perform=perform,
        form_class=TenantPauseForm,
        submit="Pause",
    )


def _paused_so(tenants, queue):
    """Those of `tenants` paused as a whole (queue None) or on `queue`: one query for all of them."""
    if queue is None:
        return [t for t in tenants if t.paused_at is not None]
    paused = set(QueuePause.objects.filter(tenant__in=tenants, queue=queue).values_list("tenant_id", flat=True))
    return [t for t in tenants if t.pk in paused]


@needs(OPERATE)
@admin.action(description="Resume selected tenants (or one of their queues)")
def resume_tenants(modeladmin, request, queryset):
    now = timezone.now()

    def preview(qs, data):
        queue = data["queue"]
        tenants = _paused_so(list(qs[:1000]), queue)
        # What each resume releases: a queue of a tenant paused as a whole stays held.
        released = [t for t in tenants if queue is None or t.paused_at is None]
        jobs = _held_jobs(released, queue)
        if queue is None:
            jobs = jobs.exclude(queue__in=QueuePause.objects.filter(tenant=OuterRef("tenant")).values("queue"))
        missed = {}
        for job in jobs.filter(next_due_at__lt=now).select_related("tenant")[:200]:
            missed.setdefault(job.tenant_id, []).append(_passed_over(job, now))
        waiting = capped_count(Run.objects.filter(job__in=jobs, state__in=CLAIMABLE_STATES))
        return {
            "lines": [
                f"{len(tenants)} tenant(s) will resume {_scope_words(queue)}; the others are not paused so and stay as they are.",
                "Their active jobs start again from their next occurrence after now. Occurrences that fell due while "
                "paused are not run: each job records them as one skipped run saying so.",
                f"{waiting} run(s) scheduled before the pause become claimable again at once.",
            ],
            "rows": [(t, _resume_effect(t, queue, missed.get(t.pk, []))) for t in tenants[:60]],
            "blocked": not tenants,
        }

    def perform(qs, data):
        actor = actor_for_user(request.user)
        resumed = [
            jobs
            for t in qs
            if (jobs := controls.resume_tenant(t, actor=actor, queue=data["queue"], note=data["note"])) is not None
        ]
        return f"Resumed {_scope_words(data['queue'])} of {len(resumed)} tenant(s); {sum(len(j) for j in resumed)} job(s) caught up."

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="resume_tenants",
        title="Resume tenants",
        preview=preview,
        perform=perform,
        form_class=TenantPauseForm,
        submit="Resume",
    )


def _resume_effect(tenant, queue, missed):
    if queue is not None and tenant.paused_at is not None:
        return f"resume {queue}; it stays held while the whole tenant is paused"
    passed = [n for n in missed if n]
    if not passed:
        return f"resume {_scope_words(queue)}; no job passed over an occurrence"
    total = sum(passed)
    return f"resume {_scope_words(queue)}; {len(passed)} job(s) passed over {total}{'+' if len(missed) >= 200 else ''} occurrence(s), recorded as skipped"


@needs(OPERATE)
@admin.action(description="Close the failure breaker of selected tenants (their retries run again)")
def close_breakers(modeladmin, request, queryset):
    def preview(qs, data):
        tenants = list(qs[:1000])
        opened = [t for t in tenants if t.breaker_opened_at is not None]
        waiting = capped_count(Run.objects.filter(tenant__in=opened, state=Run.State.RETRY_WAIT))
        return {
            "lines": [
                f"{len(opened)} tenant(s) have an open failure breaker; it closes now and is audited with your note.",
                f"Their {waiting} run(s) waiting to retry become claimable as their backoff ends. Failures before now "
                "no longer count: the breaker opens again only if a full new window fails as badly.",
            ],
            "rows": [(t, breaker.describe(t)) for t in tenants[:60]],
            "blocked": not opened,
        }

    def perform(qs, data):
        actor = actor_for_user(request.user)
        closed = sum(breaker.close(t, actor=actor, note=data["note"]) for t in qs)
        return f"Closed the failure breaker of {closed} tenant(s)."

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="close_breakers",
        title="Close failure breakers",
        preview=preview,
        perform=perform,
        submit="Close the breakers",
    )


TENANT_ACTIONS = [pause_tenants, resume_tenants, close_breakers]
