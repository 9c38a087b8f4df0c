"""The choices of model fields: a job definition's schedule kinds, policies, priorities, targets, statuses,
and the roles of tenant members and team tokens.

Their own module so that the model (jobs/models.py) and the rules
(jobs/validation.py) both use them without importing each other: the model
calls the rules from `clean()`. Reach them as `JobDefinition.ScheduleKind`
and so on; the model re-exports each one.
"""

from django.db import models


class ScheduleKind(models.TextChoices):
    CRON = "cron"
    AT = "at"
    EVERY = "every"  # a fixed period from an anchor (start_at, or the Unix epoch): absolute spacing, no drift
    NONE = "none"  # on demand only


class MissedRunPolicy(models.TextChoices):
    RUN_ONCE = "run_once"  # one catch-up run for all missed occurrences
    RUN_ALL = "run_all"  # every missed occurrence, up to DUETIME_MISSED_RUN_CAP
    SKIP = "skip"  # none; the missed ones are recorded skipped


class OverlapPolicy(models.TextChoices):
    FORBID = "forbid"  # skip the new occurrence while one is running
    ALLOW = "allow"
    REPLACE = "replace"  # cancel the running lease, start the new one


class Priority(models.IntegerChoices):
    CRITICAL = 0, "critical"
    DEFAULT = 1, "default"
    BULK = 2, "bulk"


class TargetKind(models.TextChoices):
    PYTHON = "python"  # dotted path to a callable, run by run_worker
    HTTP = "http"  # POST the payload to a URL, run by run_worker
    CELERY = "celery"  # a registered Django task, published by run_dispatcher, run by the team's Celery workers
    EXTERNAL = "external"  # leased over HTTP by the tenant's own workers


class HttpMethod(models.TextChoices):
    """How an http target is called (runs/targets.py): POST and PUT send the payload as JSON, GET sends no body."""

    POST = "POST"
    PUT = "PUT"
    GET = "GET"


class Status(models.TextChoices):
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"


class Role(models.TextChoices):
    """What a tenant member or a team token may do (jobs/roles.py ranks them and says which door needs which)."""

    VIEWER = "viewer"  # reads only: every page and every GET
    OPERATOR = "operator"  # and pause, resume, trigger, run, cancel, replay, discard, backfill
    OWNER = "owner"  # and definitions, tokens, members, windows, calendars, schedules-as-code applies
