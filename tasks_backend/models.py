"""What the tasks backend keeps of its own: the holders of unique enqueue keys (tasks_backend.unique)."""

from django.db import models

from jobs.models import Tenant


class UniqueEnqueue(models.Model):
    """A unique enqueue key of a tenant's task and the run that holds it until `expires_at`.

    Written by tasks_backend.unique only: inserted by the first enqueue under
    the key, taken over by compare-and-set once expired, pruned a day after
    it expired. The unique constraint is what makes two enqueues at once
    make one run.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(
        max_length=500, help_text="The task's module path, then the caller's key or an arguments hash."
    )
    # A plain id: runs are partitioned on PostgreSQL, and a foreign key would tie the key to a run's day.
    run_id = models.BigIntegerField(help_text="The run the first enqueue under the key made.")
    expires_at = models.DateTimeField(help_text="Until then an enqueue under the key answers with this run.")

    class Meta:
        constraints = [
            # tasks_backend.unique.hold: one holder per (tenant, key); its lookups use this index too.
            models.UniqueConstraint(fields=["tenant", "key"], name="unique_enqueue_key"),
        ]
        indexes = [
            # tasks_backend.unique.prune: the holds expired for longer than PRUNE_AFTER.
            models.Index(fields=["expires_at"], name="unique_enqueue_by_expiry"),
        ]

    def __str__(self):
        return f"unique key {self.key} -> run {self.run_id}"
