"""The portal's AdminSite: "Duetime" branding, tenant-based access, dashboards.

Access: an active staff user who is a superuser or belongs to a tenant (see
scheduler_project.admin.scoping); what each one sees is narrowed there too.
Every ModelAdmin of jobs, runs and dlq registers on `site`, and the custom
views (dashboards, job page, schedule preview, heatmap) hang off its URLs so
they share its login, CSRF and look.
"""

from django.contrib import admin
from django.urls import path

from scheduler_project.admin import scoping


class DuetimeAdminSite(admin.AdminSite):
    site_header = "Duetime"
    site_title = "Duetime"
    index_title = "Operations"
    index_template = "portal/index.html"

    def has_permission(self, request):
        return scoping.is_operator(request.user)

    def get_urls(self):
        from jobs.admin import schedule_views
        from runs.admin import dashboards

        portal = [
            path("dashboard/", self.admin_view(dashboards.overview), name="portal_overview"),
            path("dashboard/lateness/", self.admin_view(dashboards.lateness), name="portal_lateness"),
            path("dashboard/heatmap/", self.admin_view(schedule_views.heatmap_page), name="portal_heatmap"),
            path("dashboard/jobs/<int:job_id>/", self.admin_view(dashboards.job_page), name="portal_job"),
            path("schedule-preview/", self.admin_view(schedule_views.preview), name="portal_schedule_preview"),
        ]
        return portal + super().get_urls()

    def each_context(self, request):
        context = super().each_context(request)
        context["portal_tenants"] = list(scoping.tenants(request.user).values_list("name", flat=True)[:50])
        return context


site = DuetimeAdminSite(name="admin")


class TenantScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose lists, detail pages, actions and choices are narrowed
    to the request user's tenants (scheduler_project.admin.scoping)."""

    tenant_field = "tenant"  # path from the model to its tenant

    def get_queryset(self, request):
        return scoping.scope(super().get_queryset(request), request.user, self.tenant_field)

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            from django.http import Http404

            raise Http404("No such object.")  # another tenant's object looks exactly like a missing one
        return obj

    def has_module_permission(self, request):
        return scoping.is_operator(request.user)

    def has_view_permission(self, request, obj=None):
        return scoping.is_operator(request.user)

    def has_change_permission(self, request, obj=None):
        return scoping.is_operator(request.user)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        from jobs.models import JobDefinition, Tenant

        if db_field.related_model is Tenant:
            kwargs["queryset"] = scoping.tenants(request.user)
        elif db_field.related_model is JobDefinition:
            kwargs["queryset"] = scoping.scope(JobDefinition.objects.all(), request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class TenantFilter(admin.SimpleListFilter):
    """Filter by tenant, offering only the user's tenants (a related-field filter would list them all)."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request, model_admin):
        return [(str(t.pk), t.name) for t in scoping.tenants(request.user)[:200]]

    def queryset(self, request, queryset):
        field = getattr(self, "field_path", "tenant")
        if self.value():
            return queryset.filter(**{f"{field}_id": self.value()})
        return queryset


def status_text(value, symbols):
    """A state as a symbol plus its name, so it never depends on colour alone."""
    from django.utils.html import format_html

    return format_html(
        '<span class="dt-state dt-state-{}"><span aria-hidden="true">{} </span>{}</span>',
        value,
        symbols.get(value, "•"),
        value,
    )


STATE_SYMBOLS = {
    "active": "▶",
    "paused": "⏸",
    "cancelled": "✕",
    "scheduled": "◷",
    "ready": "⏵",
    "leased": "⟳",
    "retry_wait": "↻",
    "succeeded": "✓",
    "dead": "☠",
    "skipped": "⤼",
    "failed": "✗",
    "timed_out": "⌛",
    "lease_expired": "⌛",
    "stale": "⊘",
    "open": "●",
    "replayed": "↺",
    "discarded": "🗑",
}
