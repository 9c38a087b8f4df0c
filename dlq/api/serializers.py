"""Dead letters as the API shows them."""

from rest_framework import serializers

from dlq.models import DeadLetter
from scheduler_project.api.fields import AwareDateTimeField, Boolean, Text


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


BULK_LIMIT = 10_000  # letters one bulk call may change; a larger filter answers `more: true`, call again


class BulkResolveSerializer(serializers.Serializer):
    """Which open dead letters a bulk replay or discard acts on: `ids`, or a filter (`job`, `dead_after`,
    `dead_before`; all open letters when none is given), and whether only to say what would change."""

    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        min_length=1,
        max_length=1000,
        help_text="The letters, by id (at most 1,000). Give ids or a filter, not both.",
    )
    job = Text(required=False, max_length=200, help_text="Only this job's letters.")
    dead_after = AwareDateTimeField(required=False, help_text="Only letters of runs that died at or after this.")
    dead_before = AwareDateTimeField(required=False, help_text="Only letters of runs that died before this.")
    dry_run = Boolean(default=False, help_text="Answer what would change, and change nothing.")
    note = Text(required=False, allow_blank=True, max_length=500, default="", help_text="For the audit log.")

    def validate(self, data):
        if "ids" in data and ({"job", "dead_after", "dead_before"} & data.keys()):
            raise serializers.ValidationError({"ids": "give ids or a filter (job, dead_after, dead_before), not both"})
        if "dead_after" in data and "dead_before" in data and data["dead_after"] >= data["dead_before"]:
            raise serializers.ValidationError({"dead_before": "must be after dead_after"})
        return data


class BulkResultSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(help_text="Open letters the ids or the filter select (up to 10,000).")
    changed = serializers.IntegerField(help_text="Letters this call replayed or discarded (0 on a dry run).")
    letters = serializers.ListField(
        child=serializers.IntegerField(), help_text="Their ids: those changed, or on a dry run those that would be."
    )
    more = serializers.BooleanField(help_text="True when the filter selects more than 10,000: call again.")
