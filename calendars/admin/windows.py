"""Maintenance windows in the portal: list, add, edit, delete, each through calendars.edits (audited).

Tenant-scoped like every ModelAdmin (scheduler_project.admin.scoping): the job
and calendar choices are the user's tenants' own, and a window naming another
tenant's job or calendar is a form error. A window's page shows its next
intervals and the jobs it holds.
"""

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from calendars import blackouts, edits
from calendars.models import Calendar, Window
from jobs.audit import actor_for_user
from jobs.models import JobDefinition
from scheduler_project.admin import permissions, scoping
from scheduler_project.admin.filters import TenantFilter
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site


@admin.register(Window, site=site)
class WindowAdmin(TenantScopedAdmin):
    list_display = ["name", "tenant", "applies_to", "kind", "when", "resume_policy", "enabled"]
    list_filter = [TenantFilter, "kind", "resume_policy", "enabled"]
    search_fields = ["name", "job__name"]
    list_select_related = ["tenant", "job", "calendar"]
    readonly_fields = ["next_intervals", "held_jobs", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["tenant", "job", "name", "kind", "enabled", "resume_policy", "note"]}),
        ("One-off", {"fields": ["starts_at", "ends_at"], "description": "Kind one-off: from the start to the end."}),
        (
            "Recurring",
            {
                "fields": ["cron_expr", "time_zone", "duration_seconds"],
                "description": "Kind recurring: each occurrence of the cron expression in the zone starts a window "
                "that lasts duration seconds (DST rules as for jobs: docs/dst.md).",
            },
        ),
        ("Business days", {"fields": ["calendar"], "description": "Kind calendar: the calendar's days off."}),
        ("What it does", {"fields": ["next_intervals", "held_jobs", "created_at", "updated_at"]}),
    ]

    def has_add_permission(self, request):
        return self.may_edit(request)

    def has_delete_permission(self, request, obj=None):
        return self.may_edit(request, obj)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.related_model is Calendar:
            calendars = scoping.scope(Calendar.objects.all(), request.user)
            allowed = permissions.tenant_ids_allowing(request, self.edit_role)
            kwargs["queryset"] = calendars if allowed is None else calendars.filter(tenant_id__in=allowed)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="applies to")
    def applies_to(self, window):
        return window.job.name if window.job_id else "every job of the tenant"

    @admin.display(description="when")
    def when(self, window):
        return blackouts.describe(window)

    @admin.display(description="next intervals")
    def next_intervals(self, window):
        if window.pk is None:
            return "Save the window to see when it holds jobs."
        found = blackouts.upcoming(window, timezone.now())
        if not found:
            return "None to come."
        return format_html(
            '<ul class="portal-list" data-testid="window-intervals">{}</ul>',
            format_html_join(
                "",
                "<li>{} to {} UTC: {}</li>",
                ((f"{b.start:%a %Y-%m-%d %H:%M}", f"{b.end:%a %Y-%m-%d %H:%M}", b.name) for b in found),
            ),
        )

    @admin.display(description="jobs it holds")
    def held_jobs(self, window):
        if window.pk is None:
            return "—"
        jobs = JobDefinition.objects.filter(tenant_id=window.tenant_id).exclude(status="cancelled")
        jobs = jobs.filter(pk=window.job_id) if window.job_id else jobs
        shown = list(jobs.order_by("name")[:20])
        more = jobs.count() - len(shown) if len(shown) == 20 else 0
        return format_html(
            "{}{}",
            format_html_join(
                ", ", '<a href="{}">{}</a>', ((reverse("admin:portal_job", args=[j.pk]), j.name) for j in shown)
            )
            or "no job yet",
            f" and {more} more" if more else "",
        )

    def save_model(self, request, obj, form, change):
        edits.save_window(obj, actor=actor_for_user(request.user), validate=False)  # the form ran clean()

    def delete_model(self, request, obj):
        edits.delete_windows(Window.objects.filter(pk=obj.pk), actor=actor_for_user(request.user))

    def delete_queryset(self, request, queryset):
        edits.delete_windows(queryset, actor=actor_for_user(request.user))
