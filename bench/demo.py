"""The demo tenant of `bin/run`: sample jobs and an admin login that works.

`setup(username)` is idempotent. The login's password is kept in a file per
database (`.duetime/admin-password-<database id>`), so switching between the
embedded SQLite file and a PostgreSQL database never prints another database's
password; a kept password that no longer matches the user is replaced.
"""

import hashlib
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from jobs import registry
from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant

DEMO_TASK_MODULE = "examples.demo_handlers"  # listed in DUETIME_TASK_MODULES by default
DEMO_JOBS = [
    dict(
        name="demo.hello-berlin",
        cron_expr="* * * * *",
        time_zone="Europe/Berlin",
        target_ref="examples.demo_handlers.hello",
    ),
    dict(
        name="demo.flaky-export",
        cron_expr="*/2 * * * *",
        time_zone="UTC",
        target_ref="examples.demo_handlers.flaky",
        retry_base_seconds=2,
        retry_max_seconds=10,
        max_attempts=5,
    ),
    dict(
        name="demo.always-fails",
        cron_expr="*/2 * * * *",
        time_zone="America/New_York",
        target_ref="examples.demo_handlers.always_fails",
        retry_base_seconds=1,
        retry_max_seconds=4,
        max_attempts=3,
    ),
]


def database_id():
    """A short stable name for the database this process uses (vendor, host, port, name)."""
    db = connection.settings_dict
    ident = "|".join(str(db.get(k) or "") for k in ("ENGINE", "HOST", "PORT", "NAME"))
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


def password_file():
    return Path(settings.BASE_DIR) / ".duetime" / f"admin-password-{database_id()}"


def setup(username="admin"):
    """Create the demo tenant, its jobs and a superuser; returns (username, password)."""
    tenant, _ = Tenant.objects.get_or_create(name="demo")
    if not registry.tenant_allows(tenant.task_prefixes, DEMO_JOBS[0]["target_ref"]):
        tenant.task_module_prefixes = "\n".join([*tenant.task_prefixes, DEMO_TASK_MODULE])
        tenant.save(update_fields=["task_module_prefixes"])
    for fields in DEMO_JOBS:
        if not JobDefinition.objects.filter(tenant=tenant, name=fields["name"]).exists():
            save_definition(JobDefinition(tenant=tenant, schedule_kind="cron", **fields), "cli:setup_demo")
    user = get_user_model().objects.filter(username=username).first()
    kept = password_file().read_text().strip() if password_file().exists() else None
    if user is None or kept is None or not user.check_password(kept):
        kept = secrets.token_urlsafe(12)
        user = user or get_user_model()(username=username, email=f"{username}@localhost")
        user.is_staff = user.is_superuser = True
        user.set_password(kept)
        user.save()
        password_file().parent.mkdir(exist_ok=True)
        password_file().write_text(kept + "\n")
        password_file().chmod(0o600)
    tenant.members.add(user, through_defaults={"role": "owner"})
    return username, kept
