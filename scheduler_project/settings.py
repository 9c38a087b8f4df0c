"""Duetime settings, read from the environment (see .env.example).

Every knob has a default that runs Duetime on the embedded SQLite database.
Duetime's own knobs are named DUETIME_*; they are validated by system checks in
scheduler_project/checks.py and read at call time through django.conf.settings.
"""

import sys
from pathlib import Path

import environ
from django.utils.csp import CSP

from scheduler_project import json_logs

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)

# A development default only when DEBUG is on: production must set its own.
SECRET_KEY = env.str("SECRET_KEY", default="dev-only-insecure-key" if DEBUG else "")
if not SECRET_KEY:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (see .env.example).")

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# daphne's app only replaces `runserver` with an ASGI one (WebSockets); loaded for that command alone, it
# keeps twisted (0.3 s) out of every other process's start: run_worker, run_scheduler, migrate.
ASGI_RUNSERVER = ["daphne"] if sys.argv[1:2] == ["runserver"] else []

INSTALLED_APPS = [
    *ASGI_RUNSERVER,
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from the package: /v1/docs works offline
    "channels",
    "scheduler_project",
    "jobs",
    "calendars",  # maintenance windows, business-day calendars, tzdata versions (docs/windows.md)
    "runs",
    "dlq",
    "notify",
    "tasks_backend",  # Django's Tasks framework on Duetime (docs/django-tasks.md)
    "bench",  # manage.py bench and setup_demo; no models, and nothing above imports it (docs/architecture.md)
]

MIDDLEWARE = [
    "scheduler_project.metrics.RequestMetrics",  # first: counts every answer, redirects and errors included
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",  # SECURE_CSP below
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "scheduler_project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "scheduler_project.wsgi.application"
ASGI_APPLICATION = "scheduler_project.asgi.application"

# The embedded default: a SQLite file beside the project. WAL lets the web,
# scheduler and worker processes read while one writes; IMMEDIATE transactions
# take the write lock up front so two writers never deadlock on an upgrade.
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'duetime.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # A file, not memory, so the processes an acceptance test starts share it.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / env.str("DUETIME_TEST_DB", default="test-duetime.sqlite3"))}
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)

# How DATABASE_URL reaches PostgreSQL: `session` (directly, or a pooler in session mode) or `transaction`
# (PgBouncer in transaction mode: a server connection per transaction). With `transaction` no session
# state is set or kept: no session settings at connect (set them on the role, docs/operations.md), no
# server-side prepared statements, no server-side cursors (runs/sql/__init__.py).
DUETIME_DATABASE_POOLING = env.str("DUETIME_DATABASE_POOLING", default="session")
if DUETIME_DATABASE_POOLING == "transaction":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True

# A streaming replica of the primary (optional): portal pages and API reads that need not see their
# caller's own write read it; writes, transactions, the engine and the commands use the primary
# (scheduler_project/routers.py, pinning.py; docs/operations.md). Unset: one database, as before.
DATABASE_REPLICA_URL = env.str("DATABASE_REPLICA_URL", default="")
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = env.db_url_config(DATABASE_REPLICA_URL)
    DATABASES["replica"].setdefault("CONN_MAX_AGE", DATABASES["default"].get("CONN_MAX_AGE", 0))
    DATABASES["replica"].setdefault("CONN_HEALTH_CHECKS", True)
    # Under test the replica is the test database itself: tests that do not set up a replica see one database.
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    DATABASE_ROUTERS = ["scheduler_project.routers.ReplicaRouter"]
    # Before the sessions: every query of the request, the session's too, runs inside its choice.
    sessions = MIDDLEWARE.index("django.contrib.sessions.middleware.SessionMiddleware")
    MIDDLEWARE.insert(sessions, "scheduler_project.pinning.ReplicaPinMiddleware")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's ModelBackend, refusing a user name or address locked out after too many failed logins
