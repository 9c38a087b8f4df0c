import re

from django.core.management.base import BaseCommand, CommandError

from jobs import tokens
from jobs.models import QUEUE_RE, ApiToken, Tenant


class Command(BaseCommand):
    help = "Issue an API token. The secret is printed once, as the last line, and never again."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--kind", required=True, choices=ApiToken.Kind.values)
        parser.add_argument("--queues", default="", help="Worker tokens: comma-separated queues it may lease from.")
        parser.add_argument("--name", default="", help="A label to recognise the token by.")
        parser.add_argument(
            "--role",
            choices=ApiToken.Role.values,
            default=None,
            help="Team tokens: viewer (reads), operator (runs and jobs' operations; the default) or owner "
            "(also definitions and schedules as code).",
        )

    def handle(self, *args, tenant, kind, queues, name, role, **options):
        try:
            owner = Tenant.objects.get(name=tenant)
        except Tenant.DoesNotExist:
            raise CommandError(f"no tenant named '{tenant}' (create it with: manage.py create_tenant {tenant})")
        queue_list = [q.strip() for q in queues.split(",") if q.strip()]
        if kind == ApiToken.Kind.WORKER and not queue_list:
            raise CommandError("a worker token needs --queues, e.g. --queues default,billing")
        if kind == ApiToken.Kind.TEAM and queue_list:
            raise CommandError("--queues is for worker tokens; a team token acts on all of its tenant's jobs")
        if kind == ApiToken.Kind.WORKER and role:
            raise CommandError("--role is for team tokens; a worker token only leases, heartbeats and completes")
        bad = [q for q in queue_list if not re.fullmatch(QUEUE_RE, q)]
        if bad:
            raise CommandError(f"not a queue name: {', '.join(bad)} (use lowercase letters, digits, '.', '_' or '-')")
        token, secret = tokens.issue(owner, kind, name=name, queues=queue_list, role=role, actor="cli:create_token")
        as_role = f" with the role {token.role}" if token.role else ""
        self.stdout.write(
            f"Issued {kind} token {token.prefix}...{as_role} for tenant {owner.name}. "
            "Keep the secret; it is not shown again:"
        )
        self.stdout.write(secret)
