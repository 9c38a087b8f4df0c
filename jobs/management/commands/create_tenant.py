from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from jobs.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant (a team sharing Duetime). NAME is a slug, e.g. billing."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        tenant = Tenant(name=name)
        try:
            tenant.full_clean()
        except ValidationError as exc:
            raise CommandError("; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items()))
        tenant.save()
        self.stdout.write(f"Created tenant {tenant.name} (id {tenant.pk}).")
