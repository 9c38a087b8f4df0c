"""What a job's owner must hear of, recorded as Notification rows (sent by notify.delivery).

Three events, read from what the engine already writes, never from its hot paths:

- dead_letter: a dead letter created since the cursor (dlq.DeadLetter, read in id order);
- skip_streak: the job's last `notify_skip_streak` finished runs were all skipped; one
  notification per streak (the streak is named by the last run before it that was not skipped);
- lateness: the p99 first-attempt lateness of the job over the current and previous hour
  (runs.rollups' JobHour rows) passed `notify_lateness_p99_seconds`; at most one per job and hour.

Jobs with a threshold are checked round-robin, JOB_BATCH per pass, so a pass costs the same
with ten jobs or a million: one query for the batch, one for its lateness rollups, and one
walk of the last `notify_skip_streak` finished runs (run_history_by_job) per job with a
streak threshold. A sweep starts at most every 30 s (JOB_SWEEP_EVERY). Each event gives one
row per contact channel (email, webhook).

Rate limit: at most one notification per job, kind and channel per
DUETIME_NOTIFY_RATE_LIMIT_MINUTES (15 by default). An event inside that window is
still recorded, with status `suppressed`, so the portal shows what was held back;
a flood of dead letters sends one email and one webhook per window.

Exactly once: the cursor rows are locked for the whole pass and rows and cursors move in
one transaction (as runs.rollups does), and the unique (event_key, channel) makes an event
met twice a no-op. Dead letters younger than SETTLE are left for the next pass: an id is
taken at insert, and one still committing could otherwise be passed over by the cursor.

Bounded by day: a letter is written open and goes into history (with its run) no earlier than it
died, so the dead-letter read names the day of the cursor's last letter (less a day for clocks) and
PostgreSQL prunes the older day partitions of dlq_deadletter and runs_run: a pass costs the same with
one day of history or thirty.
"""

import datetime as dt
from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from dlq.models import DeadLetter
from jobs.models import JobDefinition, Membership, Tenant
from notify.models import Cursor, Notification
from runs import partitions, rollups
from runs.models import TERMINAL_STATES, JobHour, Run

DEAD_LETTER_BATCH = 500
JOB_BATCH = 50
JOB_SWEEP_EVERY = dt.timedelta(seconds=30)  # a sweep of the watched jobs starts at most this often per process
SETTLE = dt.timedelta(seconds=2)
# A letter with a higher id may carry a slightly earlier dead_at (another process's clock, commit order).
CLOCK_MARGIN = dt.timedelta(days=1)
ERROR_CHARS = 1000
HAS_CONTACT = ~Q(owner_email="") | ~Q(owner_webhook_url="")


def record(now):
    """Record the notifications of the events since the last pass. Returns the rows written."""
    with transaction.atomic():
        letters = _cursor(
            "dead_letters", lambda: DeadLetter.objects.order_by("-id").values_list("id", flat=True).first()
        )
        jobs = _cursor("jobs", lambda: 0)
        events = _dead_letters(letters, now) + _job_checks(jobs, now)
        rows = _rows(events, now) + breaker_rows(now)
        Notification.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
        Cursor.objects.filter(name=letters.name).update(last_id=letters.last_id, last_at=letters.last_at)
        Cursor.objects.filter(name=jobs.name).update(last_id=jobs.last_id)
    return len(rows)


def _cursor(name, start):
    """The cursor row `name`, locked until the pass commits; made at `start()` on the first pass."""
    row = Cursor.objects.select_for_update().filter(name=name).first()
    if row is None:
        # A first pass starts at the newest dead letter: owners hear of what happens from now on.
        Cursor.objects.bulk_create([Cursor(name=name, last_id=start() or 0)], ignore_conflicts=True)
        row = Cursor.objects.select_for_update().get(name=name)
    return row


def _dead_letters(cursor, now):
    """(job, kind, event_key, subject, data) of each settled dead letter past the cursor; moves the cursor."""
    letters = DeadLetter.objects.filter(id__gt=cursor.last_id)
    if cursor.last_at is not None:
        # Read only the partitions that can hold a letter past the cursor: the open one and the days from the
        # cursor's on (a day without a partition shares an earlier one, which history_day names).
        floor = partitions.history_day(cursor.last_at - CLOCK_MARGIN)
        letters = letters.filter(history_day__gte=floor, run__history_day__gte=floor)
    letters = list(letters.select_related("job__tenant", "run").order_by("id")[:DEAD_LETTER_BATCH])
    if not letters:  # none past the cursor: one that comes later dies from about now on
        cursor.last_at = now if cursor.last_at is None else max(cursor.last_at, now)
    events = []
    for letter in letters:
        if letter.dead_at > now - SETTLE:
            break
        cursor.last_id, cursor.last_at = letter.id, letter.dead_at
        job, run = letter.job, letter.run
        if not (job.owner_email or job.owner_webhook_url):
            continue
        data = {
            "dead_letter_id": letter.id,
            "run_id": run.id,
            "due_at": run.due_at.isoformat(),
            "attempts": run.attempt,
            "dead_at": letter.dead_at.isoformat(),
            "last_error": letter.last_error[:ERROR_CHARS],
        }
        subject = f"run {run.id} of {job.name} dead-lettered after {run.attempt} attempt(s)"
        events.append((job, Notification.Kind.DEAD_LETTER, f"dead_letter:{letter.id}", subject, data))
    return events


