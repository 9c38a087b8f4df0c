from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from jobs import audit
from jobs.models import Tenant
from notify.models import SigningSecret


class Command(BaseCommand):
    help = (
        "Make a new webhook signing secret for a tenant (the old one stops signing at once). "
        "The secret is printed once, as the last line, and never again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)

    def handle(self, *args, tenant, **options):
        try:
            owner = Tenant.objects.get(name=tenant)
        except Tenant.DoesNotExist:
            raise CommandError(f"no tenant named '{tenant}' (create it with: manage.py create_tenant {tenant})")
        secret = SigningSecret.rotate(owner, timezone.now())
        audit.record("cli:rotate_webhook_secret", "rotate_signing_secret", owner, tenant=owner)
        self.stdout.write(f"Rotated the webhook signing secret of {owner.name}. Keep it; it is not shown again:")
        self.stdout.write(secret)
