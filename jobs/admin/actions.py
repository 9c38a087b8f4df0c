"""The job definition actions of the portal: pause, resume, trigger now, cancel, backfill.

(A tenant's pause is in jobs/admin/tenant_pause.py; adopting a job's drift into code in jobs/admin/drift.py.)

Each shows a preview (how many runs it creates, pauses or cancels, and what
the overlap policy does with them) and asks for an audit note before it acts
through runs.controls, whose controls are set-based (the same compare-and-sets
and audit records for one job or many), so 10,000 jobs take seconds.
"""

import datetime as dt

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.template.response import TemplateResponse
from django.utils import timezone

from jobs.audit import actor_for_user
from jobs.models import JobDefinition
from jobs.permissions import Revoked
from jobs.quotas import QuotaExceeded
from jobs.roles import OPERATE, OWN
from runs import backfill, controls, enqueue
from runs.models import CLAIMABLE_STATES, Run
from scheduler_project.admin.confirm import NoteForm, confirm_action
from scheduler_project.admin.counts import capped_count
from scheduler_project.admin.permissions import needs

Status = JobDefinition.Status
BACKFILL_CHUNK = 500


def _leased_by_job(jobs):
    return dict(
        Run.objects.filter(job__in=jobs, state=Run.State.LEASED)
        .values_list("job")
        .annotate(n=Count("id"))
        .values_list("job", "n")
    )


@needs(OPERATE)
@admin.action(description="Pause selected jobs")
def pause_jobs(modeladmin, request, queryset):
    def preview(qs, data):
        active = qs.filter(status=Status.ACTIVE)
        waiting = capped_count(Run.objects.filter(job__in=active, state__in=CLAIMABLE_STATES))
        n = active.count()
        return {
            "lines": [
                f"{n} active job(s) will be paused; {qs.count() - n} already paused or cancelled stay as they are.",
                f"No new runs are created for them; {waiting} run(s) already scheduled wait, unclaimed, until resumed.",
                "Runs already leased keep running to the end.",
            ],
            "rows": [(job, "pause" if job.status == Status.ACTIVE else f"unchanged ({job.status})") for job in qs[:60]],
            "blocked": n == 0,
        }

    def perform(qs, data):
        jobs = controls.pause_many(qs, actor=actor_for_user(request.user), note=data["note"])
        return f"Paused {len(jobs)} job(s)."

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="pause_jobs",
        title="Pause jobs",
        preview=preview,
        perform=perform,
        submit="Pause",
    )


def _passed_over(job, now, cap=1000):
    from jobs import occurrences

    scheduled = job.schedule_kind in (JobDefinition.ScheduleKind.CRON, JobDefinition.ScheduleKind.EVERY)
    if not scheduled or not job.next_due_at or job.next_due_at >= now:
        return 0
    schedule = occurrences.Schedule.of(job)
    times = occurrences.after(schedule, job.next_due_at - dt.timedelta(microseconds=1), cap)
    return sum(1 for t in times if t < now)


@needs(OPERATE)
@admin.action(description="Resume selected jobs")
def resume_jobs(modeladmin, request, queryset):
    now = timezone.now()

    def preview(qs, data):
        paused = list(qs.filter(status=Status.PAUSED).select_related("tenant")[:1000])
        rows = []
        for job in paused[:60]:
            missed = _passed_over(job, now)
            rows.append(
                (
                    job,
                    f"resume; {missed}{'+' if missed >= 1000 else ''} occurrence(s) passed over while paused are recorded as skipped"
                    if missed
                    else "resume from its next occurrence",
                )
            )
        total = qs.filter(status=Status.PAUSED).count()
        waiting = capped_count(Run.objects.filter(job__in=qs.filter(status=Status.PAUSED), state__in=CLAIMABLE_STATES))
        return {
            "lines": [
                f"{total} paused job(s) will resume from their next occurrence after now; the others stay as they are.",
                "Occurrences that fell due while paused are not run: each job records them as one skipped run saying so.",
                f"{waiting} run(s) scheduled before the pause become claimable again at once.",
            ],
            "rows": rows,
            "blocked": total == 0,
        }

    def perform(qs, data):
        try:
            jobs = controls.resume_many(qs, actor=actor_for_user(request.user), note=data["note"])
        except Revoked as exc:
            return f"Nothing resumed: {exc}"
        return f"Resumed {len(jobs)} job(s)."

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="resume_jobs",
        title="Resume jobs",
        preview=preview,
        perform=perform,
        submit="Resume",
    )


