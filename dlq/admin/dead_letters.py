"""The portal's dead-letter queue: what died, why, and replay or discard, one or many.

Replay and discard go through runs.controls (the set-based transitions.replay
and discard): each closes the dead letter by compare-and-set and audits it in
the same transaction.
"""

import datetime as dt
import json

from django.contrib import admin
from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone
from django.utils.html import format_html

from dlq.models import DeadLetter
from jobs.audit import actor_for_user
from jobs.permissions import Revoked
from jobs.roles import OPERATE
from runs import controls
from runs.models import Run
from scheduler_project.admin import scoping
from scheduler_project.admin.confirm import confirm_action
from scheduler_project.admin.display import status_text, utc_seconds
from scheduler_project.admin.filters import JobFilter, TenantFilter
from scheduler_project.admin.pagination import CappedPaginator
from scheduler_project.admin.permissions import needs
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site


def dead_letter_status(dl):
    return "replayed" if dl.replayed_at else "discarded" if dl.discarded_at else "open"


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("open", "open"), ("replayed", "replayed"), ("discarded", "discarded")]

    def queryset(self, request, queryset):
        if self.value() == "open":
            return queryset.filter(replayed_at=None, discarded_at=None)
        if self.value() == "replayed":
            return queryset.exclude(replayed_at=None)
        if self.value() == "discarded":
            return queryset.exclude(discarded_at=None)
        return queryset


@admin.register(DeadLetter, site=site)
class DeadLetterAdmin(TenantScopedAdmin):
    list_display = ["id", "job", "tenant", "dead_at_shown", "error_head", "attempts", "status_shown", "new_for_job_24h"]
    list_filter = [StatusFilter, TenantFilter, JobFilter]
    search_fields = ["^job__name", "last_error"]
    list_select_related = ["job", "tenant", "run"]
    show_full_result_count = False
    paginator = CappedPaginator
    list_per_page = 50
    actions = ["replay_dead_letters", "discard_dead_letters"]
    fields = [
        "run_link",
        "job",
        "tenant",
        "status_shown",
        "dead_at",
        "attempts",
        "error_full",
        "payload",
        "idempotency_key",
        "replayed_at",
        "discarded_at",
        "resolved_by",
    ]
    readonly_fields = fields

    class Media:
        css = {"all": ["portal/portal.css"]}

    def has_change_permission(self, request, obj=None):
        return obj is None and scoping.is_operator(request.user)  # actions only

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if request.method == "GET" and match and match.url_name == "dlq_deadletter_changelist":
            # New dead letters of the row's job in the last 24 h (index deadletter_by_job).
            since = timezone.now() - dt.timedelta(days=1)
            recent = DeadLetter.objects.filter(job=OuterRef("job"), dead_at__gte=since).order_by().values("job")
            queryset = queryset.annotate(new_for_job=Subquery(recent.annotate(n=Count("id")).values("n")[:1]))
        return queryset

    @admin.display(description="last error")
    def error_head(self, dl):
        first = (dl.last_error or "").strip().splitlines()[-1:] or ["(no error text)"]
        # One line, cut to the column: the whole text is on hover and on the dead letter's page.
        return format_html('<span class="portal-truncate" title="{}">{}</span>', dl.last_error[:2000], first[0][:140])

    @admin.display(description="dead at", ordering="dead_at")
    def dead_at_shown(self, dl):
        return utc_seconds(dl.dead_at)

    @admin.display(description="attempts")
    def attempts(self, dl):
        return f"{dl.run.attempt} of {dl.run.max_attempts}"

    @admin.display(description="status")
    def status_shown(self, dl):
        return status_text(dead_letter_status(dl))

    @admin.display(description="new for job, 24 h")
    def new_for_job_24h(self, dl):
        return getattr(dl, "new_for_job", None) or 0

    @admin.display(description="run")
    def run_link(self, dl):
        from django.urls import reverse

        return format_html(
            '<a href="{}">run {}</a> ({})', reverse("admin:runs_run_change", args=[dl.run_id]), dl.run_id, dl.run.state
        )

    @admin.display(description="last error")
    def error_full(self, dl):
        return format_html('<pre class="portal-pre">{}</pre>', dl.last_error or "(no error text)")

    @admin.display(description="payload")
    def payload(self, dl):
        return format_html(
            '<pre class="portal-pre">{}</pre>', json.dumps(dl.run.payload, indent=2, ensure_ascii=False)[:20_000]
        )

    @admin.display(description="idempotency key")
    def idempotency_key(self, dl):
        return dl.run.idempotency_key

    @needs(OPERATE)
    @admin.action(description="Replay selected dead letters")
    def replay_dead_letters(self, request, queryset):
        def preview(qs, data):
            open_ = qs.filter(replayed_at=None, discarded_at=None).select_related("job", "run")
            n = open_.count()
            scheduled_forbid = open_.filter(run__origin=Run.Origin.SCHEDULE, job__overlap_policy="forbid").count()
            return {
                "lines": [
                    f"{n} dead run(s) go back to scheduled, available now, with the same idempotency key and a fresh attempt budget.",
                    f"{qs.count() - n} already replayed or discarded stay as they are.",
                    f"{scheduled_forbid} of them are scheduled occurrences of jobs with overlap policy forbid: "
                    "each is skipped if a run of its job is still running when it is claimed.",
                ],
                "rows": [
                    (
                        dl,
                        f"replay run {dl.run_id} of {dl.job}"
                        if dl.is_open
                        else f"unchanged ({dead_letter_status(dl)})",
                    )
                    for dl in qs.select_related("job")[:60]
                ],
                "blocked": n == 0,
            }

        def perform(qs, data):
            try:
                done = controls.replay_many(qs, actor=actor_for_user(request.user), note=data["note"])
            except Revoked as exc:
                return f"Nothing replayed: {exc}"
            return f"Replayed {len(done)} dead letter(s)."

        return confirm_action(
            self,
            request,
            queryset,
            action="replay_dead_letters",
            title="Replay dead letters",
            preview=preview,
            perform=perform,
            submit="Replay",
        )

    @needs(OPERATE)
    @admin.action(description="Discard selected dead letters")
    def discard_dead_letters(self, request, queryset):
        def preview(qs, data):
            n = qs.filter(replayed_at=None, discarded_at=None).count()
            return {
                "lines": [
                    f"{n} open dead letter(s) will be closed without running again; their runs stay dead.",
                    "The decision is kept in the audit log.",
                ],
                "rows": [
                    (dl, "discard" if dl.is_open else f"unchanged ({dead_letter_status(dl)})")
                    for dl in qs.select_related("job")[:60]
                ],
                "blocked": n == 0,
            }

        def perform(qs, data):
            done = controls.discard_many(qs, actor=actor_for_user(request.user), note=data["note"])
            return f"Discarded {len(done)} dead letter(s)."

        return confirm_action(
            self,
            request,
            queryset,
            action="discard_dead_letters",
            title="Discard dead letters",
            preview=preview,
            perform=perform,
            submit="Discard",
        )