# (scheduler_project/admin/login.py; DUETIME_LOGIN_* below).
AUTHENTICATION_BACKENDS = ["scheduler_project.admin.login.ThrottledModelBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Production hardening: on unless DEBUG, so `check --deploy` passes.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy on every answer (Django's own, django.middleware.csp): scripts and styles only from
# the portal's own static files, no inline script, style attribute or event handler anywhere (docs/security.md,
# Portal hardening). The live updates' WebSocket is same-origin ('self'). /v1/docs relaxes styles for Swagger UI
# alone (scheduler_project/api/urls.py).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# The log of state moves (runs/move_log.py): one JSON line per move and per refused stale completion,
# heartbeat or take-over, to stderr (default), stdout, a file (an absolute path), or off.
DUETIME_MOVE_LOG = env.str("DUETIME_MOVE_LOG", default="stderr")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json_lines": {"()": "scheduler_project.json_logs.JsonLines"},
    },
    # Credentials in a message, a traceback or a move log line (a handler's error, a URL with a password)
    # are redacted, on every handler (tests/jobs/test_secrets.py checks that each has the filter).
    "filters": {"redact_secrets": {"()": "jobs.secrets.RedactingFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_secrets"]},
        # Identifiers, but two come from clients (an Idempotency-Key, a worker_id): redacted like the rest.
        "moves": {**json_logs.handler(DUETIME_MOVE_LOG), "filters": ["redact_secrets"]},
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Off: above INFO, so the engine does not even build the lines (runs.move_log.enabled).
        "duetime.moves": {
            "handlers": ["moves"],
            "level": "WARNING" if DUETIME_MOVE_LOG == "off" else "INFO",
            "propagate": False,
        },
    },
}

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "scheduler_project.api.problems.exception_handler",
    # Per-token request counts (DUETIME_TOKEN_REQUESTS_PER_MINUTE) in the default cache: see CACHES.
    "DEFAULT_THROTTLE_CLASSES": ["scheduler_project.api.throttles.TokenRateThrottle"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Duetime API",
    "DESCRIPTION": "Cron, delayed and one-off jobs with leases, fencing tokens, retries and a dead-letter queue.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # A job's missed_run_policy and a window's resume_policy share one choice set (skip, run_once, run_all).
    "ENUM_NAME_OVERRIDES": {
        "CatchUpPolicyEnum": ["skip", "run_once", "run_all"],
        # A window's kind, in /v1/windows and in a declared set's windows (PUT /v1/schedules).
        "WindowKindEnum": ["one_off", "recurring", "calendar"],
        # What a declared set's plan does to a job (PUT /v1/schedules); its calendars and windows have their own.
        "ActionEnum": ["create", "change", "adopt", "pause", "resume", "delete"],
    },
}

# The cache holds the API throttles' counts. In process memory by default, which
# serves one web process; several web processes must share one: CACHE_URL=redis://host:6379/1.
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://")}

