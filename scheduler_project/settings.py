"""Duetime settings, read from the environment (see .env.example).

Every knob has a default that runs Duetime on the embedded SQLite database.
Duetime's own knobs are named DUETIME_*; they are validated by system checks in
scheduler_project/checks.py and read at call time through django.conf.settings.
"""

import sys
from pathlib import Path

import environ

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
    "runs",
    "dlq",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # Credentials in a message or traceback (a handler's error, a URL with a password) are redacted.
    "filters": {"redact_secrets": {"()": "jobs.secrets.RedactingFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_secrets"]}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
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
DUETIME_MISSED_RUN_CAP = env.int("DUETIME_MISSED_RUN_CAP", default=1000)
DUETIME_CLAIM_BATCH = env.int("DUETIME_CLAIM_BATCH", default=100)
DUETIME_POLL_SECONDS = env.float("DUETIME_POLL_SECONDS", default=0.05)
DUETIME_MAX_PAYLOAD_BYTES = env.int("DUETIME_MAX_PAYLOAD_BYTES", default=256 * 1024)
# API throttles (scheduler_project/api/throttles.py); 0 turns one off.
DUETIME_AUTH_FAILURES_PER_MINUTE = env.int("DUETIME_AUTH_FAILURES_PER_MINUTE", default=20)
DUETIME_TOKEN_REQUESTS_PER_MINUTE = env.int("DUETIME_TOKEN_REQUESTS_PER_MINUTE", default=6000)
DUETIME_HTTP_ALLOW_PRIVATE = env.bool("DUETIME_HTTP_ALLOW_PRIVATE", default=False)
DUETIME_IDEMPOTENCY_TTL_HOURS = env.int("DUETIME_IDEMPOTENCY_TTL_HOURS", default=24)
DUETIME_LIVE_POLL_SECONDS = env.float("DUETIME_LIVE_POLL_SECONDS", default=1.0)
# The only modules whose Django tasks python jobs may name (docs/tasks.md); the defaults are the
# harmless demo and benchmark handlers, which a tenant can use only once a superuser allows them.
DUETIME_TASK_MODULES = env.list("DUETIME_TASK_MODULES", default=["examples.demo_handlers", "bench.handlers"])
