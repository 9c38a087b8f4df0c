"""Tenants (their members with a role, their paused queues), their API tokens, job definitions and the audit record.

A JobDefinition is only ever stored through `jobs.validation.clean_definition`
(called from `full_clean`), so the admin, the API and the management commands
share one set of rules and nothing invalid reaches the table.
"""

import hashlib
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from jobs import addresses, choices, signing
from jobs.validation import MAX_JSON_DEPTH, NAME_RE, QUEUE_RE, clean_definition, json_depth

SHARDS = 64  # scheduler shards: hash(tenant, name) mod SHARDS, owned by lease
# The tenant of Duetime's own canary jobs (runs/canary.py): left out of the portal's tenant lists and dashboards.
SYSTEM_TENANT = "duetime-system"


def validate_private_networks(text):
    """Each line of a tenant's private networks is a network (jobs.addresses.networks)."""
    try:
        addresses.networks(text)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


class Tenant(models.Model):
    """A team. Quotas bound what one team can put on the shared scheduler."""

    name = models.SlugField(max_length=63, unique=True)
    max_definitions = models.PositiveIntegerField(default=1000)
    max_pending_runs = models.PositiveIntegerField(default=1_000_000)
    max_concurrent_runs = models.PositiveIntegerField(default=1000)
    enqueue_rate_per_minute = models.PositiveIntegerField(default=60_000)
    # Which registered task modules this team's python jobs may name; only superusers edit it (audited).
    task_module_prefixes = models.TextField(
        blank=True,
        help_text="Module prefixes this team's python jobs may use, one per line (e.g. billing.tasks). "
        "The module must also be listed in DUETIME_TASK_MODULES.",
    )
    # Which private networks this team's http targets and owner webhooks may call besides public addresses
    # (jobs.addresses); only superusers edit it (audited), and each call reads it again (runs.targets).
    private_networks = models.TextField(
        blank=True,
        validators=[validate_private_networks],
        help_text="Networks this team's http targets and webhooks may call besides public addresses, one CIDR "
        "per line (e.g. 10.20.0.0/16 or fd00:20::/64; text after # is a note). Empty: public addresses only. "
        "Read at every call: removing a network stops the next call to it.",
    )
    # Who may use the portal for this team, each with a role (Membership; granted and changed by jobs.members).
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", blank=True, related_name="tenants")
    # A tenant pause (runs.controls.pause_tenant): claims lease none of its runs and materialisation
    # creates none, until resumed; stored here so that it survives restarts. Changed only by the controls;
    # one queue's pause is a QueuePause row.
    paused_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="Every queue paused since.")
    # The tenant-wide failure breaker (runs.breaker): while open, claims lease none of its retries
    # (first attempts still run). Opened and closed by runs.breaker only; an operator's close is audited.
    breaker_opened_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Retries held since: the failure breaker is open."
    )
    breaker_detail = models.CharField(
        max_length=200, blank=True, editable=False, help_text="The failure rate that opened the breaker."
    )
    breaker_reset_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When an operator last closed the breaker: attempts before it no longer count.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        indexes = [
            # scheduler_project.admin.scoping.paused_tenants: the portal's banner on every page.
            models.Index(fields=["paused_at"], name="tenant_paused", condition=Q(paused_at__isnull=False)),
            # runs.breaker.tick, notify.events.breaker_rows, runs.metrics.snapshot: the tenants whose breaker is open.
            models.Index(
                fields=["breaker_opened_at"], name="tenant_breaker_open", condition=Q(breaker_opened_at__isnull=False)
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def task_prefixes(self):
        """The allowed module prefixes, one per non-blank line."""
        return self.prefixes_in(self.task_module_prefixes)

    @staticmethod
    def prefixes_in(text):
        """The module prefixes of a `task_module_prefixes` text, one per non-blank line."""
        return [line.strip() for line in text.splitlines() if line.strip()]

    @property
    def allowance(self):
        """Where this tenant's calls may go besides public addresses (jobs.addresses.Allowance)."""
        return addresses.Allowance(addresses.networks(self.private_networks), f"tenant {self.name}")

    @classmethod
    def allowances(cls, tenant_ids):
        """{tenant id: its allowance, read now}, in one query (a worker's batch of http targets)."""
        rows = cls.objects.filter(pk__in=set(tenant_ids)).values_list("pk", "name", "private_networks")
        return {pk: addresses.Allowance(addresses.networks(text), f"tenant {name}") for pk, name, text in rows}

    @classmethod
    def allowance_of(cls, tenant_id):
        """The allowance of tenant `tenant_id`, read from the database only when first needed (at use)."""

        def load():
            row = cls.objects.filter(pk=tenant_id).values_list("name", "private_networks").first()
            if row is None:  # the tenant was deleted meanwhile: public addresses only
                return "", []
            return f"tenant {row[0]}", addresses.networks(row[1])

        return addresses.Allowance(load=load)


class Membership(models.Model):
    """A user's membership of a tenant and its role: viewer, operator or owner (jobs/roles.py).

    Granted, changed and removed only through jobs.members, which audits each
    change. A member added without a role (`tenant.members.add(user)`) is a
    viewer: least privilege unless someone says otherwise.
    """

    Role = choices.Role

    # No index of its own: the unique (tenant, user) one starts with the tenant.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships", db_index=False)
    # Indexed (the foreign key's own index): jobs.members.roles_of reads one user's memberships on every portal request.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_per_tenant"),
            models.CheckConstraint(condition=Q(role__in=["viewer", "operator", "owner"]), name="membership_role_valid"),
        ]

    def __str__(self):
        return f"{self.user.get_username()} in {self.tenant.name} ({self.role})"


class QueuePause(models.Model):
    """One queue of a tenant paused on its own (runs.controls.pause_tenant with a queue): its runs wait.

    The row is the pause, so it survives restarts; resuming deletes it. The
    claim and materialisation queries probe the unique (tenant, queue) index.
    """

    # No index of its own: the unique (tenant, queue) one starts with the tenant.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="queue_pauses", db_index=False)
    queue = models.CharField(max_length=64, validators=[RegexValidator(QUEUE_RE)])
    paused_at = models.DateTimeField()

    class Meta:
        ordering = ["tenant", "queue"]
        constraints = [
            # runs/sql claim queries and runs.materialize._due: NOT EXISTS (tenant, queue) probes.
            models.UniqueConstraint(fields=["tenant", "queue"], name="queuepause_unique_per_tenant"),
        ]

    def __str__(self):
        return f"{self.tenant.name}/{self.queue}"


class QueueLimit(models.Model):
    """A queue-wide limit: at most `max_running` runs leased at once across every worker, and at most
    `max_starts` starts per `rate_per` (each calendar second or minute), enforced by the claim (runs.limits).

    With a tenant, it bounds that tenant's runs on the queue; without one (superusers only), every
    tenant's runs on the queue together. Empty fields: no such limit. The claim locks the rows that
    apply to what it claims (SKIP LOCKED: a row another claim holds leaves that queue to it), so the
    counts are race-free; `window_start`/`window_starts` are the rate's current window.
    """

    class Per(models.TextChoices):
        SECOND = "second"
        MINUTE = "minute"

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="queue_limits", db_index=False
    )
    queue = models.CharField(max_length=64, validators=[RegexValidator(QUEUE_RE)])
    max_running = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most runs of the queue leased at once; empty: no limit."
    )
    max_starts = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most starts per second or minute; empty: no limit."
    )
    rate_per = models.CharField(max_length=6, choices=Per.choices, default=Per.SECOND)
    window_start = models.DateTimeField(null=True, blank=True, editable=False)
    window_starts = models.PositiveIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["queue", "tenant"]
        constraints = [
            # runs.limits.lock: the rows of the claimed queues, the tenant's and the platform's.
            models.UniqueConstraint(
                fields=["queue", "tenant"], condition=Q(tenant__isnull=False), name="queuelimit_unique_per_tenant"
            ),
            models.UniqueConstraint(
                fields=["queue"], condition=Q(tenant__isnull=True), name="queuelimit_unique_platform"
            ),
            models.CheckConstraint(
                condition=Q(max_running__isnull=True) | Q(max_running__gte=1), name="queuelimit_running_positive"
            ),
            models.CheckConstraint(
                condition=Q(max_starts__isnull=True) | Q(max_starts__gte=1), name="queuelimit_starts_positive"
            ),
            models.CheckConstraint(condition=Q(rate_per__in=["second", "minute"]), name="queuelimit_per_valid"),
        ]

    def __str__(self):
        return f"{self.tenant.name if self.tenant_id else 'every tenant'}/{self.queue}"