def _overlap_effect(job, leased):
    """What happens to an out-of-schedule run (trigger, backfill) of `job` given `leased` running runs."""
    parts = ["runs now"]
    if job.status != Status.ACTIVE:
        parts = [f"waits: the job is {job.status}, runs are claimed only while it is active"]
    if job.concurrency:
        parts.append(f"at most {job.concurrency} at a time (concurrency limit; {leased} running)")
    elif leased:
        parts.append(f"alongside the {leased} run(s) already running")
    parts.append(f"overlap policy '{job.overlap_policy}' applies to scheduled occurrences only, not to this run")
    return "; ".join(parts)


@needs(OPERATE)
@admin.action(description="Trigger selected jobs now")
def trigger_jobs(modeladmin, request, queryset):
    def preview(qs, data):
        jobs = list(qs.exclude(status=Status.CANCELLED)[:10_000])
        leased = _leased_by_job(jobs[:1000])
        inactive = sum(1 for j in jobs if j.status != Status.ACTIVE)
        return {
            "lines": [
                f"{len(jobs)} run(s) will be created, one per job, due now (origin: trigger).",
                f"{inactive} of them belong to paused jobs and wait until those are resumed."
                if inactive
                else "All their jobs are active: workers pick the runs up at once.",
                "A triggered run is outside the schedule: the overlap policy does not skip or replace it; the job's concurrency limit still applies.",
            ],
            "rows": [(job, _overlap_effect(job, leased.get(job.pk, 0))) for job in jobs[:60]],
            "blocked": not jobs,
        }

    def perform(qs, data):
        try:
            runs = controls.trigger_many(
                qs, actor=actor_for_user(request.user), note=data["note"], quota=enqueue.Quota.ENQUEUE
            )
        except QuotaExceeded as exc:
            return f"Nothing triggered: capped by quota. {exc}"
        except (controls.ConcurrencyLimit, Revoked) as exc:
            return f"Nothing triggered: {exc}"
        return f"Triggered {len(runs)} run(s)."

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="trigger_jobs",
        title="Trigger jobs now",
        preview=preview,
        perform=perform,
        submit="Trigger now",
    )


@needs(OWN)  # a job deleted for good: the definition is the owners' (DELETE /v1/jobs/{name} too)
@admin.action(description="Cancel selected jobs (no more runs)")
def cancel_jobs(modeladmin, request, queryset):
    def preview(qs, data):
        live = qs.exclude(status=Status.CANCELLED)
        pending = capped_count(Run.objects.filter(job__in=live, state__in=CLAIMABLE_STATES))
        running = capped_count(Run.objects.filter(job__in=live, state=Run.State.LEASED))
        n = live.count()
        return {
            "lines": [
                f"{n} job(s) will be cancelled: no new runs, ever. This cannot be undone from the portal.",
                f"{pending} run(s) not yet started will be cancelled (reason: job deleted).",
                f"{running} running run(s) finish normally.",
            ],
            "rows": [(job, "cancel" if job.status != Status.CANCELLED else "already cancelled") for job in qs[:60]],
            "blocked": n == 0,
        }

    def perform(qs, data):
        jobs, cancelled = controls.delete_many(qs, actor=actor_for_user(request.user), note=data["note"])
        return f"Cancelled {len(jobs)} job(s) and {cancelled} run(s) not yet started."

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="cancel_jobs",
        title="Cancel jobs",
        preview=preview,
        perform=perform,
        submit="Cancel these jobs",
    )


class BackfillForm(NoteForm):
    start = forms.DateTimeField(
        label="Window start (UTC)", help_text="Occurrences at or after this instant, e.g. 2026-05-01 00:00."
    )
    end = forms.DateTimeField(
        label="Window end (UTC)", help_text="Occurrences before this instant; it must be in the past."
    )
    max_runs = forms.IntegerField(
        label="Most runs per job",
        initial=100,
        min_value=1,
        max_value=backfill.BACKFILL_LIMIT,
        help_text=f"A cap per job (1 to {backfill.BACKFILL_LIMIT:,}); occurrences beyond it are left out.",
    )
    ignore_windows = forms.BooleanField(
        label="Ignore maintenance windows and calendars",
        required=False,
        help_text="Unticked, occurrences inside the jobs' windows are left out or collapsed as their resume policy says.",
    )
    field_order = ["start", "end", "max_runs", "ignore_windows", "note"]

    def clean(self):
        data = super().clean()
        if data.get("start") and data.get("end") and data["start"] >= data["end"]:
            raise ValidationError("The window's end must be after its start.")
        if data.get("end") and data["end"] > timezone.now():
            self.add_error("end", "A backfill covers the past; occurrences from now on run on schedule.")
        return data


