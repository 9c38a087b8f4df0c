"""The portal's admin for tenants, job definitions and the audit log (API tokens: jobs/admin/tokens.py,
members: jobs/admin/members.py).

All of it is tenant-scoped (scheduler_project.admin.scoping.TenantScopedAdmin) and
allowed by role: every member reads; definitions are the owners'. Job
definitions are saved through jobs.definitions.save_definition, the one
validation path, so an invalid cron or zone is a form error saying how to fix
it. Their status is read-only here: it changes only through the actions
(jobs/admin/actions.py: pause, resume, cancel), which settle the job's runs
as the API does.
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import OuterRef, Subquery
from django.forms.fields import InvalidJSONInput
from django.http import Http404, JsonResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from jobs import addresses, audit, jitter, quotas
from jobs.admin.actions import JOB_ACTIONS, backfill_step
from jobs.admin.drift import CodeFilter, adopt_into_code, code_column, drift_table
from jobs.admin.signing_secret import page as signing_secret_page
from jobs.admin.tenant_pause import TENANT_ACTIONS
from jobs.audit import actor_for_user
from jobs.definitions import save_definition
from jobs.models import AuditEntry, JobDefinition, JobSigningSecret, Tenant
from jobs.permissions import Revoked
from jobs.quotas import QuotaExceeded
from jobs.roles import OPERATE
from jobs.validation import MAX_JITTER_SECONDS, MAX_JSON_DEPTH
from notify.models import Notification
from runs import limits, presence, rollups
from runs.models import TERMINAL_STATES, Run
from scheduler_project.admin import permissions, scoping
from scheduler_project.admin.display import format_ms, schedule_words, status_text, zoned
from scheduler_project.admin.filters import QueueFilter, TenantFilter
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site


@admin.register(Tenant, site=site)
class TenantAdmin(TenantScopedAdmin):
    list_display = [
        "name",
        "max_definitions",
        "max_pending_runs",
        "max_concurrent_runs",
        "enqueue_rate_per_minute",
        "pause_state",
        "breaker_state",
        "created_at",
    ]
    search_fields = ["name"]
    # Members and their roles are on the Members page (jobs/admin/members.py), through jobs.members.
    readonly_fields = ["members_shown", "breaker_state", "limits_shown"]
    actions = TENANT_ACTIONS

    def has_add_permission(self, request):
        return scoping.sees_all(request.user)

    def has_change_permission(self, request, obj=None):
        return scoping.sees_all(request.user)

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("queue_pauses")

    @admin.display(description="members")
    def members_shown(self, tenant):
        """Who belongs, with their roles; changed on the Members page."""
        if tenant.pk is None:
            return "Save the tenant, then add members on the Members page."
        rows = tenant.memberships.select_related("user").order_by("user__username")
        url = reverse("admin:jobs_membership_changelist") + f"?tenant={tenant.pk}"
        listed = format_html_join(", ", "{} ({})", ((m.user.get_username(), m.role) for m in rows[:100]))
        return format_html('{} <a href="{}">Members and roles</a>', listed or "None yet.", url)

    @admin.display(description="paused")
    def pause_state(self, tenant):
        """The tenant's pause (every queue) or its paused queues, from the prefetched pauses."""
        paused = status_text("paused", {"paused": "‖"})
        if tenant.paused_at is not None:
            return format_html("{} every queue, since {} UTC", paused, f"{tenant.paused_at:%Y-%m-%d %H:%M}")
        queues = [p.queue for p in tenant.queue_pauses.all()]
        return format_html("{} queue {}", paused, ", ".join(queues)) if queues else "—"

    @admin.display(description="limits and use")
    def limits_shown(self, tenant):
        """Every quota, cap and limit of the tenant with its use now (runs.limits, as GET /v1/tenant answers)."""
        if tenant.pk is None:
            return "—"
        rows = format_html_join(
            "",
            '<tr data-limit="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    u.name,
                    u.name,
                    u.scope,
                    "—" if u.limit is None else u.limit,
                    u.used,
                    "at limit" if u.at_limit else "",
                    f"{u.description} Enforced by: {u.enforced_by}.",
                )
                for u in limits.usage(tenant)
            ),
        )
        head = (
            "<tr><th>name</th><th>applies to</th><th>limit</th><th>used now</th><th></th><th>what it counts</th></tr>"
        )
        return format_html('<table class="dt-limits" data-testid="tenant-limits">{}{}</table>', mark_safe(head), rows)

    @admin.display(description="failure breaker")
    def breaker_state(self, tenant):
        """Open (retries held, with the rate that opened it) or closed; runs.breaker opens and closes it."""
        if tenant.breaker_opened_at is None:
            return "closed"
        opened = f"{tenant.breaker_opened_at:%Y-%m-%d %H:%M}"
        detail = tenant.breaker_detail
        return format_html("{} since {} UTC: retries wait ({})", status_text("open", {"open": "⚠"}), opened, detail)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        self.audit_edit(request, form, change)

    def audit_edit(self, request, form, change):
        """One audit entry per add or edit, with the diff of quotas, task prefixes and private networks."""
        fields = [f for f in form.fields if f in form.changed_data or not change]
        before = {f: _audited_value(f, form.initial.get(f)) for f in fields} if change else {}
        diff = audit.changes(before, {f: _audited_value(f, form.cleaned_data.get(f)) for f in fields})
        if diff:
            action = "update" if change else "create"
            audit.record(actor_for_user(request.user), action, form.instance, tenant=form.instance, detail=diff)