# Live updates: the in-memory layer serves one web process (the embedded
# default); set REDIS_URL to share updates across web processes.
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- Duetime knobs (documented in README.md and .env.example) ---------------
DUETIME_LEASE_SECONDS = env.int("DUETIME_LEASE_SECONDS", default=30)
DUETIME_HEARTBEAT_SECONDS = env.float("DUETIME_HEARTBEAT_SECONDS", default=10.0)
DUETIME_LOOKAHEAD_SECONDS = env.int("DUETIME_LOOKAHEAD_SECONDS", default=60)
# A scheduler's hold on its shards (runs/shards.py), renewed every pass: a dead scheduler's shards are
# owned again within this plus 1 s. The look-ahead must stay at least twice that (check duetime.E005).
DUETIME_SHARD_LEASE_SECONDS = env.float("DUETIME_SHARD_LEASE_SECONDS", default=6.0)
DUETIME_MISSED_RUN_CAP = env.int("DUETIME_MISSED_RUN_CAP", default=1000)
# The jitter of a new job whose owner states none (jobs/jitter.py): this percentage of its schedule's
# shortest interval, at most this many seconds (docs/schedules-as-code.md, Jitter by default). 0 turns it off.
DUETIME_DEFAULT_JITTER_PERCENT = env.int("DUETIME_DEFAULT_JITTER_PERCENT", default=10)
DUETIME_DEFAULT_JITTER_MAX_SECONDS = env.int("DUETIME_DEFAULT_JITTER_MAX_SECONDS", default=300)
# How often a scheduler compares the tz database on disk with what each zone's runs were projected with
# (runs/reproject.py, docs/timezone-changes.md).
DUETIME_TZDATA_CHECK_SECONDS = env.int("DUETIME_TZDATA_CHECK_SECONDS", default=300)
DUETIME_CLAIM_BATCH = env.int("DUETIME_CLAIM_BATCH", default=100)
DUETIME_POLL_SECONDS = env.float("DUETIME_POLL_SECONDS", default=0.05)
DUETIME_MAX_PAYLOAD_BYTES = env.int("DUETIME_MAX_PAYLOAD_BYTES", default=256 * 1024)
# API throttles (scheduler_project/api/throttles.py); 0 turns one off.
DUETIME_AUTH_FAILURES_PER_MINUTE = env.int("DUETIME_AUTH_FAILURES_PER_MINUTE", default=20)
DUETIME_TOKEN_REQUESTS_PER_MINUTE = env.int("DUETIME_TOKEN_REQUESTS_PER_MINUTE", default=6000)
# The portal's login (scheduler_project/admin/login.py): this many failed logins for one user name, or from one
# address, within DUETIME_LOGIN_LOCKOUT_MINUTES lock it out for that long; 0 turns a limit off.
DUETIME_LOGIN_FAILURES_PER_USER = env.int("DUETIME_LOGIN_FAILURES_PER_USER", default=5)
DUETIME_LOGIN_FAILURES_PER_ADDRESS = env.int("DUETIME_LOGIN_FAILURES_PER_ADDRESS", default=50)
DUETIME_LOGIN_LOCKOUT_MINUTES = env.int("DUETIME_LOGIN_LOCKOUT_MINUTES", default=15)
DUETIME_HTTP_ALLOW_PRIVATE = env.bool("DUETIME_HTTP_ALLOW_PRIVATE", default=False)
# Bearer tokens http targets may send, by tenant and name (jobs/http_secrets.py, docs/tasks.md): JSON such as
# {"acme": {"billing-api": "<token>"}}. A job names one; the value stays here, read at each call.
DUETIME_HTTP_SECRETS = env.json("DUETIME_HTTP_SECRETS", default={})
DUETIME_IDEMPOTENCY_TTL_HOURS = env.int("DUETIME_IDEMPOTENCY_TTL_HOURS", default=24)
# Days a finished run (with its attempts) and a resolved dead letter are kept (runs/retention.py); dead runs
# with an open dead letter are kept until it is resolved. Whole days: history is partitioned by day.
DUETIME_RETENTION_DAYS = env.int("DUETIME_RETENTION_DAYS", default=30)
DUETIME_LIVE_POLL_SECONDS = env.float("DUETIME_LIVE_POLL_SECONDS", default=1.0)
# Metrics and the canaries (runs/metrics.py, runs/canary.py, docs/operations.md). Scheduler, worker and
# dispatcher serve /metrics on DUETIME_METRICS_ADDR, port DUETIME_METRICS_PORT + 0, 1, 2 (0: off; their
# --metrics-port overrides it; DUETIME_METRICS_ADDR is loopback unless set); the web serves /metrics itself,
# only to bearers of DUETIME_METRICS_TOKEN (unset: to nobody, or to anyone when DEBUG is on).
# A canary job per shard runs every minute on DUETIME_CANARY_QUEUE.
DUETIME_METRICS_PORT = env.int("DUETIME_METRICS_PORT", default=0)
DUETIME_METRICS_ADDR = env.str("DUETIME_METRICS_ADDR", default="127.0.0.1")
DUETIME_METRICS_TOKEN = env.str("DUETIME_METRICS_TOKEN", default="")
DUETIME_CANARY = env.bool("DUETIME_CANARY", default=True)
DUETIME_CANARY_QUEUE = env.str("DUETIME_CANARY_QUEUE", default="default")
# Owner notifications (notify/, docs/operations.md): at most one per job, kind and channel per window;
# a webhook's answer is awaited this long; sent and failed rows are kept this many days.
DUETIME_NOTIFY_RATE_LIMIT_MINUTES = env.int("DUETIME_NOTIFY_RATE_LIMIT_MINUTES", default=15)
DUETIME_NOTIFY_TIMEOUT_SECONDS = env.float("DUETIME_NOTIFY_TIMEOUT_SECONDS", default=5.0)
DUETIME_NOTIFY_RETENTION_DAYS = env.int("DUETIME_NOTIFY_RETENTION_DAYS", default=30)
# The tenant-wide failure breaker (runs/breaker.py; docs/operations.md "Sharing fairly"): when more than
# DUETIME_BREAKER_FAILURE_PERCENT of a tenant's attempts (at least DUETIME_BREAKER_MIN_ATTEMPTS of them) failed
# over the last DUETIME_BREAKER_WINDOW_SECONDS, its retries wait (first attempts still run); 0 % turns it off.
DUETIME_BREAKER_WINDOW_SECONDS = env.int("DUETIME_BREAKER_WINDOW_SECONDS", default=300)
DUETIME_BREAKER_FAILURE_PERCENT = env.int("DUETIME_BREAKER_FAILURE_PERCENT", default=50)
DUETIME_BREAKER_MIN_ATTEMPTS = env.int("DUETIME_BREAKER_MIN_ATTEMPTS", default=100)
# Notification email (Django's MAILERS): EMAIL_URL is smtp://user:password@host:25, smtp+tls://...:587,
# smtp+ssl://...:465 or consolemail:// (print instead of sending); DEFAULT_FROM_EMAIL is the sender.
_mail = env.email_url("EMAIL_URL", default="smtp://localhost:25")
_smtp_options = {
    "host": _mail.get("EMAIL_HOST"),
    "port": _mail.get("EMAIL_PORT"),
    "username": _mail.get("EMAIL_HOST_USER"),
    "password": _mail.get("EMAIL_HOST_PASSWORD"),
    "use_tls": _mail.get("EMAIL_USE_TLS"),
    "use_ssl": _mail.get("EMAIL_USE_SSL"),
    "timeout": DUETIME_NOTIFY_TIMEOUT_SECONDS,  # a hung mail server must not hold a scheduler pass
}
MAILERS = {
    "default": {
        "BACKEND": _mail["EMAIL_BACKEND"],
        "OPTIONS": {k: v for k, v in _smtp_options.items() if v}
        if _mail["EMAIL_BACKEND"].endswith("smtp.EmailBackend")
        else {},
    }
}
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="duetime@localhost")
# With DATABASE_REPLICA_URL: how long a caller reads the primary after its last write (scheduler_project/pinning.py).
DUETIME_REPLICA_PIN_SECONDS = env.int("DUETIME_REPLICA_PIN_SECONDS", default=5)
# The only modules whose Django tasks python jobs may name (docs/tasks.md); the defaults are the
# harmless demo and benchmark handlers, which a tenant can use only once a superuser allows them.
DUETIME_TASK_MODULES = env.list("DUETIME_TASK_MODULES", default=["examples.demo_handlers", "bench.handlers"])
# The canaries' task is always registered: the dead-man's switch must not depend on this list.
DUETIME_TASK_MODULES = [*DUETIME_TASK_MODULES, "runs.canary"]

