"""Runs (one scheduled execution), their attempts, the scheduler's lease rows,
the consumers that announced themselves, and the portal's rollups of
finished attempts.

A run enters the table only through runs.enqueue.insert_runs, and its state
only changes through runs/transitions.py (and the hot SQL in runs/sql/ that it
owns), always as a compare-and-set on the expected state and fencing token.
Never read a run, modify it and save() it.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from jobs.models import JobDefinition, Tenant
from runs import partitions
from runs.partitions import OPEN_DAY

# The families of Run.State, one tuple each; everything that asks "which
# states are ..." uses these.
CLAIMABLE_STATES = ("scheduled", "retry_wait")  # waiting for a claim (ready once available_at has passed)
PENDING_STATES = (*CLAIMABLE_STATES, "leased")  # not finished: what Tenant.max_pending_runs counts
TERMINAL_STATES = (
    "succeeded",
    "dead",
    "cancelled",
    "skipped",
)  # finished_at is set; only `dead` has a way out (replay)
# Where a row lives (runs/partitions.py): pending runs are open (history_day = OPEN_DAY), these are
# history (the day they finished); a dead run stays open while its dead letter is, so retention never
# drops it before someone replays or discards it.
HISTORY_STATES = ("succeeded", "cancelled", "skipped")


class RunQuerySet(models.QuerySet):
    def ready(self, now):
        """Runs a claim may take at `now`: claimable, and available_at has passed.

        "ready" is derived, never stored; this is its one definition
        in the ORM (the claim SQL in runs/sql/ states the same condition).
        """
        return self.filter(state__in=CLAIMABLE_STATES, available_at__lte=now, history_day=OPEN_DAY)

    def pending(self):
        """Runs not finished yet: waiting, or leased to a worker (all in the open partition)."""
        return self.filter(state__in=PENDING_STATES, history_day=OPEN_DAY)


class Run(models.Model):
    class State(models.TextChoices):
        # Every move below is a function of runs/transitions.py (its TRANSITIONS table).
        # In: inserted (materialise, enqueue, trigger, backfill: runs.enqueue.insert_runs),
        # replay (from dead), release (a first attempt given back).
        # Out: lease (-> leased), cancel, overlap policy forbid (-> skipped).
        SCHEDULED = "scheduled"
        # In: lease. Out: complete (-> succeeded, retry_wait, dead), reaper on
        # lease expiry (-> retry_wait, dead), release (-> scheduled, retry_wait),
        # cancel and overlap `replace` (-> cancelled).
        LEASED = "leased"
        # In: a failed or expired attempt with attempts left, release.
        # Out: lease once available_at passes, cancel, overlap policy forbid (-> skipped).
        RETRY_WAIT = "retry_wait"
        SUCCEEDED = "succeeded"  # terminal
        # In: attempts exhausted or a permanent error; a dlq.DeadLetter is written.
        # Out: replay (-> scheduled, fresh attempt budget).
        DEAD = "dead"
        CANCELLED = "cancelled"  # terminal; `reason` says why
        SKIPPED = "skipped"  # terminal; `reason` says which policy skipped it (missed runs are inserted skipped)

    class Origin(models.TextChoices):
        SCHEDULE = "schedule"  # a cron or `at` occurrence; unique per (job, due_at)
        TRIGGER = "trigger"  # "trigger now" from the portal or API
        API = "api"  # one-off or delayed run, optionally with an idempotency key
        BACKFILL = "backfill"  # a past occurrence run again on request

    # No single-column FK indexes: every index costs a write on each state
    # change, and the composite indexes below lead with these columns.
    # No database constraints either: dropping a day of history (runs.retention) drops its partition, and
    # dropping a table that references jobs_tenant or jobs_jobdefinition takes ACCESS EXCLUSIVE on them,
    # which every claim would queue behind. Only runs.enqueue.insert_runs writes these columns (from loaded
    # jobs), and deletes go through the ORM, whose CASCADE removes a job's or tenant's runs.
    job = models.ForeignKey(
        JobDefinition, on_delete=models.CASCADE, related_name="runs", db_index=False, db_constraint=False
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="runs", db_index=False, db_constraint=False
    )
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.SCHEDULE)
    due_at = models.DateTimeField(help_text="The occurrence's nominal instant; the run's identity.")
    available_at = models.DateTimeField(help_text="When the run may next be claimed (due + jitter, or retry backoff).")
    state = models.CharField(max_length=12, choices=State.choices, default=State.SCHEDULED)
    attempt = models.PositiveIntegerField(default=0, help_text="Attempts started so far.")
    max_attempts = models.PositiveIntegerField(default=5, help_text="Attempt number after which a failure is final.")
    timeout_seconds = models.PositiveIntegerField(default=900)
    idempotency_key = models.CharField(max_length=300)
    fencing_token = models.BigIntegerField(null=True, blank=True)
    worker_id = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    queue = models.CharField(max_length=64)
    priority = models.SmallIntegerField(choices=JobDefinition.Priority.choices, default=JobDefinition.Priority.DEFAULT)
    shard = models.SmallIntegerField(default=0)
    payload = models.JSONField(default=dict, blank=True)
    args = models.JSONField(
        null=True,
        blank=True,
        help_text="A Django task's positional arguments, passed before the payload's keyword arguments "
        "(tasks_backend); empty for every other run.",
    )
    started_at = models.DateTimeField(null=True, blank=True, help_text="Start of the current or last attempt.")
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    reason = models.TextField(blank=True, help_text="Why it was skipped or cancelled.")
    covers_until = models.DateTimeField(
        null=True, blank=True, help_text="A skipped summary row stands for every occurrence from due_at to here."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    history_day = models.DateField(
        default=OPEN_DAY,
        help_text="9999-12-31 while open (pending, or dead with an open dead letter); then the day it went into "
        "history, which decides when retention drops it (runs/partitions.py).",
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        # PostgreSQL: partitioned by history_day (runs/partitions.py), primary key (id, history_day). A unique
        # index there must hold the partition key, so the two unique constraints below exist on SQLite only;
        # on PostgreSQL the open partition has them as unique indexes, each day partition as plain ones, and
        # runs/sql insert_runs checks history before inserting into the open partition (enqueue.insert_runs).
        constraints = [
            # A second materialisation (failover, retry after a crash) is a no-op.
            models.UniqueConstraint(
                fields=["job", "due_at"], condition=Q(origin="schedule"), name="run_unique_occurrence"
            ),
            # POST /v1/jobs/{name}/runs with an Idempotency-Key returns the same run.
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"], condition=Q(origin="api"), name="run_unique_api_key"
            ),
            models.CheckConstraint(
                condition=Q(
                    state__in=["scheduled", "leased", "retry_wait", "succeeded", "dead", "cancelled", "skipped"]
                ),
                name="run_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(origin__in=["schedule", "trigger", "api", "backfill"]), name="run_origin_valid"
            ),
            models.CheckConstraint(
                condition=~Q(state="leased") | Q(lease_expires_at__isnull=False, fencing_token__isnull=False),
                name="run_leased_has_lease",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=TERMINAL_STATES) | Q(finished_at__isnull=False),
                name="run_terminal_has_finished_at",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=["skipped", "cancelled"]) | ~Q(reason=""), name="run_skip_cancel_has_reason"
            ),
            models.CheckConstraint(condition=Q(available_at__gte=models.F("due_at")), name="run_never_available_early"),
            models.CheckConstraint(condition=Q(priority__in=[0, 1, 2]), name="run_priority_valid"),
            # Claims, heartbeats and completions read the open partition only: nothing pending is ever elsewhere.
            models.CheckConstraint(
                condition=~Q(state__in=PENDING_STATES) | Q(history_day=OPEN_DAY), name="run_pending_is_open"
            ),
            models.CheckConstraint(
                condition=~Q(state__in=HISTORY_STATES) | ~Q(history_day=OPEN_DAY), name="run_finished_is_history"
            ),
        ]
        indexes = [
            # runs/sql claim_batch: per tenant and queue, due runs by priority then
            # age (one probe per tenant, queue and priority gives the round-robin).
            # Partial, so finished runs never enter it, and the range scan on
            # available_at stops at the first run not yet due, however many are
            # scheduled ahead.
            models.Index(
                fields=["tenant", "queue", "priority", "available_at"],
                name="run_claimable",
                condition=Q(state__in=CLAIMABLE_STATES),
            ),
            # The leased runs, a set bounded by the workers' slots: runs/sql
            # claim_candidates counts them per tenant and per job (caps,
            # concurrency, overlap), and expire_leases (the reaper) scans them
            # for expired leases. One index instead of two: each costs a write
            # on every lease.
            models.Index(fields=["tenant", "job"], name="run_leased_by_owner", condition=Q(state="leased")),
            # Job history (API GET /v1/jobs/{name}/runs, portal job page): newest first.
            models.Index(fields=["job", "-id"], name="run_history_by_job"),
            # Dashboards (runs.admin.stats.state_counts): a tenant's cancelled and
            # skipped runs by due time. Partial: the states every run passes
            # through (leased, succeeded) would cost a write here on each move.
            models.Index(
                fields=["tenant", "state", "due_at"],
                name="run_skipped_cancelled",
                condition=Q(state__in=["cancelled", "skipped"]),
            ),
            # SQLite only (runs.retention's batched delete); on PostgreSQL retention drops whole partitions.
            models.Index(fields=["history_day"], name="run_by_history_day"),
        ]

    def save(self, *args, **kwargs):
        # Engine code inserts runs through runs.enqueue.insert_runs only; a run saved through the ORM
        # (fixtures, the shell) goes where that insert would put it, so run_finished_is_history holds.
        if self._state.adding and self.state in HISTORY_STATES and self.history_day == OPEN_DAY:
            self.history_day = partitions.history_day(self.finished_at or timezone.now())
        adding = self._state.adding
        super().save(*args, **kwargs)
        if adding and self.state in CLAIMABLE_STATES:
            ReadyMark.objects.create(tenant_id=self.tenant_id, queue=self.queue, due_at=self.available_at)

    def __str__(self):
        # The job's name, not its id: "run 21 of 1" read like a count in the portal's previews.
        return f"run {self.pk} of {self.job.name} due {self.due_at:%Y-%m-%d %H:%M:%S%z} ({self.state})"

    @property
    def is_terminal(self):
        return self.state in TERMINAL_STATES

    def is_ready(self, now):
        """RunQuerySet.ready for one loaded run."""
        return self.state in CLAIMABLE_STATES and self.available_at <= now


class ReadyMark(models.Model):
    """The ready set: "`tenant` may have a claimable run on `queue` from `due_at` on".

    The invariant: every claimable run has a mark of its tenant and queue at or
    before its available_at. Each statement that makes runs claimable (insert,
    retry, release, replay) adds a mark per (tenant, queue) at the earliest
    available_at of those runs, in its own transaction; a claim reads only the
    marks due now (readymark_due), so a tenant whose runs are all scheduled
    ahead costs a claim nothing. A claim deletes the due marks of a (tenant,
    queue) that has no due claimable run left and, in the same statement (one
    snapshot), adds one at its next claimable run (runs/sql lock_ready_tenants).
    Marks are inserted and deleted, never updated: a writer takes no lock and
    waits for no claim, and a mark a claim cannot see is one it cannot delete.
    A mark too early only costs a claim a look; none is ever too late.
    """

    # No database constraint: a run's tenant has none either (see Run.tenant).
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False)
    queue = models.CharField(max_length=64)
    due_at = models.DateTimeField()

    class Meta:
        indexes = [
            # runs/sql lock_ready_tenants: the marks due now on the wanted queues (a range per queue),
            # with their tenants (an index-only scan).
            models.Index(fields=["queue", "due_at", "tenant"], name="readymark_due"),
        ]


class Attempt(models.Model):
    """One execution of a run, written when it ends (complete or reap)."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        TIMED_OUT = "timed_out"
        LEASE_EXPIRED = "lease_expired"
        STALE = "stale"  # the lease was taken away (overlap `replace`, cancel)

    # No database constraint: on PostgreSQL runs_run's key is (id, history_day), which a foreign key would
    # have to name. An attempt lives in its run's partition (same history_day, moved with it by
    # runs.transitions and runs/sql), so a dropped day takes a run's attempts with it; what the database no
    # longer refuses (an attempt of a run that does not exist) only runs.transitions and runs/sql write.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts", db_index=False, db_constraint=False)
    attempt = models.PositiveIntegerField()
    fencing_token = models.BigIntegerField()
    worker_id = models.CharField(max_length=200, blank=True)
    available_at = models.DateTimeField(help_text="The available_at the attempt was claimed against.")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    outcome = models.CharField(max_length=14, choices=Outcome.choices)
    error = models.TextField(blank=True)
    return_value = models.JSONField(
        null=True, blank=True, help_text="What the task returned (succeeded attempts of python tasks; else empty)."
    )
    history_day = models.DateField(
        default=OPEN_DAY, help_text="Its run's history_day: it lives in its run's partition."
    )

    class Meta:
        ordering = ["run", "attempt"]
        constraints = [
            # PostgreSQL: (run, attempt, history_day), which is the same thing since a run's attempts share its day.
            models.UniqueConstraint(fields=["run", "attempt"], name="attempt_unique_per_run"),
            models.CheckConstraint(
                condition=Q(outcome__in=["succeeded", "failed", "timed_out", "lease_expired", "stale"]),
                name="attempt_outcome_valid",
            ),
            # The promise: no attempt starts before the run was available.
            models.CheckConstraint(condition=Q(started_at__gte=models.F("available_at")), name="attempt_never_early"),
        ]
        indexes = [
            # Dashboards: lateness percentiles over recent first attempts.
            models.Index(fields=["started_at"], name="attempt_by_start", condition=Q(attempt=1)),
            # SQLite only (runs.retention's batched delete), like run_by_history_day.
            models.Index(fields=["history_day"], name="attempt_by_history_day"),
        ]

    def save(self, *args, **kwargs):
        # Attempts are written with their run's history_day by runs/sql and runs.transitions; one saved
        # through the ORM (fixtures) takes its run's as it is in the database now.
        if self._state.adding and self.history_day == OPEN_DAY:
            self.history_day = (
                Run.objects.filter(pk=self.run_id).values_list("history_day", flat=True).first() or OPEN_DAY
            )
        super().save(*args, **kwargs)

    def __str__(self):
        return f"attempt {self.attempt} of run {self.run_id}: {self.outcome}"

    @property
    def lateness(self):
        return self.started_at - self.available_at