def _job_checks(cursor, now):
    """The skip-streak and lateness events of the next JOB_BATCH jobs with a threshold, round-robin.

    A sweep over them starts at most every JOB_SWEEP_EVERY, so a few watched jobs are not
    checked on every scheduler pass; lateness is judged per hour and streaks last minutes.
    """
    if cursor.last_id == 0:
        last = _last_sweep["at"]
        if last is not None and dt.timedelta(0) <= now - last < JOB_SWEEP_EVERY:
            return []
        _last_sweep["at"] = now
    watched = Q(notify_skip_streak__isnull=False) | Q(notify_lateness_p99_seconds__isnull=False)
    jobs = list(
        JobDefinition.objects.filter(watched, HAS_CONTACT, id__gt=cursor.last_id)
        .exclude(status=JobDefinition.Status.CANCELLED)
        .select_related("tenant")
        .order_by("id")[:JOB_BATCH]
    )
    cursor.last_id = jobs[-1].id if len(jobs) == JOB_BATCH else 0  # a short page: start over next pass
    events = lateness([job for job in jobs if job.notify_lateness_p99_seconds], now)
    for job in jobs:
        if job.notify_skip_streak:
            events += skip_streak(job)
    return events


_last_sweep = {"at": None}


def skip_streak(job):
    """[(job, kind, key, subject, data)] when the job's last `notify_skip_streak` finished runs were all skipped."""
    wanted = job.notify_skip_streak
    # run_history_by_job, walked backwards: finished runs only (runs scheduled ahead are not yet skips).
    finished = Run.objects.filter(job=job, state__in=TERMINAL_STATES).order_by("-id")
    last = list(finished.values_list("id", "state", "reason")[:wanted])
    if len(last) < wanted or any(state != Run.State.SKIPPED for _id, state, _reason in last):
        return []
    before = finished.filter(id__lt=last[-1][0]).exclude(state=Run.State.SKIPPED).values_list("id", flat=True).first()
    data = {"skipped_in_a_row": wanted, "last_run_id": last[0][0], "last_reason": last[0][2][:ERROR_CHARS]}
    subject = f"{job.name}: its last {wanted} runs were skipped ({last[0][2][:100]})"
    return [(job, Notification.Kind.SKIP_STREAK, f"skip_streak:{job.id}:{before or 0}", subject, data)]


def lateness(jobs, now):
    """[(job, kind, key, subject, data)] for each of `jobs` whose p99 lateness over the last hour passed
    its threshold: one query (jobhour_unique) for all of them."""
    if not jobs:
        return []
    hour = now.replace(minute=0, second=0, microsecond=0)
    rows = JobHour.objects.filter(job__in=jobs, hour__gte=hour - dt.timedelta(hours=1), hour__lte=hour)
    folded = {job.id: ({}, [0, 0]) for job in jobs}  # job id -> (histogram, [worst ms, first attempts])
    for row in rows.values("job_id", "histogram", "lateness_ms_max", "first_attempts"):
        histogram, totals = folded[row["job_id"]]
        rollups.merge(histogram, row["histogram"])
        totals[0], totals[1] = max(totals[0], row["lateness_ms_max"]), totals[1] + row["first_attempts"]
    events = []
    for job in jobs:
        histogram, (worst, starts) = folded[job.id]
        p99, threshold = rollups.percentile(histogram, 99, cap=worst), job.notify_lateness_p99_seconds
        if p99 is None or p99 <= threshold * 1000:
            continue
        data = {"p99_seconds": round(p99 / 1000, 3), "threshold_seconds": threshold, "first_attempts": starts}
        subject = f"{job.name}: p99 lateness {p99 / 1000:.1f} s over the last hour passed {threshold} s"
        events.append((job, Notification.Kind.LATENESS, f"lateness:{job.id}:{hour:%Y-%m-%dT%H}", subject, data))
    return events


