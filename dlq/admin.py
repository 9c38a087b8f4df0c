from django.contrib import admin

from dlq.models import DeadLetter


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "tenant", "dead_at", "last_error", "replayed_at", "discarded_at"]
    list_filter = ["tenant", "dead_at"]
    search_fields = ["job__name", "last_error"]
    list_select_related = ["job", "tenant"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