class ShardLease(models.Model):
    """Ownership of one scheduler shard (or the `leader` row) by one process.

    Taken and renewed by compare-and-set; `epoch` comes from the fencing
    sequence, so a node that lost its lease is recognised by an old epoch.
    """

    name = models.CharField(max_length=40, primary_key=True)
    owner = models.CharField(max_length=200)
    epoch = models.BigIntegerField()
    expires_at = models.DateTimeField()

    def __str__(self):
        return f"{self.name} owned by {self.owner} (epoch {self.epoch})"


class Consumer(models.Model):
    """A running consumer of runs (a run_worker, an external lease client) that announced itself.

    Written by runs.presence only: upserted at start and every few seconds,
    deleted on a graceful stop, and read as "no longer running" once
    `expires_at` passed (rows long expired are pruned). It answers the job
    page's question: does anything run this kind of job on this queue?
    """

    name = models.CharField(max_length=200, primary_key=True)
    kinds = models.JSONField(default=list, help_text="The target kinds it executes.")
    queues = models.JSONField(null=True, blank=True, help_text="The queues it serves; empty: every queue.")
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="The one tenant whose runs it takes (an external worker's token); empty: every tenant.",
    )
    pool = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="A run_worker's pool (threads: soft timeouts; processes: a handler is killed at its timeout); "
        "empty for other consumers.",
    )
    last_seen = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [
            # runs.presence.serving (the consumers still running) and prune (those long gone).
            models.Index(fields=["expires_at"], name="consumer_by_expiry"),
        ]

    def __str__(self):
        return f"consumer {self.name}"

    def serves(self, kind, queue, tenant_id=None):
        """Whether it takes runs of `kind` on `queue` (of the tenant `tenant_id`, when given)."""
        if self.tenant_id is not None and tenant_id is not None and self.tenant_id != tenant_id:
            return False
        return kind in self.kinds and (self.queues is None or queue in self.queues)


