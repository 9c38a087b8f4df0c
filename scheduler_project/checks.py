"""System checks for the DUETIME_* settings: a bad knob fails `manage.py check`."""

import importlib.util
import math
import re
from pathlib import Path

from django.conf import settings
from django.core.checks import Error, Info, Tags, register

from scheduler_project.json_logs import DESTINATIONS

MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
POSITIVE_KNOBS = (
    "DUETIME_LEASE_SECONDS",
    "DUETIME_HEARTBEAT_SECONDS",
    "DUETIME_LOOKAHEAD_SECONDS",
    "DUETIME_SHARD_LEASE_SECONDS",
    "DUETIME_MISSED_RUN_CAP",
    "DUETIME_TZDATA_CHECK_SECONDS",
    "DUETIME_CLAIM_BATCH",
    "DUETIME_POLL_SECONDS",
    "DUETIME_MAX_PAYLOAD_BYTES",
    "DUETIME_IDEMPOTENCY_TTL_HOURS",
    "DUETIME_LIVE_POLL_SECONDS",
    "DUETIME_REPLICA_PIN_SECONDS",
    "DUETIME_DISPATCH_AHEAD",
    "DUETIME_NOTIFY_TIMEOUT_SECONDS",
    "DUETIME_NOTIFY_RETENTION_DAYS",
    "DUETIME_LOGIN_LOCKOUT_MINUTES",
    "DUETIME_BREAKER_MIN_ATTEMPTS",
)
THROTTLE_KNOBS = (
    "DUETIME_AUTH_FAILURES_PER_MINUTE",
    "DUETIME_TOKEN_REQUESTS_PER_MINUTE",
    "DUETIME_NOTIFY_RATE_LIMIT_MINUTES",
    "DUETIME_LOGIN_FAILURES_PER_USER",
    "DUETIME_LOGIN_FAILURES_PER_ADDRESS",
)


# run_worker and run_scheduler run only the checks with this tag at start: the knobs, not the URL and
# admin checks, which import the whole web surface (a second of a replacement worker's start).
DUETIME = "duetime"


