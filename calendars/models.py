"""Maintenance windows, business-day calendars, and the time-zone data each zone is projected with.

A `Window` is a blackout for one job or for every job of a tenant: one-off
(from `starts_at` to `ends_at`), recurring (each occurrence of `cron_expr` in
`time_zone`, for `duration_seconds`: jobs.cron.occurrences, so DST rules are
the scheduler's own), or the days a `Calendar` does not count as business
days (its weekend days and holidays). Its `resume_policy` says what happens to
a job's occurrences inside it: `skip` records them skipped with the window's
name, `run_once` runs the latest of them once the window ends, `run_all` runs
each of them (at most DUETIME_MISSED_RUN_CAP) once it ends. The rules that
turn windows into intervals are calendars/blackouts.py; materialisation
(runs/materialize.py) and backfill (runs/backfill.py) apply them.

`ZoneVersion` records, per IANA zone in use, which tzdata the zone's future
runs were projected with (runs/reproject.py moves them when it changes).
"""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from jobs import cron
from jobs.models import JobDefinition, Tenant
from jobs.validation import instant_problem

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MAX_HOLIDAYS = 2000
# A recurring window longer than this would cover everything: a window is a pause of hours or days.
MAX_DURATION_SECONDS = 31 * 86400


class ResumePolicy(models.TextChoices):
    SKIP = "skip"  # occurrences inside are recorded skipped, the window's name as the reason
    RUN_ONCE = "run_once"  # the latest occurrence inside runs once the window ends; the others are skipped
    RUN_ALL = "run_all"  # every occurrence inside runs once the window ends (at most DUETIME_MISSED_RUN_CAP)