# Django's Tasks framework (docs/django-tasks.md): "default" stays Django's in-process backend. With
# DUETIME_TASKS_TENANT set, a task declared @task(backend="duetime") and enqueued in this project becomes
# a run of that tenant's job for it (tasks_backend.backend.DuetimeBackend).
TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
if DUETIME_TASKS_TENANT := env.str("DUETIME_TASKS_TENANT", default=""):
    TASKS["duetime"] = {
        "BACKEND": "tasks_backend.backend.DuetimeBackend",
        "QUEUES": [],  # any queue: the workers' --queues decide what runs
        "OPTIONS": {"tenant": DUETIME_TASKS_TENANT},
    }

# Celery as the worker transport (docs/operations.md): run_dispatcher publishes due `celery` runs to this
# broker (RabbitMQ by default, Redis too); empty: no dispatcher, `celery` runs wait. The team's Celery app
# reads the same CELERY_* settings (app.config_from_object("django.conf:settings", namespace="CELERY")).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_IGNORE_RESULT = True  # outcomes are recorded by Duetime; no result backend
# Runs a dispatcher keeps published but not yet started by a Celery worker: the backlog stays in
# Duetime (priorities, fair share, caps), and a message never waits in the broker near its lease.
DUETIME_DISPATCH_AHEAD = env.int("DUETIME_DISPATCH_AHEAD", default=1000)
# Once more runs are published and waiting than the Celery workers take ahead (DUETIME_DISPATCH_PREFETCH:
# their children x worker_prefetch_multiplier, 2 x 4 for one worker at Celery's defaults), the dispatcher
# packs up to DUETIME_DISPATCH_BATCH runs of one queue into one message (1: always one run per message).
DUETIME_DISPATCH_BATCH = env.int("DUETIME_DISPATCH_BATCH", default=16)
DUETIME_DISPATCH_PREFETCH = env.int("DUETIME_DISPATCH_PREFETCH", default=8)