class ApiToken(models.Model):
    """A bearer secret. Only its SHA-256 is stored; the secret is shown once.

    The secret carries 256 bits of randomness, so an unsalted fast hash is
    enough (as for GitHub and Stripe keys): nobody can brute-force it.
    """

    class Kind(models.TextChoices):
        TEAM = "team"  # manage the tenant's jobs, runs and dead letters, as far as its role allows
        WORKER = "worker"  # lease, heartbeat, complete on the listed queues

    Role = choices.Role

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # Team tokens: what the token may do (jobs/roles.py); checked on every call. Worker tokens have none ("").
    role = models.CharField(
        max_length=10,
        choices=Role.choices,
        blank=True,
        default=Role.OPERATOR,
        help_text="Team tokens: viewer (reads), operator (pause, resume, trigger, cancel, replay, discard, "
        "backfill) or owner (also definitions and schedules as code).",
    )
    queues = models.JSONField(default=list, blank=True, help_text="Worker tokens: the queues it may lease from.")
    prefix = models.CharField(max_length=16, editable=False, help_text="The first characters, to recognise a token.")
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["team", "worker"]), name="apitoken_kind_valid"),
            models.CheckConstraint(
                condition=Q(kind="team", role__in=["viewer", "operator", "owner"]) | Q(kind="worker", role=""),
                name="apitoken_role_fits_kind",
            ),
        ]

    def __str__(self):
        kind = f"{self.kind}, {self.role}" if self.role else self.kind
        return f"{self.tenant.name}/{self.name or self.prefix} ({kind})"

    @staticmethod
    def hash_secret(secret):
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(cls, tenant, kind, name="", queues=(), role=None):
        """Create a token and return `(token, secret)`; the secret is not kept.

        A team token's `role` defaults to operator; a worker token has none.
        """
        secret = f"dt_{kind[0]}_{secrets.token_urlsafe(32)}"
        role = "" if kind == cls.Kind.WORKER else role or cls.Role.OPERATOR
        token = cls.objects.create(
            tenant=tenant,
            kind=kind,
            role=role,
            name=name,
            queues=list(queues),
            prefix=secret[:12],
            secret_hash=cls.hash_secret(secret),
        )
        return token, secret

    @property
    def is_active(self):
        return self.revoked_at is None