def backfill_plan(qs, data):
    """[(job, occurrences, truncated, problem, held back by windows)] for the selected jobs and the window."""
    plans = []
    for job in qs.select_related("tenant")[:1000]:
        try:
            plan = backfill.backfill_plan(
                job, data["start"], data["end"], data["max_runs"], ignore_windows=data.get("ignore_windows", False)
            )
            plans.append((job, len(plan.times), plan.truncated, "", plan.held_back))
        except ValidationError as exc:
            plans.append((job, 0, False, "; ".join(exc.messages), 0))
    return plans


@needs(OPERATE)
@admin.action(description="Backfill a window of selected cron and every jobs")
def backfill_jobs(modeladmin, request, queryset):
    def preview(qs, data):
        plans = backfill_plan(qs, data)
        leased = _leased_by_job([p[0] for p in plans if p[1]][:1000])
        total = sum(p[1] for p in plans)
        rows = [
            (
                job,
                f"left out: {problem}"
                if problem
                else f"{n} run(s){' (capped: more occurrences in the window)' if cut else ''}"
                f"{f'; {held} occurrence(s) left out by maintenance windows' if held else ''}"
                f"; {_overlap_effect(job, leased.get(job.pk, 0))}",
            )
            for job, n, cut, problem, held in plans
        ]
        return {
            "lines": [
                f"{total} run(s) will be created for {sum(1 for p in plans if p[1])} job(s), one per occurrence in the window (origin: backfill), all due now.",
                "Backfilled runs are outside the schedule: the overlap policy does not skip them, so without a concurrency limit they run side by side.",
                "Progress is shown until every run is created.",
            ],
            "rows": rows,
            "blocked": total == 0,
        }

    def perform(qs, data):
        plans = [(job, n) for job, n, _cut, problem, _held in backfill_plan(qs, data) if n and not problem]
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": "Backfill in progress",
            "opts": JobDefinition._meta,
            "plan": [
                {
                    "job": job.pk,
                    "name": str(job),
                    "total": n,
                    "start": data["start"].isoformat(),
                    "end": data["end"].isoformat(),
                }
                for job, n in plans
            ],
            "note": data["note"],
            "ignore_windows": data.get("ignore_windows", False),
        }
        return TemplateResponse(request, "portal/backfill_progress.html", context)

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="backfill_jobs",
        title="Backfill jobs",
        preview=preview,
        perform=perform,
        form_class=BackfillForm,
        submit="Start backfill",
    )


def backfill_step(job, cursor, end, remaining, *, actor, note, ignore_windows=False):
    """Create the next chunk of a backfill from `cursor`; returns (created, next cursor, done).

    The portal's progress page calls this until done, so progress is real and
    a chunk is never bigger than BACKFILL_CHUNK runs (one audit entry each).
    Each chunk obeys the tenant's pending-run quota (jobs.quotas.QuotaExceeded),
    and the job's maintenance windows unless `ignore_windows`.
    """
    chunk = min(BACKFILL_CHUNK, remaining)
    if chunk <= 0 or cursor >= end:
        return 0, cursor, True
    plan = backfill.backfill_plan(job, cursor, end, chunk, ignore_windows=ignore_windows)
    if not plan.times:
        return 0, cursor, True
    runs = backfill.backfill(
        job, cursor, end, actor=actor, max_runs=chunk, note=note, quota=enqueue.Quota.PENDING, plan=plan
    )
    following = (plan.resume_after or plan.times[-1]) + dt.timedelta(microseconds=1)
    done = not plan.truncated or remaining - len(runs) <= 0 or following >= end
    return len(runs), following, done


JOB_ACTIONS = [pause_jobs, resume_jobs, trigger_jobs, cancel_jobs, backfill_jobs]  # + jobs.admin.drift.adopt_into_code
