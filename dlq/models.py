"""The dead-letter queue: runs that exhausted their attempts or failed for good."""

from django.db import models
from django.db.models import Q

from jobs.models import JobDefinition, Tenant
from runs.models import Run


class DeadLetter(models.Model):
    """One death of a run. Replay moves the run back to `scheduled` (same
    idempotency key, a fresh attempt budget); a run that dies again gets a new
    dead letter, so the history of deaths is kept."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="dead_letters")
    job = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="dead_letters")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="dead_letters")
    last_error = models.TextField(blank=True)
    dead_at = models.DateTimeField()
    replayed_at = models.DateTimeField(null=True, blank=True)
    discarded_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=200, blank=True, help_text="Who replayed or discarded it.")

    class Meta:
        ordering = ["-dead_at", "-id"]
        constraints = [
            # At most one open dead letter per run: a run dies once per life.
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(replayed_at__isnull=True, discarded_at__isnull=True),
                name="deadletter_one_open_per_run",
            ),
            models.CheckConstraint(
                condition=Q(replayed_at__isnull=True) | Q(discarded_at__isnull=True),
                name="deadletter_replayed_xor_discarded",
            ),
        ]
        indexes = [
            # GET /v1/dlq and the portal's DLQ list: a tenant's open dead letters, newest first.
            models.Index(
                fields=["tenant", "-dead_at"],
                name="deadletter_open_by_tenant",
                condition=Q(replayed_at__isnull=True, discarded_at__isnull=True),
            ),
            # Dashboards: dead letters per job over time.
            models.Index(fields=["job", "dead_at"], name="deadletter_by_job"),
        ]

    def __str__(self):
        return f"dead letter {self.pk}: run {self.run_id}"

    @property
    def is_open(self):
        return self.replayed_at is None and self.discarded_at is None