class JobDefinition(models.Model):
    """What to run, when, and how to treat failures. Rules: jobs/validation.py."""

    ScheduleKind = choices.ScheduleKind
    MissedRunPolicy = choices.MissedRunPolicy
    OverlapPolicy = choices.OverlapPolicy
    Priority = choices.Priority
    TargetKind = choices.TargetKind
    HttpMethod = choices.HttpMethod
    Status = choices.Status

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=200, validators=[RegexValidator(NAME_RE)])
    schedule_kind = models.CharField(max_length=10, choices=ScheduleKind.choices, default=ScheduleKind.CRON)
    cron_expr = models.CharField(max_length=200, blank=True)
    run_at = models.DateTimeField(null=True, blank=True, help_text="For schedule kind 'at'.")
    every_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="For schedule kind 'every': the period in seconds (at least 1), counted from start_at "
        "(or from 1970-01-01 00:00 UTC without one), so lateness never shifts later runs.",
    )
    # Bounds of every kind (jobs/occurrences.py): occurrences in [start_at, end_at) only.
    start_at = models.DateTimeField(
        null=True, blank=True, help_text="No occurrence before this instant; an 'every' schedule counts from it."
    )
    end_at = models.DateTimeField(null=True, blank=True, help_text="No occurrence at or after this instant.")
    # How many more scheduled runs materialisation may create (None: no limit). Decremented by
    # runs.materialize in the statement that advances next_due_at (compare-and-set, rows locked);
    # at 0 the job has no next occurrence. Skipped occurrences, triggers and backfills do not count.
    remaining_runs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Run this many more times, then stop (skipped occurrences do not count); empty: no limit.",
    )
    time_zone = models.CharField(max_length=64, default="UTC")
    jitter_seconds = models.PositiveIntegerField(default=0)
    # True when Duetime chose jitter_seconds (jobs/jitter.py) because the job's owner stated none;
    # such a jitter is chosen again when the schedule changes. Jobs from before the default keep theirs.
    jitter_is_default = models.BooleanField(default=False, editable=False)
    missed_run_policy = models.CharField(
        max_length=10, choices=MissedRunPolicy.choices, default=MissedRunPolicy.RUN_ONCE
    )
    starting_deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    overlap_policy = models.CharField(max_length=10, choices=OverlapPolicy.choices, default=OverlapPolicy.FORBID)
    queue = models.CharField(max_length=64, default="default", validators=[RegexValidator(QUEUE_RE)])
    priority = models.SmallIntegerField(choices=Priority.choices, default=Priority.DEFAULT)
    timeout_seconds = models.PositiveIntegerField(default=900)
    max_attempts = models.PositiveIntegerField(default=5)
    retry_base_seconds = models.PositiveIntegerField(default=30)
    retry_max_seconds = models.PositiveIntegerField(default=1800)
    concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most runs leased at once; empty: no limit."
    )
    # A concurrency group (runs.claims): jobs of one tenant naming the same key run at most
    # `concurrency_group_limit` runs at once between them (1: a mutex); each job's start is held to its own limit.
    concurrency_group = models.CharField(
        max_length=64,
        blank=True,
        help_text="A group key shared with other jobs of this tenant; empty: no group.",
    )
    concurrency_group_limit = models.PositiveIntegerField(
        default=1, help_text="Most runs of the group's jobs leased at once when this job starts (1: a mutex)."
    )
    target_kind = models.CharField(max_length=10, choices=TargetKind.choices, default=TargetKind.PYTHON)
    target_ref = models.CharField(max_length=2000, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    # How an http target is called (runs/targets.py, docs/tasks.md); the other kinds keep the defaults.
    http_method = models.CharField(
        max_length=6, choices=HttpMethod.choices, default=HttpMethod.POST, help_text="http targets: GET sends no body."
    )
    http_headers = models.JSONField(
        default=dict,
        blank=True,
        help_text='http targets: extra request headers, e.g. {"X-Team": "billing"}; no credentials '
        "(name a bearer secret instead), no hop-by-hop headers, Host or Content-Length.",
    )
    http_bearer_secret = models.CharField(
        max_length=100,
        blank=True,
        help_text="http targets: the name of a secret the operator configured for this tenant "
        "(DUETIME_HTTP_SECRETS), sent as Authorization: Bearer. The value is never stored.",
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    # The owner's contact and when to page it (notify/events.py); every field is optional.
    owner_email = models.CharField(
        max_length=254, blank=True, help_text="Notified by email of dead letters, skip streaks and lateness."
    )
    owner_webhook_url = models.CharField(
        max_length=2000,
        blank=True,
        help_text="Notified by a signed POST (header Duetime-Signature), through the same guard as http targets.",
    )
    notify_lateness_p99_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Notify when the p99 lateness of the last hour passes this; empty: never."
    )
    notify_skip_streak = models.PositiveIntegerField(
        null=True, blank=True, help_text="Notify when this many runs in a row were skipped; empty: never."
    )
    # Schedules as code (jobs/schedules.py): the declared set that owns the job ("" when none does),
    # and the definition as that set last applied it, which the portal compares against to show drift.
    managed_by = models.CharField(max_length=100, blank=True, default="", editable=False)
    applied_spec = models.JSONField(null=True, blank=True, editable=False)
    next_due_at = models.DateTimeField(null=True, blank=True, editable=False)
    shard = models.SmallIntegerField(default=0, editable=False)
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="jobdefinition_unique_name_per_tenant"),
            models.CheckConstraint(
                condition=Q(schedule_kind__in=["cron", "at", "every", "none"]), name="job_schedule_kind_valid"
            ),
            models.CheckConstraint(
                condition=~Q(schedule_kind="every") | Q(every_seconds__isnull=False, every_seconds__gte=1),
                name="job_every_has_period",
            ),
            models.CheckConstraint(
                condition=Q(start_at__isnull=True) | Q(end_at__isnull=True) | Q(end_at__gt=models.F("start_at")),
                name="job_end_after_start",
            ),
            models.CheckConstraint(condition=~Q(schedule_kind="cron") | ~Q(cron_expr=""), name="job_cron_has_expr"),
            models.CheckConstraint(
                condition=~Q(schedule_kind="at") | Q(run_at__isnull=False), name="job_at_has_run_at"
            ),
            models.CheckConstraint(
                condition=Q(missed_run_policy__in=["run_once", "run_all", "skip"]), name="job_missed_run_policy_valid"
            ),
            models.CheckConstraint(
                condition=Q(overlap_policy__in=["forbid", "allow", "replace"]), name="job_overlap_valid"
            ),
            models.CheckConstraint(condition=Q(priority__in=[0, 1, 2]), name="job_priority_valid"),
            models.CheckConstraint(
                condition=Q(target_kind__in=["python", "http", "celery", "external"]), name="job_target_kind_valid"
            ),
            models.CheckConstraint(condition=Q(status__in=["active", "paused", "cancelled"]), name="job_status_valid"),
            models.CheckConstraint(condition=Q(http_method__in=["POST", "PUT", "GET"]), name="job_http_method_valid"),
            models.CheckConstraint(
                condition=Q(timeout_seconds__gte=1, timeout_seconds__lte=6 * 3600), name="job_timeout_range"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1, max_attempts__lte=100), name="job_max_attempts_range"
            ),
            models.CheckConstraint(condition=Q(retry_base_seconds__gte=0), name="job_retry_base_nonneg"),
            models.CheckConstraint(
                condition=Q(retry_max_seconds__gte=models.F("retry_base_seconds")), name="job_retry_max_ge_base"
            ),
            models.CheckConstraint(
                condition=Q(concurrency__isnull=True) | Q(concurrency__gte=1), name="job_concurrency_positive"
            ),
            models.CheckConstraint(condition=Q(concurrency_group_limit__gte=1), name="job_group_limit_positive"),
            models.CheckConstraint(condition=Q(jitter_seconds__lte=3600), name="job_jitter_at_most_1h"),
            models.CheckConstraint(condition=Q(shard__gte=0, shard__lt=SHARDS), name="job_shard_range"),
            models.CheckConstraint(
                condition=Q(managed_by="") | Q(applied_spec__isnull=False), name="job_managed_has_applied_spec"
            ),
        ]
        indexes = [
            # runs.materialize.due_shards and lock_due: active cron/at jobs whose
            # next occurrence falls inside the look-ahead, per shard, most urgent first.
            models.Index(
                fields=["shard", "next_due_at"],
                name="job_due_by_shard",
                condition=Q(status="active", next_due_at__isnull=False),
            ),
        ]

    def __str__(self):
        return self.name

    def clean_fields(self, exclude=None):
        # Django's own check of a JSONField encodes it recursively; a payload nested deeper than
        # MAX_JSON_DEPTH is left to clean() (clean_definition), which refuses it without recursion.
        if json_depth(self.payload) > MAX_JSON_DEPTH:
            exclude = {*(exclude or ()), "payload"}
        super().clean_fields(exclude)

    def clean(self):
        clean_definition(self)

    def save(self, *args, validate=True, **kwargs):
        """Validate before every save, so no code path can store an invalid definition.

        `validate=False` only for a caller that has just run full_clean() itself.
        """
        if validate:
            self.full_clean()
        super().save(*args, **kwargs)

    @property
    def priority_name(self):
        return self.Priority(self.priority).label