class HistoryDay(models.Model):
    """PostgreSQL: a day that has its own partitions of runs, attempts and dead letters (runs/partitions.py).

    Not managed by Django (created by migration runs/0006 on PostgreSQL only):
    its rows follow the partitions, which Django knows nothing of, and a test
    flush must not empty it while they stay.
    """

    day = models.DateField(primary_key=True)

    class Meta:
        managed = False
        db_table = "runs_history_day"

    def __str__(self):
        return f"history partitions of {self.day}"


class Counter(models.Model):
    """SQLite's stand-in for PostgreSQL sequences (the fencing token source)."""

    name = models.CharField(max_length=40, primary_key=True)
    value = models.BigIntegerField(default=0)


class Generation(models.Model):
    """The restore generation: one row (id 1), the high bits of every fencing token (runs/generations.py).

    Bumped by `manage.py after_restore` and, on PostgreSQL, by the first
    connection of any process to a server that is not the one `server` names
    (system identifier / timeline / database oid): a restore, a promotion, a
    dump loaded elsewhere. Written only by the bump_generation query.
    """

    id = models.SmallIntegerField(primary_key=True, default=1)
    number = models.BigIntegerField(default=0)
    server = models.CharField(max_length=100, blank=True)  # PostgreSQL: "system identifier/timeline/db oid"
    changed_at = models.DateTimeField(null=True)
    reason = models.TextField(blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="generation_one_row")]

    def __str__(self):
        return f"restore generation {self.number}"


