from django.contrib import admin

from jobs.models import ApiToken, AuditEntry, JobDefinition, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "max_definitions", "max_pending_runs", "max_concurrent_runs", "created_at"]
    search_fields = ["name"]
    filter_horizontal = ["members"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "tenant", "kind", "queues", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["kind", "tenant"]
    search_fields = ["name", "prefix", "tenant__name"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]

    def has_add_permission(self, request):
        return False  # tokens are issued by `create_token`, which shows the secret once


@admin.register(JobDefinition)
class JobDefinitionAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "status", "schedule_kind", "cron_expr", "time_zone", "queue", "priority", "next_due_at"]
    list_filter = ["status", "schedule_kind", "priority", "queue", "tenant"]
    search_fields = ["name", "tenant__name", "target_ref"]
    readonly_fields = ["next_due_at", "shard", "version", "created_at", "updated_at"]

    def save_model(self, request, obj, form, change):
        from jobs.audit import actor_for_user
        from jobs.definitions import save_definition

        save_definition(obj, actor_for_user(request.user))


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["at", "actor", "action", "object_type", "object_repr", "tenant", "note"]
    list_filter = ["action", "object_type", "tenant"]
    search_fields = ["actor", "object_repr", "note", "object_id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
