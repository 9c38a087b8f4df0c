"""The dead-letter queue: runs that exhausted their attempts or failed for good."""

from django.db import models
from django.db.models import Q

from jobs.models import JobDefinition, Tenant
from runs import partitions
from runs.models import OPEN_DAY, Run


class DeadLetter(models.Model):
    """One death of a run. Replay moves the run back to `scheduled` (same
    idempotency key, a fresh attempt budget); a run that dies again gets a new
    dead letter, so the history of deaths is kept."""

    # No database constraint: on PostgreSQL runs_run's key is (id, history_day), see Attempt.run. A letter
    # is resolved no later than its run goes into history (replay: the run is pending again; discard: both
    # move to that day), so retention never drops a run before its letters; runs.transitions and runs/sql
    # are the only writers.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="dead_letters", db_constraint=False)
    # No database constraints to jobs either, as for Run.job: a dropped day must not lock the jobs tables.
    job = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="dead_letters", db_constraint=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="dead_letters", db_constraint=False)
    last_error = models.TextField(blank=True)
    dead_at = models.DateTimeField()
    replayed_at = models.DateTimeField(null=True, blank=True)
    discarded_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=200, blank=True, help_text="Who replayed or discarded it.")
    history_day = models.DateField(
        default=OPEN_DAY,
        help_text="9999-12-31 while open; then the day it was resolved, which decides when retention drops it.",
    )

    class Meta:
        ordering = ["-dead_at", "-id"]
        # PostgreSQL: partitioned by history_day like runs (runs/partitions.py); open letters are all in the
        # open partition, whose unique index keeps deadletter_one_open_per_run there.
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
            # Open letters are never history: retention keeps them (and their dead runs) until resolved.
            models.CheckConstraint(
                condition=Q(replayed_at__isnull=False) | Q(discarded_at__isnull=False) | Q(history_day=OPEN_DAY),
                name="deadletter_open_until_resolved",
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
            # SQLite only (runs.retention's batched delete), like run_by_history_day.
            models.Index(fields=["history_day"], name="deadletter_by_history_day"),
        ]

    def save(self, *args, **kwargs):
        # Letters are written by runs/sql and runs.transitions; one saved through the ORM (fixtures)
        # already resolved goes into history like a resolved one.
        resolved = self.replayed_at or self.discarded_at
        if self._state.adding and resolved and self.history_day == OPEN_DAY:
            self.history_day = partitions.history_day(resolved)
        super().save(*args, **kwargs)

    def __str__(self):
        return f"dead letter {self.pk}: run {self.run_id}"

    @property
    def is_open(self):
        return self.replayed_at is None and self.discarded_at is None
