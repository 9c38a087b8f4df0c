"""The portal's run list: read-only runs with their attempts, filters and cancel.

Runs change state only through the engine's compare-and-sets (here:
runs.controls.cancel_runs, the set-based transitions.cancel_run), never by
editing. The list is built for tables of millions of rows: newest first by
primary key, a capped count instead of COUNT(*) (scheduler_project.admin.counts),
exact-match searches, and no date hierarchy (its DISTINCT over dates would scan
the table).
"""

import datetime as dt

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from jobs.audit import actor_for_user
from jobs.roles import OPERATE
from runs import celery_task, controls
from runs.models import CLAIMABLE_STATES, TERMINAL_STATES, Attempt, Run
from scheduler_project.admin import scoping
from scheduler_project.admin.confirm import confirm_action
from scheduler_project.admin.counts import capped_count
from scheduler_project.admin.display import derived_state, status_text, utc_seconds
from scheduler_project.admin.filters import JobFilter, QueueFilter, TenantFilter
from scheduler_project.admin.pagination import CappedPaginator
from scheduler_project.admin.permissions import needs
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("ready", "ready (scheduled or retry_wait, available now)")] + [(s, s) for s in Run.State.values]

    def queryset(self, request, queryset):
        if self.value() == "ready":
            return queryset.ready(timezone.now())
        if self.value():
            return queryset.filter(state=self.value())
        return queryset


class DueWindowFilter(admin.SimpleListFilter):
    title = "due"
    parameter_name = "due"
    WINDOWS = {
        "past_hour": ("in the last hour", -1, 0),
        "past_day": ("in the last 24 hours", -24, 0),
        "past_week": ("in the last 7 days", -24 * 7, 0),
        "next_hour": ("in the next hour", 0, 1),
        "later": ("later than an hour from now", 1, None),
    }

    def lookups(self, request, model_admin):
        return [(key, label) for key, (label, _, _) in self.WINDOWS.items()]

    def queryset(self, request, queryset):
        if self.value() not in self.WINDOWS:
            return queryset
        _, start, end = self.WINDOWS[self.value()]
        now = timezone.now()
        queryset = queryset.filter(due_at__gte=now + dt.timedelta(hours=start))
        return queryset.filter(due_at__lt=now + dt.timedelta(hours=end)) if end is not None else queryset


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = [
        "attempt",
        "worker_shown",
        "fencing_token",
        "available_at",
        "started_at",
        "ended_at",
        "lateness_shown",
        "outcome_shown",
        "error",
    ]
    readonly_fields = fields
    ordering = ["attempt"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        return scoping.is_operator(request.user)

    @admin.display(description="worker")
    def worker_shown(self, attempt):
        celery = celery_task.executor(attempt.worker_id)
        if celery:  # run by a team's Celery worker (run_dispatcher): say which worker and which task
            return format_html('Celery worker {} <span class="quiet">task {}</span>', *celery)
        return attempt.worker_id or "—"

    @admin.display(description="lateness")
    def lateness_shown(self, attempt):
        return f"{attempt.lateness.total_seconds():.3f} s" if attempt.attempt == 1 else "—"

    @admin.display(description="outcome")
    def outcome_shown(self, attempt):
        return status_text(attempt.outcome)


@admin.register(Run, site=site)
class RunAdmin(TenantScopedAdmin):
    list_display = [
        "id",
        "job",
        "tenant",
        "state_shown",
        "origin",
        "due_shown",
        "available_shown",
        "attempt",
        "queue",
        "worker_shown",
    ]
    list_filter = [StateFilter, TenantFilter, QueueFilter, JobFilter, DueWindowFilter, "origin"]
    search_fields = ["=idempotency_key", "=worker_id", "^job__name"]
    list_select_related = ["job", "tenant"]
    ordering = ["-id"]
    paginator = CappedPaginator
    list_per_page = 50
    show_full_result_count = False
    inlines = [AttemptInline]
    actions = ["cancel_runs"]
    readonly_fields = [
        "job",
        "tenant",
        "origin",
        "state_shown",
        "due_at",
        "available_at",
        "attempt",
        "max_attempts",
        "idempotency_key",
        "fencing_token",
        "worker_id",
        "lease_expires_at",
        "queue",
        "priority",
        "timeout_seconds",
        "payload",
        "args",
        "started_at",
        "finished_at",
        "last_error",
        "reason",
        "covers_until",
        "created_at",
    ]
    fields = readonly_fields

    class Media:
        css = {"all": ["portal/portal.css"]}

    def has_change_permission(self, request, obj=None):
        return obj is None and scoping.is_operator(request.user)  # the list's actions only: runs are never edited

    @admin.display(description="state", ordering="state")
    def state_shown(self, run):
        state = derived_state(run, timezone.now())
        if state == "ready":
            return format_html('{} <span class="quiet">({})</span>', status_text("ready"), run.state)
        return status_text(state)

    @admin.display(description="due", ordering="due_at")
    def due_shown(self, run):
        return utc_seconds(run.due_at)

    @admin.display(description="available", ordering="available_at")
    def available_shown(self, run):
        return utc_seconds(run.available_at)

    @admin.display(description="worker", ordering="worker_id")
    def worker_shown(self, run):
        return (
            format_html('<span class="portal-truncate portal-short" title="{0}">{0}</span>', run.worker_id)
            if run.worker_id
            else "—"
        )

    @needs(OPERATE)
    @admin.action(description="Cancel selected runs")
    def cancel_runs(self, request, queryset):
        def preview(qs, data):
            waiting = capped_count(qs.filter(state__in=CLAIMABLE_STATES))
            leased = capped_count(qs.filter(state=Run.State.LEASED))
            finished = capped_count(qs.filter(state__in=TERMINAL_STATES))
            return {
                "lines": [
                    f"{waiting} run(s) not yet started (scheduled or retry_wait) will be cancelled.",
                    f"{leased} running run(s) lose their lease: the worker's next heartbeat or completion is refused "
                    "(409 stale-lease), and the attempt is recorded as stale.",
                    f"{finished} run(s) already finished or dead stay as they are (dead ones: use the dead-letter queue).",
                ],
                "rows": [
                    (run, f"unchanged ({run.state})" if run.is_terminal else "cancel")
                    for run in qs.select_related("job")[:60]
                ],
                "blocked": waiting.count + leased.count == 0,
            }

        def perform(qs, data):
            actor = actor_for_user(request.user)
            reason = f"cancelled by {actor}" + (f": {data['note']}" if data["note"] else "")
            done = controls.cancel_runs(qs, actor=actor, reason=reason, note=data["note"])
            return f"Cancelled {len(done)} run(s)."

        return confirm_action(
            self,
            request,
            queryset,
            action="cancel_runs",
            title="Cancel runs",
            preview=preview,
            perform=perform,
            submit="Cancel runs",
        )