class Calendar(models.Model):
    """Business days of a tenant: every day but its weekend days and holidays, in `time_zone`.

    `holidays`: a list of {"name", "start", "end", "all_day"}. All-day
    holidays give dates (`YYYY-MM-DD`, `end` exclusive, as in iCalendar);
    timed ones ISO 8601 instants with an offset. Written by the portal's
    form and the iCalendar import (calendars/ical.py); checked by clean().
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="calendars")
    name = models.CharField(max_length=100)
    time_zone = models.CharField(max_length=64, default="UTC", help_text="The zone in which a day begins and ends.")
    weekend_days = models.JSONField(
        default=list, blank=True, help_text="ISO weekday numbers that are not business days (6 = Saturday, 7 = Sunday)."
    )
    holidays = models.JSONField(default=list, blank=True)
    # The declared set (schedules as code, calendars/declarations.py) that owns it; empty: made in the portal or API.
    managed_by = models.CharField(max_length=100, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="calendar_unique_name_per_tenant"),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        from calendars import blackouts  # the rules read the fields this checks

        try:
            cron.get_zone(self.time_zone)
        except cron.ZoneError as exc:
            raise ValidationError({"time_zone": str(exc)}) from exc
        days = self.weekend_days
        if not isinstance(days, list) or any(not isinstance(d, int) or not 1 <= d <= 7 for d in days):
            raise ValidationError({"weekend_days": "a list of ISO weekday numbers, 1 (Monday) to 7 (Sunday)"})
        if len(set(days)) == 7:
            raise ValidationError({"weekend_days": "a calendar needs at least one business day a week"})
        if not isinstance(self.holidays, list) or len(self.holidays) > MAX_HOLIDAYS:
            raise ValidationError({"holidays": f"a list of at most {MAX_HOLIDAYS} holidays"})
        for index, holiday in enumerate(self.holidays):
            problem = blackouts.holiday_problem(holiday)
            if problem:
                raise ValidationError({"holidays": f"holiday {index + 1}: {problem}"})


class WindowQuerySet(models.QuerySet):
    def applying_to(self, jobs):
        """Enabled windows of these jobs and of their tenants (tenant-wide ones): one query, calendars joined."""
        job_ids = [job.pk for job in jobs]
        tenant_ids = {job.tenant_id for job in jobs}
        return self.filter(Q(job_id__in=job_ids) | Q(job__isnull=True, tenant_id__in=tenant_ids), enabled=True)

    def by_job(self, jobs):
        """{job pk: [Window]}: the enabled windows of each of `jobs` and of its tenant, in one query."""
        found = {job.pk: [] for job in jobs}
        if not jobs:
            return found
        by_tenant = {}
        for window in self.applying_to(jobs).select_related("calendar"):
            if window.job_id is None:
                by_tenant.setdefault(window.tenant_id, []).append(window)
            elif window.job_id in found:
                found[window.job_id].append(window)
        for job in jobs:
            found[job.pk] += by_tenant.get(job.tenant_id, [])
        return found


class Window(models.Model):
    """A blackout for one job (`job`) or every job of its tenant (`job` empty). See the module docstring."""

    class Kind(models.TextChoices):
        ONE_OFF = "one_off"  # from starts_at to ends_at
        RECURRING = "recurring"  # every occurrence of cron_expr in time_zone, for duration_seconds
        CALENDAR = "calendar"  # the days `calendar` does not count as business days

    ResumePolicy = ResumePolicy

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="windows")
    job = models.ForeignKey(
        JobDefinition,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="windows",
        help_text="Empty: every job of the tenant.",
    )
    name = models.CharField(max_length=100, help_text="Shown as the reason of what it skips, e.g. 'db upgrade'.")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.ONE_OFF)
    starts_at = models.DateTimeField(null=True, blank=True, help_text="One-off: the first instant inside.")
    ends_at = models.DateTimeField(null=True, blank=True, help_text="One-off: the first instant after it.")
    cron_expr = models.CharField(max_length=200, blank=True, help_text="Recurring: when each window starts.")
    duration_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Recurring: how long each lasts.")
    time_zone = models.CharField(max_length=64, default="UTC", help_text="Recurring: the zone of cron_expr.")
    calendar = models.ForeignKey(
        Calendar, on_delete=models.CASCADE, null=True, blank=True, related_name="windows", help_text="Calendar kind."
    )
    resume_policy = models.CharField(max_length=10, choices=ResumePolicy.choices, default=ResumePolicy.SKIP)
    enabled = models.BooleanField(default=True)
    note = models.TextField(blank=True)
    # The declared set (schedules as code, calendars/declarations.py) that owns it; empty: made in the portal or API.
    managed_by = models.CharField(max_length=100, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WindowQuerySet.as_manager()

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["one_off", "recurring", "calendar"]), name="window_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(resume_policy__in=["skip", "run_once", "run_all"]), name="window_resume_policy_valid"
            ),
            models.CheckConstraint(
                condition=~Q(kind="one_off") | Q(starts_at__isnull=False, ends_at__gt=models.F("starts_at")),
                name="window_one_off_has_span",
            ),
            models.CheckConstraint(
                condition=~Q(kind="recurring") | (~Q(cron_expr="") & Q(duration_seconds__gte=1)),
                name="window_recurring_has_cron",
            ),
            models.CheckConstraint(
                condition=~Q(kind="calendar") | Q(calendar__isnull=False), name="window_calendar_has_calendar"
            ),
        ]
        indexes = [
            # WindowQuerySet.applying_to (materialisation, per shard): a job's own windows.
            models.Index(fields=["job"], name="window_by_job", condition=Q(job__isnull=False)),
            # WindowQuerySet.applying_to: the tenant-wide windows of a pass's tenants.
            models.Index(fields=["tenant"], name="window_tenant_wide", condition=Q(job__isnull=True)),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        errors = {}
        if self.job_id and self.tenant_id and self.job.tenant_id != self.tenant_id:
            errors["job"] = "the job belongs to another tenant"
        if self.calendar_id and self.tenant_id and self.calendar.tenant_id != self.tenant_id:
            errors["calendar"] = "the calendar belongs to another tenant"
        errors.update(getattr(self, f"_{self.kind}_errors", lambda: {"kind": "unknown kind"})())
        if errors:
            raise ValidationError(errors)

    def _one_off_errors(self):
        if not self.starts_at or not self.ends_at:
            return {"starts_at": "a one-off window needs its start and end"}
        bad = {
            f: instant_problem(getattr(self, f)) for f in ("starts_at", "ends_at") if instant_problem(getattr(self, f))
        }
        if bad:  # the years a schedule can express: the walks over a window's span stay inside Python's dates
            return bad
        if self.ends_at <= self.starts_at:
            return {"ends_at": "must be after the start"}
        return {}

    def _recurring_errors(self):
        errors = {}
        try:
            cron.validate(self.cron_expr)
        except cron.CronError as exc:
            errors["cron_expr"] = str(exc)
        try:
            cron.get_zone(self.time_zone)
        except cron.ZoneError as exc:
            errors["time_zone"] = str(exc)
        if not self.duration_seconds or not 1 <= self.duration_seconds <= MAX_DURATION_SECONDS:
            errors["duration_seconds"] = f"how long each window lasts: 1 to {MAX_DURATION_SECONDS} seconds (31 days)"
        return errors

    def _calendar_errors(self):
        # A declared set checks its windows before it saves the calendars they name: the calendar has no id yet.
        named = self.calendar_id or getattr(self, "calendar", None) is not None
        return {} if named else {"calendar": "a calendar window names its calendar"}


class ZoneVersion(models.Model):
    """The tz database rules a zone's future runs are projected with, and a change being rolled out.

    `fingerprint` is the SHA-256 of the zone's compiled rules (a TZif file,
    kept in `tzif`, so that the old rules can still be read once the disk
    has new ones) and `version` the tzdata release they came from, for people
    (calendars/zones.py). When the rules on disk differ, runs/reproject.py
    takes the row by compare-and-set on the old fingerprint into `pending_*`,
    moves the zone's jobs in batches by `job_cursor` (the last job done), one
    transaction per batch, then makes the pending rules the current ones.
    """

    zone = models.CharField(max_length=64, primary_key=True)
    fingerprint = models.CharField(max_length=64)
    version = models.CharField(max_length=100)
    tzif = models.BinaryField()
    pending_fingerprint = models.CharField(max_length=64, blank=True)
    pending_version = models.CharField(max_length=100, blank=True)
    pending_tzif = models.BinaryField(null=True, blank=True)
    job_cursor = models.BigIntegerField(default=0, help_text="While a change is rolled out: the last job moved.")
    projected_at = models.DateTimeField(help_text="When the current rules were first seen or rolled out.")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(pending_fingerprint="") | Q(pending_tzif__isnull=False), name="zoneversion_pending_has_tzif"
            ),
        ]

    def __str__(self):
        return f"{self.zone}: tzdata {self.version}"

    @property
    def rolling_out(self):
        return bool(self.pending_fingerprint)
