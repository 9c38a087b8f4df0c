"""Dead letters as the API shows them."""

from rest_framework import serializers

from dlq.models import DeadLetter
from scheduler_project.api.fields import Text


class DeadLetterSerializer(serializers.ModelSerializer):
    job = serializers.CharField(source="job.name", read_only=True)
    tenant = serializers.CharField(source="tenant.name", read_only=True)
    run = serializers.IntegerField(source="run_id", read_only=True)
    status = serializers.SerializerMethodField(help_text="open, replayed or discarded.")

    class Meta:
        model = DeadLetter
        fields = [
            "id",
            "run",
            "job",
            "tenant",
            "status",
            "last_error",
            "dead_at",
            "replayed_at",
            "discarded_at",
            "resolved_by",
        ]
        read_only_fields = fields

    def get_status(self, letter) -> str:
        if letter.replayed_at:
            return "replayed"
        if letter.discarded_at:
            return "discarded"
        return "open"


class ResolveSerializer(serializers.Serializer):
    note = Text(required=False, allow_blank=True, max_length=500, default="", help_text="For the audit log.")
