"""List filters shared by the portal's lists, each offering only the user's tenants' values.

A related-field filter would list every tenant's jobs and queues; these read
their choices through scheduler_project.admin.scoping instead.
"""

from django.contrib import admin

from jobs.models import JobDefinition
from scheduler_project.admin import scoping


class TenantFilter(admin.SimpleListFilter):
    """Filter by tenant among the user's tenants."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request, model_admin):
        return [(str(t.pk), t.name) for t in scoping.tenants(request.user)[:200]]

    def queryset(self, request, queryset):
        field = getattr(self, "field_path", "tenant")
        if self.value():
            return queryset.filter(**{f"{field}_id": self.value()})
        return queryset


class QueueFilter(admin.SimpleListFilter):
    """Filter by queue (of job definitions or runs) among the queues of the user's jobs."""

    title = parameter_name = "queue"

    def lookups(self, request, model_admin):
        jobs = scoping.scope(JobDefinition.objects.all(), request.user)
        return [(q, q) for q in jobs.order_by("queue").values_list("queue", flat=True).distinct()[:100]]

    def queryset(self, request, queryset):
        return queryset.filter(queue=self.value()) if self.value() else queryset


class JobFilter(admin.SimpleListFilter):
    """Filter runs or dead letters by job among the user's jobs."""

    title = "job"
    parameter_name = "job"

    def lookups(self, request, model_admin):
        jobs = scoping.scope(JobDefinition.objects.select_related("tenant"), request.user)
        return [(str(j.pk), f"{j.tenant.name}/{j.name}") for j in jobs.order_by("tenant__name", "name")[:200]]

    def queryset(self, request, queryset):
        return queryset.filter(job_id=self.value()) if self.value() else queryset