class JobSigningSecret(models.Model):
    """The key an http job's calls are signed with (jobs/signing.py, header Duetime-Signature).

    Stored as it is, not hashed: signing needs the key itself. Made when an
    http job is saved (jobs.definitions.save_definition) and shown once then,
    or when `rotate` replaces it (the API, the portal; audited).
    """

    job = models.OneToOneField(JobDefinition, on_delete=models.CASCADE, related_name="signing_secret")
    secret = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise the secret.")
    rotated_at = models.DateTimeField()

    def __str__(self):
        return f"{self.job}: {self.prefix}..."

    @classmethod
    def rotate(cls, job, now):
        """Make a new secret for `job` (the old one stops signing at once) and return it."""
        secret = signing.new_secret()
        cls.objects.update_or_create(job=job, defaults={"secret": secret, "prefix": secret[:12], "rotated_at": now})
        return secret

    @classmethod
    def issue(cls, job, now):
        """Make `job`'s first secret and return it; None when it has one already (then it is not shown again)."""
        if cls.objects.filter(job=job).exists():
            return None
        secret = signing.new_secret()
        cls.objects.bulk_create(
            [cls(job=job, secret=secret, prefix=secret[:12], rotated_at=now)], ignore_conflicts=True
        )
        return secret if cls.objects.filter(job=job, secret=secret).exists() else None

    @classmethod
    def for_jobs(cls, job_ids, now):
        """{job id: secret} of these jobs, read now; a job without one (saved before signing) gets one nobody saw."""
        found = dict(cls.objects.filter(job_id__in=set(job_ids)).values_list("job_id", "secret"))
        missing = set(job_ids) - set(found)
        if missing:
            rows = [cls(job_id=pk, rotated_at=now) for pk in missing]
            for row in rows:
                row.secret = signing.new_secret()
                row.prefix = row.secret[:12]
            cls.objects.bulk_create(rows, ignore_conflicts=True)
            found.update(cls.objects.filter(job_id__in=missing).values_list("job_id", "secret"))
        return found


class AuditEntry(models.Model):
    """One privileged change: who did what to which object, and why."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="audit")
    actor = models.CharField(max_length=200, help_text="user:<username>, token:<prefix>, or cli:<user>")
    action = models.CharField(max_length=40)
    object_type = models.CharField(max_length=40)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            # Portal: one tenant's audit log, newest first.
            models.Index(fields=["tenant", "-at"], name="audit_by_tenant"),
        ]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_repr}"


class IdempotencyRecord(models.Model):
    """The first answer to an `Idempotency-Key` request, replayed for 24 h.

    Inserted `in_flight` before the request runs (the unique key makes a
    concurrent duplicate fail fast with 409), filled in when it answers.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    in_flight = models.BooleanField(default=True)
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_unique_key_per_tenant"),
        ]


def shard_for(tenant_name, job_name):
    digest = hashlib.blake2b(f"{tenant_name}/{job_name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SHARDS