@register(DUETIME)
def duetime_settings(app_configs, **kwargs):
    errors = []
    for name in POSITIVE_KNOBS:
        value = getattr(settings, name, None)
        if not isinstance(value, (int, float)) or value <= 0:
            errors.append(Error(f"{name} must be a positive number, not {value!r}.", id="duetime.E001"))
    if settings.DUETIME_HEARTBEAT_SECONDS * 2 > settings.DUETIME_LEASE_SECONDS:
        errors.append(
            Error(
                "DUETIME_HEARTBEAT_SECONDS must be at most half of DUETIME_LEASE_SECONDS, "
                "or a single late heartbeat loses the lease.",
                id="duetime.E002",
            )
        )
    errors.extend(_failover_errors())
    for name in THROTTLE_KNOBS:
        value = getattr(settings, name, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            errors.append(Error(f"{name} must be a whole number (0 turns it off), not {value!r}.", id="duetime.E010"))
    errors.extend(_task_module_errors())
    errors.extend(_metrics_errors())
    errors.extend(_move_log_errors())
    errors.extend(_default_jitter_errors())
    errors.extend(_retention_errors())
    if settings.DUETIME_DATABASE_POOLING not in ("session", "transaction"):
        errors.append(
            Error(
                f"DUETIME_DATABASE_POOLING must be session or transaction, not {settings.DUETIME_DATABASE_POOLING!r}.",
                hint="transaction: DATABASE_URL names PgBouncer in transaction mode (docs/operations.md, PgBouncer).",
                id="duetime.E070",
            )
        )
    errors.extend(_http_secret_errors())
    errors.extend(_breaker_errors())
    return errors


def _http_secret_errors():
    """DUETIME_HTTP_SECRETS is {tenant: {name: header value}} (never repeating a value: checks are printed)."""
    from jobs import http_secrets  # at call time, as the other checks that read a domain module

    return [
        Error(f"DUETIME_HTTP_SECRETS: {problem}.", hint='e.g. {"acme": {"billing-api": "<token>"}}', id="duetime.E060")
        for problem in http_secrets.problems(settings.DUETIME_HTTP_SECRETS)
    ]


def _failover_errors():
    """The shard lease outlives a few scheduler passes, and the look-ahead outlasts a failover with room to spare.

    A dead scheduler's shards are owned again within runs.shards.failover_seconds()
    (the lease, then one idle sleep); the new owner must still materialise their
    occurrences before they are due, so the look-ahead is at least twice that.
    """
    from runs import shards  # at call time: the check runs once apps are ready

    lease, lookahead = settings.DUETIME_SHARD_LEASE_SECONDS, settings.DUETIME_LOOKAHEAD_SECONDS
    if not all(isinstance(v, (int, float)) and v > 0 for v in (lease, lookahead)):
        return []  # duetime.E001 says so
    errors = []
    renew = shards.RENEW_EVERY_SECONDS
    if lease < 3 * renew:
        errors.append(
            Error(
                f"DUETIME_SHARD_LEASE_SECONDS ({lease:g}) must be at least {3 * renew:g}: schedulers renew their "
                f"shard leases every pass, up to {renew:g} s apart, and a lease must survive a late pass or two.",
                hint=f"Set DUETIME_SHARD_LEASE_SECONDS={3 * renew:g} or more (default 6).",
                id="duetime.E004",
            )
        )
    failover = shards.failover_seconds()
    if lookahead < 2 * failover:
        errors.append(
            Error(
                f"DUETIME_LOOKAHEAD_SECONDS ({lookahead:g}) must be at least twice the scheduler failover time "
                f"({failover:g} s: DUETIME_SHARD_LEASE_SECONDS {lease:g} s + up to {renew:g} s between passes), "
                "or the occurrences of a dead scheduler's shards can be materialised after they are due.",
                hint=f"Set DUETIME_LOOKAHEAD_SECONDS={math.ceil(2 * failover)} or more, "
                "or lower DUETIME_SHARD_LEASE_SECONDS.",
                id="duetime.E005",
            )
        )
    return errors


def _task_module_errors():
    """Every DUETIME_TASK_MODULES entry is an importable module path (a typo would refuse every job of it)."""
    modules = settings.DUETIME_TASK_MODULES
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
        return [Error(f"DUETIME_TASK_MODULES must be a list of module paths, not {modules!r}.", id="duetime.E003")]
    errors = []
    for module in modules:
        if not _importable(module):
            errors.append(
                Error(
                    f"DUETIME_TASK_MODULES lists {module!r}, which is not an importable module.",
                    hint="Remove it, or fix the dotted path (e.g. billing.tasks).",
                    id="duetime.E003",
                )
            )
    return errors


def _importable(module):
    """True when `module` is a dotted path that finds a module, without running it."""
    if not MODULE_RE.match(module):
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a missing parent package
        return False


def _metrics_errors():
    """The engine's metrics ports (DUETIME_METRICS_PORT + 0, 1, 2) are TCP ports; the canaries' queue is a queue name."""
    from jobs.validation import QUEUE_RE

    errors = []
    port = settings.DUETIME_METRICS_PORT
    if not isinstance(port, int) or isinstance(port, bool) or not (port == 0 or 1024 <= port <= 65533):
        errors.append(
            Error(
                f"DUETIME_METRICS_PORT must be 0 (off) or a port from 1024 to 65533, not {port!r}.",
                hint="run_scheduler, run_worker and run_dispatcher listen on it plus 0, 1 and 2.",
                id="duetime.E020",
            )
        )
    queue = settings.DUETIME_CANARY_QUEUE
    if not isinstance(queue, str) or not re.match(QUEUE_RE, queue):
        errors.append(Error(f"DUETIME_CANARY_QUEUE must be a queue name, not {queue!r}.", id="duetime.E021"))
    return errors


def _move_log_errors():
    """DUETIME_MOVE_LOG is stderr, stdout, off, or an absolute path in a directory that exists."""
    value = settings.DUETIME_MOVE_LOG
    if isinstance(value, str) and value in DESTINATIONS:
        return []
    path = Path(value) if isinstance(value, str) and value else None
    if path is not None and path.is_absolute() and path.parent.is_dir() and not path.is_dir():
        return []
    return [
        Error(
            f"DUETIME_MOVE_LOG must be stderr, stdout, off or the absolute path of a file, not {value!r}.",
            hint="A file's directory must exist; the file is created and appended to (reopened after logrotate).",
            id="duetime.E030",
        )
    ]


def _retention_errors():
    """History is kept whole days (runs/retention.py drops a day's partitions at once): at least one."""
    value = settings.DUETIME_RETENTION_DAYS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return [
            Error(
                f"DUETIME_RETENTION_DAYS must be a whole number of days, 1 or more, not {value!r}.", id="duetime.E050"
            )
        ]
    return []


def _breaker_errors():
    """The failure breaker (runs/breaker.py) reads whole minutes of rollups, and a percentage."""
    errors = []
    window = settings.DUETIME_BREAKER_WINDOW_SECONDS
    if not isinstance(window, int) or isinstance(window, bool) or window < 60:
        errors.append(
            Error(
                f"DUETIME_BREAKER_WINDOW_SECONDS must be a whole number of seconds, 60 or more, not {window!r}.",
                id="duetime.E080",
            )
        )
    percent = settings.DUETIME_BREAKER_FAILURE_PERCENT
    if not isinstance(percent, int) or isinstance(percent, bool) or not 0 <= percent <= 100:
        errors.append(
            Error(
                f"DUETIME_BREAKER_FAILURE_PERCENT must be a whole number from 0 to 100 (0 turns the breaker off), "
                f"not {percent!r}.",
                id="duetime.E081",
            )
        )
    return errors


def _default_jitter_errors():
    """The default jitter (jobs/jitter.py) is a percentage of the interval and a cap a job's jitter may have."""
    errors = []
    for name, most in (("DUETIME_DEFAULT_JITTER_PERCENT", 100), ("DUETIME_DEFAULT_JITTER_MAX_SECONDS", 3600)):
        value = getattr(settings, name, None)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
            errors.append(
                Error(
                    f"{name} must be a whole number from 0 to {most} (0 turns the default off), not {value!r}.",
                    id="duetime.E040",
                )
            )
    return errors


@register(Tags.security, deploy=True)
def metrics_token(app_configs, **kwargs):
    """`check --deploy`: with DEBUG off, the web's /metrics answers only DUETIME_METRICS_TOKEN (scheduler_project/metrics.py)."""
    if settings.DEBUG or settings.DUETIME_METRICS_TOKEN:
        return []
    # Info, not a warning: closed is the safe state; this only says why a scraper would find nothing.
    return [
        Info(
            "DUETIME_METRICS_TOKEN is not set: with DEBUG off the web's /metrics answers 404 to every scraper.",
            hint="Set DUETIME_METRICS_TOKEN and give Prometheus the same token as a bearer credential "
            "(docs/operations.md, Metrics and alerts).",
            id="duetime.I060",
        )
    ]
