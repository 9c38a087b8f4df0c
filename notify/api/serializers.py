"""Owner notifications as the API shows them."""

from rest_framework import serializers

from notify.models import Notification


class NotificationSerializer(serializers.ModelSerializer):
    job = serializers.CharField(
        source="job.name", read_only=True, allow_null=True, help_text="null for a tenant-wide event (breaker_open)."
    )

    class Meta:
        model = Notification
        fields = [
            "id",
            "job",
            "kind",
            "channel",
            "recipient",
            "subject",
            "status",
            "attempts",
            "created_at",
            "sent_at",
            "next_attempt_at",
            "response",
        ]
        read_only_fields = fields