def _audited_value(field, value):
    """A tenant form's value as the audit stores it: task prefixes and private networks one per item
    (the networks as CIDRs: a changed note alone is no change)."""
    if field == "task_module_prefixes":
        return [line.strip() for line in (value or "").splitlines() if line.strip()]
    if field == "private_networks":
        return [str(network) for network in addresses.networks(value or "")]
    return value


class PayloadField(forms.JSONField):
    """The payload box: JSON nested deeper than the parser can go is a form error, not a crash.

    What parses is held to MAX_JSON_DEPTH by the model's own validation (jobs.validation.check_payload).
    """

    too_deep = f"nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays; flatten it"

    def to_python(self, value):
        try:
            return super().to_python(value)
        except RecursionError:
            raise ValidationError(self.too_deep, code="invalid") from None

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)


class JobDefinitionForm(forms.ModelForm):
    class Meta:
        model = JobDefinition
        fields = "__all__"
        field_classes = {"payload": PayloadField}
        help_texts = {
            "cron_expr": "Five fields: minute hour day-of-month month day-of-week, e.g. '0 2 * * *' (02:00 daily) or '@hourly'.",
            "time_zone": "An IANA zone such as Europe/Berlin or America/New_York; the schedule is read in this zone.",
            "status": "Changed only by the Pause, Resume and Cancel actions of the job list, which settle the job's runs too.",
            "every_seconds": "Schedule kind every: the period in whole seconds (at least 1), e.g. 90 or 5400 (90 minutes). "
            "Runs fall on start_at + k periods (from 1970-01-01 00:00 UTC without a start), however late one ran; "
            "a DST change moves their local time, never their spacing.",
            "start_at": "Any kind: no run before this instant (and an every schedule counts from it). Empty: no start.",
            "end_at": "Any kind: no run at or after this instant. Empty: no end.",
            "remaining_runs": "Any kind: run this many more times, then stop; it counts down as runs are scheduled "
            "(skipped occurrences, triggers and backfills do not count). Saving a number sets the count anew. "
            "Empty: no limit.",
        }

    jitter_seconds = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_JITTER_SECONDS,
        label="Jitter seconds",
        help_text="Spread starts: each job gets a fixed offset in [0, jitter) seconds. Empty: Duetime chooses "
        "(10 % of the schedule's shortest interval, at most 300 s; chosen again when the schedule changes); "
        "0 opts out. See the heatmap.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._optional_http_fields()
        if "concurrency_group_limit" in self.fields:  # left empty: 1, a mutex (the model's default)
            self.fields["concurrency_group_limit"].required = False
        job = self.instance
        if job.pk is not None:
            self.fields["jitter_seconds"].help_text = (
                f"Now: {jitter.describe(job)}. " + self.fields["jitter_seconds"].help_text
            )
            if job.jitter_is_default:
                self.initial["jitter_seconds"] = None  # Duetime's choice: left empty, so saving keeps it Duetime's

    def _optional_http_fields(self):
        # Left out of a form posted without them (a script, an older page): the defaults, as for the API's body.
        # A viewer's read-only page has neither field.
        for name in ("http_method", "http_headers"):
            if name in self.fields:
                self.fields[name].required = False

    def clean_http_method(self):
        return self.cleaned_data.get("http_method") or JobDefinition.HttpMethod.POST

    def clean_http_headers(self):
        headers = self.cleaned_data.get("http_headers")
        return {} if headers in (None, "") else headers

    def state_jitter(self, job):
        """What the box says to jobs.jitter: empty, Duetime chooses; a number, the owner's."""
        seconds = self.cleaned_data.get("jitter_seconds")
        if seconds is None:
            job.jitter_seconds, job.jitter_is_default = None, True
        else:
            job.jitter_seconds, job.jitter_is_default = seconds, False

    def clean_concurrency_group_limit(self):
        value = self.cleaned_data.get("concurrency_group_limit")
        return 1 if value is None else value

    def clean(self):
        data = super().clean()
        if data.get("tenant") and self.instance.pk is None:
            try:
                quotas.check_definitions(data["tenant"])
            except QuotaExceeded as exc:
                raise ValidationError(f"Capped by quota: {exc}") from exc
        return data


