"""Owner notifications: what was sent to whom, and the per-tenant webhook signing secret.

A Notification is written by notify/events.py when a job's owner must hear of
something (a dead letter, a skip streak, lateness past the job's threshold) and
sent by notify/delivery.py. Rows are never deleted by a send: the portal shows
what was sent, what failed and what the rate limit held back.
"""

import secrets

from django.db import models
from django.db.models import Q

from jobs.models import JobDefinition, Tenant


class Notification(models.Model):
    class Kind(models.TextChoices):
        DEAD_LETTER = "dead_letter"  # a run of the job dead-lettered
        SKIP_STREAK = "skip_streak"  # the job's last notify_skip_streak runs were all skipped
        LATENESS = "lateness"  # the job's p99 lateness over the last hour passed notify_lateness_p99_seconds
        BREAKER_OPEN = "breaker_open"  # the tenant's failure breaker opened (runs.breaker): to its owners, no job

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"

    class Status(models.TextChoices):
        # In: recorded by notify.events. Out: delivery (-> sent, failed); a failed try
        # with tries left stays pending with next_attempt_at moved by the backoff.
        PENDING = "pending"
        SENT = "sent"  # terminal: the mail backend took it, or the webhook answered 2xx
        FAILED = "failed"  # terminal: tries exhausted, or refused for good (4xx, the SSRF guard)
        SUPPRESSED = "suppressed"  # terminal: recorded, not sent: the job's rate limit for this kind and channel

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="notifications")
    # None for a tenant-wide event (a failure breaker), sent to the tenant's owners.
    job = models.ForeignKey(
        JobDefinition, on_delete=models.CASCADE, related_name="notifications", null=True, blank=True
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    recipient = models.CharField(max_length=2000, help_text="The email address or webhook URL, as it was then.")
    event_key = models.CharField(
        max_length=200, help_text="What happened, e.g. dead_letter:42; one notification per event and channel."
    )
    subject = models.CharField(max_length=300)
    body = models.JSONField(default=dict, help_text="The event as sent (the webhook's JSON, the email's facts).")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    response = models.TextField(blank=True, help_text="The last answer or error (webhook status and body).")
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # notify.events may meet an event twice (a pass that crashed, two nodes): the second insert is a no-op.
            models.UniqueConstraint(fields=["event_key", "channel"], name="notification_once_per_event"),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "sent", "failed", "suppressed"]), name="notification_status_valid"
            ),
            models.CheckConstraint(condition=~Q(status="sent") | Q(sent_at__isnull=False), name="notification_sent_at"),
        ]
        indexes = [
            # notify.delivery.deliver: pending notifications whose next try is due.
            models.Index(fields=["next_attempt_at"], name="notification_due", condition=Q(status="pending")),
            # notify.events rate limit (the job's latest per kind and channel) and the job page's list.
            models.Index(fields=["job", "kind", "channel", "-created_at"], name="notification_by_job"),
            # Portal: one tenant's notifications, newest first.
            models.Index(fields=["tenant", "-created_at"], name="notification_by_tenant"),
            # notify.notifier.prune: rows past the retention.
            models.Index(fields=["created_at"], name="notification_by_created"),
        ]

    def __str__(self):
        return f"{self.kind} to {self.recipient} ({self.status})"


class SigningSecret(models.Model):
    """The key a tenant's webhooks are signed with (HMAC-SHA256; see docs/operations.md).

    Stored as it is, not hashed: signing needs the key itself. It is shown once,
    when `rotate` makes it (the portal's rotate page, `manage.py rotate_webhook_secret`).
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="signing_secret")
    secret = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise the secret.")
    rotated_at = models.DateTimeField()

    def __str__(self):
        return f"{self.tenant.name}: {self.prefix}..."

    @classmethod
    def rotate(cls, tenant, now):
        """Make a new secret for `tenant` (the old one stops working at once) and return it."""
        secret = f"whsec_{secrets.token_urlsafe(32)}"
        cls.objects.update_or_create(
            tenant=tenant, defaults={"secret": secret, "prefix": secret[:12], "rotated_at": now}
        )
        return secret

    @classmethod
    def for_tenant(cls, tenant_id, now):
        """The tenant's secret, made on first use (nobody has seen it: rotate to learn one)."""
        row = cls.objects.filter(tenant_id=tenant_id).first()
        if row is None:
            secret = f"whsec_{secrets.token_urlsafe(32)}"
            cls.objects.bulk_create(
                [cls(tenant_id=tenant_id, secret=secret, prefix=secret[:12], rotated_at=now)], ignore_conflicts=True
            )
            row = cls.objects.get(tenant_id=tenant_id)
        return row.secret


class Cursor(models.Model):
    """How far notify.events has read a source (the last dead letter id, the last job id checked)."""

    name = models.CharField(max_length=40, primary_key=True)
    last_id = models.BigIntegerField(default=0)
    # dead_letters: when the last letter passed died (or the last pass that found none past the cursor ran).
    # Letters past the cursor die about then or later, so they are open or went into history no earlier:
    # the read skips the older day partitions. Null: no bound yet.
    last_at = models.DateTimeField(null=True, blank=True)