class RateLimit:
    """At most one notification per (job, kind, channel) per DUETIME_NOTIFY_RATE_LIMIT_MINUTES.

    Reads the job's latest notification once (notification_by_job), then remembers what this pass sent.
    """

    def __init__(self, now):
        self.since = now - dt.timedelta(minutes=settings.DUETIME_NOTIFY_RATE_LIMIT_MINUTES)
        self.seen = {}

    def allows(self, job, kind, channel):
        key = (job.id, kind, channel)
        if key not in self.seen:
            recent = Notification.objects.filter(job=job, kind=kind, channel=channel, created_at__gt=self.since)
            self.seen[key] = recent.exclude(status=Notification.Status.SUPPRESSED).exists()
        allowed = not self.seen[key]
        self.seen[key] = True
        return allowed


def contacts(job):
    """[(channel, recipient)] of the job's owner."""
    found = []
    if job.owner_email:
        found.append((Notification.Channel.EMAIL, job.owner_email))
    if job.owner_webhook_url:
        found.append((Notification.Channel.WEBHOOK, job.owner_webhook_url))
    return found


def _rows(events, now):
    """The new Notification rows of `events`: one per event and contact channel, none for an event met before."""
    if not events:
        return []
    keys = [key for _job, _kind, key, _subject, _data in events]
    met = set(Notification.objects.filter(event_key__in=keys).values_list("event_key", "channel"))
    limiter = RateLimit(now)
    rows = []
    for job, kind, key, subject, data in events:
        for channel, recipient in contacts(job):
            if (key, channel) not in met:  # else met before: a lateness hour, a streak still running
                rows.append(
                    _row(job, kind, key, subject, data, channel, recipient, limiter.allows(job, kind, channel), now)
                )
    return rows


def _row(job, kind, key, subject, data, channel, recipient, allowed, now):
    subject = " ".join(subject.split())  # one line: it is a mail header
    body = {
        "type": kind,
        "tenant": job.tenant.name,
        "job": job.name,
        "subject": subject,
        "occurred_at": now.isoformat(),
        "data": data,
    }
    return Notification(
        tenant_id=job.tenant_id,
        job=job,
        kind=kind,
        channel=channel,
        recipient=recipient,
        event_key=key,
        subject=subject[:300],
        body=body,
        status=Notification.Status.PENDING if allowed else Notification.Status.SUPPRESSED,
        next_attempt_at=now if allowed else None,
        response="" if allowed else _held_back(kind),
        created_at=now,
    )


def breaker_rows(now):
    """One notification per owner's email for each opening of a tenant's failure breaker (runs.breaker).

    The event is named by the opening instant, so an opening is told once however many passes see it
    open, and the next opening is told again. No rate limit: an opening lasts at least a window.
    """
    tenants = list(Tenant.objects.filter(breaker_opened_at__isnull=False))
    if not tenants:
        return []
    keys = {t.pk: f"breaker_open:{t.pk}:{t.breaker_opened_at:%Y%m%dT%H%M%S.%f}" for t in tenants}
    met = set(Notification.objects.filter(event_key__in=keys.values()).values_list("event_key", "channel"))
    owners = Membership.objects.filter(tenant__in=tenants, role=Membership.Role.OWNER).exclude(user__email="")
    emails = defaultdict(list)
    for tenant_id, email in owners.values_list("tenant_id", "user__email").order_by("user__email"):
        emails[tenant_id].append(email)
    rows = []
    for tenant in tenants:
        key = keys[tenant.pk]
        if (key, Notification.Channel.EMAIL) in met:
            continue
        subject = f"{tenant.name}: retries held, {tenant.breaker_detail}"
        data = {"opened_at": tenant.breaker_opened_at.isoformat(), "rate": tenant.breaker_detail}
        body = {"type": Notification.Kind.BREAKER_OPEN, "tenant": tenant.name, "job": None, "subject": subject}
        body.update(occurred_at=tenant.breaker_opened_at.isoformat(), data=data)
        # One row per event and channel (the unique constraint): the owners' addresses in one mail.
        if emails[tenant.pk]:
            rows.append(
                Notification(
                    tenant=tenant,
                    job=None,
                    kind=Notification.Kind.BREAKER_OPEN,
                    channel=Notification.Channel.EMAIL,
                    recipient=", ".join(emails[tenant.pk])[:2000],
                    event_key=key,
                    subject=subject[:300],
                    body=body,
                    next_attempt_at=now,
                    created_at=now,
                )
            )
    return rows


def _held_back(kind):
    minutes = settings.DUETIME_NOTIFY_RATE_LIMIT_MINUTES
    return f"not sent: rate limit, at most one {kind} notification per job and channel every {minutes} min"
