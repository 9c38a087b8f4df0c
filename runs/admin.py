from django.contrib import admin

from runs.models import Attempt, Run


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ["attempt", "fencing_token", "worker_id", "available_at", "started_at", "ended_at", "outcome", "error"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "tenant", "state", "due_at", "available_at", "attempt", "queue", "worker_id"]
    list_filter = ["state", "origin", "priority", "queue", "tenant"]
    search_fields = ["job__name", "idempotency_key", "worker_id"]
    date_hierarchy = "due_at"
    list_select_related = ["job", "tenant"]
    inlines = [AttemptInline]
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # runs change state only through actions (transitions.py)