class RollupCursor(models.Model):
    """How far the rollup has read a source table (the last id folded in)."""

    name = models.CharField(max_length=40, primary_key=True)
    last_id = models.BigIntegerField(default=0)


class _Counts(models.Model):
    """Counts of attempts in one bucket (runs.rollups folds attempts into them)."""

    first_attempts = models.PositiveIntegerField(default=0)
    lateness_ms_sum = models.BigIntegerField(default=0)
    lateness_ms_max = models.BigIntegerField(default=0)
    histogram = models.JSONField(default=dict, help_text="{bin: count} of first-attempt lateness (see runs.rollups).")
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    timed_out = models.PositiveIntegerField(default=0)
    lease_expired = models.PositiveIntegerField(default=0)
    stale = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class TenantMinute(_Counts):
    """One tenant's attempts in one minute: first-attempt lateness by start, outcomes by end."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    minute = models.DateTimeField()

    class Meta:
        constraints = [
            # Dashboards: a tenant's minutes over the last hour or day (range scan).
            models.UniqueConstraint(fields=["tenant", "minute"], name="tenantminute_unique"),
        ]
        indexes = [
            # runs.rollups.prune: rows past the retention.
            models.Index(fields=["minute"], name="tenantminute_by_minute"),
        ]


class JobHour(_Counts):
    """One job's attempts in one hour: the job list's p99 over 24 h and the job page."""

    job = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="+", db_index=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    hour = models.DateTimeField()

    class Meta:
        constraints = [
            # Job list and job page: one job's last 24 hours.
            models.UniqueConstraint(fields=["job", "hour"], name="jobhour_unique"),
        ]
        indexes = [
            # runs.rollups.prune: rows past the retention.
            models.Index(fields=["hour"], name="jobhour_by_hour"),
        ]


class JobDay(_Counts):
    """One job's attempts in one UTC day, kept 400 days: the job page's history after the runs are dropped."""

    job = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="+", db_index=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    day = models.DateTimeField(help_text="Midnight UTC.")

    class Meta:
        constraints = [
            # Job page: one job's days over the last 400 (range scan).
            models.UniqueConstraint(fields=["job", "day"], name="jobday_unique"),
        ]
        indexes = [
            # runs.rollups.prune: rows past the 400 days.
            models.Index(fields=["day"], name="jobday_by_day"),
        ]
