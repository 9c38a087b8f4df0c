import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant

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


class Command(BaseCommand):
    help = "Create the demo tenant, its sample jobs and an admin login (idempotent). Prints the login."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username, **options):
        tenant, _ = Tenant.objects.get_or_create(name="demo")
        for fields in DEMO_JOBS:
            if not JobDefinition.objects.filter(tenant=tenant, name=fields["name"]).exists():
                save_definition(JobDefinition(tenant=tenant, schedule_kind="cron", **fields), "cli:setup_demo")
        password = self._password_file().read_text().strip() if self._password_file().exists() else None
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None or password is None:
            password = secrets.token_urlsafe(12)
            user = user or User(username=username, email=f"{username}@localhost")
            user.is_staff = user.is_superuser = True
            user.set_password(password)
            user.save()
            self._password_file().parent.mkdir(exist_ok=True)
            self._password_file().write_text(password + "\n")
            self._password_file().chmod(0o600)
        tenant.members.add(user)
        self.stdout.write(f"login: {username} / {password}")

    def _password_file(self):
        return Path(settings.BASE_DIR) / ".duetime" / "admin-password"
