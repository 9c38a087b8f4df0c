"""Creating and changing job definitions: the one path for admin, API and CLI.

`save_definition` validates, places the job on its shard, computes the next
due instant when the schedule changed, bumps the version and audits, in one
transaction.
"""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from jobs import audit, jitter, occurrences, quotas
from jobs.models import JobDefinition, JobSigningSecret, shard_for

# A change to any of these recomputes next_due_at from now; setting remaining_runs sets the count anew.
SCHEDULE_FIELDS = (
    "schedule_kind",
    "cron_expr",
    "run_at",
    "every_seconds",
    "start_at",
    "end_at",
    "remaining_runs",
    "time_zone",
)


def first_due(job, now):
    """The first occurrence of `job`'s schedule strictly after `now` (jobs.occurrences), or None.

    An `at` job's instant even when it has passed (the missed-run policy
    decides); None once remaining_runs is 0.
    """
    if job.remaining_runs == 0:
        return None
    if job.schedule_kind == JobDefinition.ScheduleKind.AT:
        return job.run_at
    found = occurrences.after(occurrences.Schedule.of(job), now, 1)
    return found[0] if found else None


def schedule_changed(job):
    if job.pk is None:
        return True
    before = JobDefinition.objects.filter(pk=job.pk).values(*SCHEDULE_FIELDS).first()
    return before is None or any(before[f] != getattr(job, f) for f in SCHEDULE_FIELDS)


def check_name_free(job):
    """Raise ValidationError({"name": ...}) if another job of the tenant has `job`'s name."""
    taken = JobDefinition.objects.filter(tenant_id=job.tenant_id, name=job.name).exclude(pk=job.pk).exists()
    if taken:
        message = f"tenant {job.tenant.name} already has a job named {job.name}: edit that one, or choose another name"
        raise ValidationError({"name": [message]})


def adds_a_definition(job):
    """True if storing `job` makes one more live (not cancelled) definition for its tenant."""
    if job.status == JobDefinition.Status.CANCELLED:
        return False
    if job.pk is None:
        return True
    return JobDefinition.objects.filter(pk=job.pk, status=JobDefinition.Status.CANCELLED).exists()


@transaction.atomic
def save_definition(job, actor, *, now=None, note="", detail=None):
    """Validate and store `job` (new or changed). Raises ValidationError, storing nothing.

    A new or rescheduled job starts from its first occurrence after now: a
    schedule change never back-fills the past (use backfill for that).
    A new job, or a cancelled one made live again, counts against the
    tenant's max_definitions: jobs.quotas.QuotaExceeded stores nothing.
    A `jitter_seconds` of None means its owner stated none: jobs.jitter
    chooses it (a new job) or keeps it (an existing one). `detail` is added
    to the audit entry's (schedules as code record their diff there).
    """
    now = now or timezone.now()
    rescheduled = schedule_changed(job)
    jitter.settle(job, rescheduled=rescheduled, now=now)
    # The CHECK constraints are not asked one query each (16 queries, 30 ms a save): jobs.validation states
    # each of their rules with a message that says how to fix it, and the database enforces them on save.
    job.full_clean(validate_constraints=False)
    check_name_free(job)
    created = job.pk is None
    adds = adds_a_definition(job)
    if adds:
        quotas.check_definitions(job.tenant)
    if rescheduled or adds:  # a cancelled job made live again starts from its next occurrence too
        job.next_due_at = first_due(job, now) if job.status == JobDefinition.Status.ACTIVE else None
    job.shard = shard_for(job.tenant.name, job.name)
    if not created:
        job.version += 1
    job.save(validate=False)  # full_clean() ran above, before the schedule was computed
    http = job.target_kind == JobDefinition.TargetKind.HTTP
    job.issued_signing_secret = JobSigningSecret.issue(job, now) if http else None
    detail = {"version": job.version, **(detail or {})}
    audit.record(actor, "create" if created else "update", job, detail=detail, note=note)
    return job, created


@transaction.atomic
def rotate_signing_secret(job, actor, *, now=None, note=""):
    """Replace http job `job`'s signing secret (the old one stops signing at once); returns the new one, to show once.

    Audited as `rotate_job_signing_secret` with the new secret's prefix. Raises
    ValidationError for a job that is not http: only its calls are signed.
    """
    if job.target_kind != JobDefinition.TargetKind.HTTP:
        raise ValidationError({"target_kind": [f"job {job.name} is not an http job: only http calls are signed"]})
    secret = JobSigningSecret.rotate(job, now or timezone.now())
    audit.record(actor, "rotate_job_signing_secret", job, detail={"prefix": secret[:12]}, note=note)
    return secret
