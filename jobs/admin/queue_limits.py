"""Queue limits in the portal: at most N running and N starts per second or minute on a queue,
for one tenant or (no tenant) for every tenant together. Enforced by the claim (runs.limits).

Like a tenant's quotas, limits are set by superusers only (audited); a tenant's members see the
limits that apply to them, with their use, on the tenant's page (runs.limits.usage).
"""

from django.contrib import admin

from jobs import audit
from jobs.audit import actor_for_user
from jobs.models import QueueLimit
from scheduler_project.admin import scoping
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site

FIELDS = ["tenant", "queue", "max_running", "max_starts", "rate_per"]


@admin.register(QueueLimit, site=site)
class QueueLimitAdmin(TenantScopedAdmin):
    list_display = ["queue", "tenant_shown", "max_running", "max_starts", "rate_per"]
    list_filter = ["queue"]
    fields = FIELDS

    def has_add_permission(self, request):
        return scoping.sees_all(request.user)

    def has_change_permission(self, request, obj=None):
        return scoping.sees_all(request.user)

    def has_delete_permission(self, request, obj=None):
        return scoping.sees_all(request.user)

    @admin.display(description="tenant")
    def tenant_shown(self, limit):
        return limit.tenant.name if limit.tenant_id else "every tenant (platform-wide)"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        before = {f: form.initial.get(f) for f in form.changed_data} if change else {}
        diff = audit.changes(before, {f: _plain(form.cleaned_data.get(f)) for f in form.changed_data})
        audit.record(actor_for_user(request.user), "update" if change else "create", obj, detail=diff)

    def delete_model(self, request, obj):
        audit.record(actor_for_user(request.user), "delete", obj, detail={"queue": obj.queue})
        super().delete_model(request, obj)


def _plain(value):
    return getattr(value, "pk", value)