@admin.register(JobDefinition, site=site)
class JobDefinitionAdmin(TenantScopedAdmin):
    form = JobDefinitionForm
    list_display = [
        "name",
        "tenant",
        "status_label",
        "schedule",
        "next_due",
        "last_outcome",
        "p99_lateness_24h",
        "declared_in_code",
    ]
    list_display_links = ["name"]
    list_filter = [TenantFilter, "status", QueueFilter, "priority", "schedule_kind", CodeFilter]
    search_fields = ["name", "target_ref"]
    list_select_related = ["tenant"]
    list_per_page = 50
    actions = [*JOB_ACTIONS, adopt_into_code]
    # `status` is read-only: the actions change it through runs.controls, which cancel the runs of a
    # cancelled job and record the occurrences a resumed job passed over; a bare save() would do neither.
    readonly_fields = [
        "status",
        "code_drift",
        "schedule_preview",
        "notifications_sent",
        "signing_secret_shown",
        "next_due_at",
        "shard",
        "version",
        "created_at",
        "updated_at",
    ]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "status", "code_drift"]}),
        (
            "Schedule",
            {
                "fields": [
                    "schedule_kind",
                    "cron_expr",
                    "run_at",
                    "every_seconds",
                    "time_zone",
                    "start_at",
                    "end_at",
                    "remaining_runs",
                    "schedule_preview",
                    "jitter_seconds",
                    "missed_run_policy",
                    "starting_deadline_seconds",
                    "overlap_policy",
                ]
            },
        ),
        (
            "Execution",
            {
                "fields": [
                    "target_kind",
                    "target_ref",
                    "payload",
                    "queue",
                    "priority",
                    "timeout_seconds",
                    "concurrency",
                    "concurrency_group",
                    "concurrency_group_limit",
                ]
            },
        ),
        (
            "HTTP call",
            {
                "description": "For http targets: how the URL is called and signed (docs/tasks.md, HTTP targets).",
                "fields": ["http_method", "http_headers", "http_bearer_secret", "signing_secret_shown"],
            },
        ),
        ("Retries", {"fields": ["max_attempts", "retry_base_seconds", "retry_max_seconds"]}),
        (
            "Owner notifications",
            {
                "description": "Who hears of dead letters, skip streaks and lateness (docs/operations.md).",
                "fields": [
                    "owner_email",
                    "owner_webhook_url",
                    "notify_lateness_p99_seconds",
                    "notify_skip_streak",
                    "notifications_sent",
                ],
            },
        ),
        (
            "Bookkeeping",
            {"classes": ["collapse"], "fields": ["next_due_at", "shard", "version", "created_at", "updated_at"]},
        ),
    ]

    class Media:
        js = ["portal/schedule_preview.js"]
        css = {"all": ["portal/portal.css"]}

    def has_add_permission(self, request):
        return self.may_edit(request)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        return fields + ["tenant", "name"] if obj is not None else fields

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if request.method == "GET" and match and match.url_name == "jobs_jobdefinition_changelist":
            # Newest finished run per job: a backward walk of run_history_by_job.
            last = Run.objects.filter(job=OuterRef("pk"), state__in=TERMINAL_STATES).order_by("-id")
            queryset = queryset.annotate(
                last_state=Subquery(last.values("state")[:1]), last_error=Subquery(last.values("last_error")[:1])
            )
        return queryset

    @admin.display(description="status", ordering="status")
    def status_label(self, job):
        return status_text(job.status)

    @admin.display(description="schedule")
    def schedule(self, job):
        return schedule_words(job)

    @admin.display(description="next due (job zone, UTC)", ordering="next_due_at")
    def next_due(self, job):
        return zoned(job.next_due_at, job.time_zone)

    @admin.display(description="last run")
    def last_outcome(self, job):
        state = getattr(job, "last_state", None)
        if not state:
            return "—"
        error = (getattr(job, "last_error", "") or "")[:200]
        return format_html('<span title="{}">{}</span>', error, status_text(state))

    @admin.display(description="p99 lateness, 24 h")
    def p99_lateness_24h(self, job):
        summary = getattr(job, "lateness_24h", None) or rollups.job_lateness(job, timezone.now())
        return format_ms(summary.get("p99"))

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        cl = getattr(response, "context_data", {}).get("cl")
        if cl is not None:
            # One rollup query for the page's p99 column instead of one per row.
            jobs = list(cl.result_list)
            summaries = rollups.jobs_lateness([j.pk for j in jobs], timezone.now())
            for job in jobs:
                job.lateness_24h = summaries[job.pk]
        return response

    @admin.display(description="sent lately")
    def notifications_sent(self, job):
        """The job's last five notifications (notification_by_job), and a link to all of them."""
        if not job.pk:
            return "—"
        latest = Notification.objects.filter(job=job).order_by("-created_at", "-id")[:5]
        items = format_html_join(
            "",
            "<li>{} {} {} to {}: {}</li>",
            (
                (n.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"), n.kind, n.channel, n.recipient, n.status)
                for n in latest
            ),
        )
        url = reverse("admin:notify_notification_changelist") + f"?job={job.pk}"
        listed = format_html('<ul class="portal-list" data-testid="job-notifications">{}</ul>', items) if items else ""
        return format_html('{}<a href="{}">All notifications of this job</a>', listed or "None yet. ", url)

    @admin.display(description="next occurrences")
    def schedule_preview(self, job):
        url = reverse("admin:portal_schedule_preview")
        overview = reverse("admin:portal_job", args=[job.pk]) if job.pk else ""
        link = (
            format_html(' <a href="{}">Job page: history and why the last run failed</a>', overview) if overview else ""
        )
        return format_html(
            '<div id="schedule-preview" data-url="{}" data-job="{}" aria-live="polite" aria-atomic="true">'
            '<p class="help">Type a cron expression or a period, and a time zone, to see the next runs here.</p></div>{}',
            url,
            job.pk or "",
            link,
        )

    @admin.display(description="signing secret")
    def signing_secret_shown(self, job):
        """The secret's prefix and age, and the page that rotates it; never the secret."""
        if not job.pk or job.target_kind != JobDefinition.TargetKind.HTTP:
            return "Only http jobs are signed."
        current = JobSigningSecret.objects.filter(job=job).first()
        url = reverse("admin:portal_job_signing_secret", args=[job.pk])
        made = f"{current.prefix}…, made {current.rotated_at:%Y-%m-%d %H:%M} UTC. " if current else "None yet. "
        return format_html('{}<a href="{}" data-testid="job-signing-secret-link">Rotate signing secret</a>', made, url)

    def response_add(self, request, obj, post_url_continue=None):
        return self._show_issued_secret(request, obj) or super().response_add(request, obj, post_url_continue)

    def response_change(self, request, obj):
        return self._show_issued_secret(request, obj) or super().response_change(request, obj)

    def _show_issued_secret(self, request, job):
        """The signing secret page, with the secret, when this save made it (the job is new to http): shown once."""
        secret = getattr(job, "issued_signing_secret", None)
        if not secret:
            return None
        messages.success(request, f"{job.name} was saved. Its calls are signed with the secret below.")
        return signing_secret_page(request, job, secret)

    def save_model(self, request, obj, form, change):
        form.state_jitter(obj)
        save_definition(obj, actor_for_user(request.user))
        messages.info(request, f"Jitter of {obj.name}: {jitter.describe(obj)}.")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The edit page, with a warning when nothing running would take the job's runs, one when
        only thread-pool workers run them (soft timeouts), and one when the job is declared in code (an edit
        here is drift)."""
        if request.method == "GET":
            job = self.get_object(request, object_id)
            if job is not None and job.status == JobDefinition.Status.ACTIVE:
                for warning in (
                    presence.unserved(job.target_kind, job.queue, tenant_id=job.tenant_id),
                    presence.soft_timeouts(job.target_kind, job.queue, job.timeout_seconds, tenant_id=job.tenant_id),
                ):
                    if warning:
                        messages.warning(request, warning)
            if job is not None and job.managed_by:
                messages.warning(
                    request,
                    f"{job.name} is declared in code (set {job.managed_by}). You may edit it here: the edit shows as "
                    "drift until the set's next apply reverts it, or until you adopt it into code.",
                )
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="code")
    def declared_in_code(self, job):
        return code_column(job)

    @admin.display(description="declared in code")
    def code_drift(self, job):
        return drift_table(job)

    def get_urls(self):
        return [
            path(
                "backfill-step/",
                self.admin_site.admin_view(self.backfill_step_view),
                name="jobs_jobdefinition_backfill_step",
            ),
        ] + super().get_urls()

    def backfill_step_view(self, request):
        """POST one backfill chunk for the progress page; answers JSON."""
        if request.method != "POST":
            raise Http404
        job = (
            scoping.scope(JobDefinition.objects.select_related("tenant"), request.user)
            .filter(pk=request.POST.get("job"))
            .first()
        )
        if job is None:
            raise Http404("No such job.")
        # Backfill is an operation (it adds runs, it edits no definition): checked at every chunk.
        permissions.require(request, [job.tenant_id], OPERATE, "Backfill")
        try:  # a crafted POST is a 400 like any bad chunk: a day that does not exist (ValueError), no offset
            cursor, end = parse_datetime(request.POST.get("cursor", "")), parse_datetime(request.POST.get("end", ""))
            remaining = int(request.POST.get("remaining", "0"))
            if cursor is None or end is None or timezone.is_naive(cursor) or timezone.is_naive(end):
                raise ValueError("cursor and end must be ISO 8601 instants with an offset")
            created, following, done = backfill_step(
                job,
                cursor,
                end,
                remaining,
                actor=actor_for_user(request.user),
                note=request.POST.get("note", ""),
                ignore_windows=request.POST.get("ignore_windows") == "1",
            )
        except (ValueError, ValidationError) as exc:
            messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
            return JsonResponse({"error": "; ".join(messages)}, status=400)
        except QuotaExceeded as exc:
            return JsonResponse({"error": f"capped by quota: {exc}"}, status=429)
        except Revoked as exc:
            return JsonResponse({"error": str(exc)}, status=403)
        return JsonResponse(
            {"created": created, "cursor": following.isoformat(), "remaining": remaining - created, "done": done}
        )


@admin.register(AuditEntry, site=site)
class AuditEntryAdmin(TenantScopedAdmin):
    """Read-only and searchable: nobody edits history."""

    list_display = ["at", "actor", "action", "object_type", "object_repr", "tenant", "note"]
    list_filter = ["action", "object_type", TenantFilter]
    search_fields = ["actor", "object_repr", "note", "object_id", "action"]
    date_hierarchy = "at"
    list_select_related = ["tenant"]
    show_full_result_count = False

    def has_change_permission(self, request, obj=None):
        return False
