"""manage.py apply_schedules --tenant T FILE [--dry-run] [--prune]: a team's jobs, calendars and windows, declared in TOML, applied.

The file is checked by the same serializer as PUT /v1/schedules (its TOML
maps one to one onto that JSON body), then planned and applied by
runs.schedule_sets.apply_set; the plan is printed like a Terraform plan. Bad input
is a message naming the file, the section and name (a job, calendar or window) and the field, and exit status 1,
with nothing written.
"""

import getpass
import sys
import tomllib

from django.core.management.base import BaseCommand, CommandError

from jobs import schedules
from jobs.api.schedules import (
    ScheduleSetSerializer,
    body_errors,
    declared_sections,
    declared_specs,
    jsonable,
    set_errors,
)
from jobs.models import Tenant
from runs.schedule_sets import apply_set, plan_set


class Command(BaseCommand):
    help = "Apply a TOML file of declared jobs, calendars and windows (schedules as code) to a tenant; prints the plan."

    def add_arguments(self, parser):
        parser.add_argument("file", help="The TOML file of the set (docs/schedules-as-code.md); - reads stdin.")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--dry-run", action="store_true", help="Print the plan; write nothing.")
        parser.add_argument(
            "--prune", action="store_true", help="Delete the set's jobs, calendars and windows no longer declared."
        )
        parser.add_argument("--note", default="", help="Why, for the audit log.")

    def handle(self, *args, file, tenant, dry_run, prune, note, **options):
        try:
            owner = Tenant.objects.get(name=tenant)
        except Tenant.DoesNotExist:
            raise CommandError(f"no tenant named '{tenant}' (create it with: manage.py create_tenant {tenant})")
        values = self.read(file)
        specs, sections, source = declared_specs(values), declared_sections(values), values["source"]
        actor = f"cli:{getpass.getuser()}"
        try:
            if dry_run:
                plan = plan_set(owner, specs, **sections, source=source, prune=prune)
            else:
                plan = apply_set(owner, specs, **sections, source=source, prune=prune, actor=actor, note=note)
        except schedules.SetInvalid as exc:
            raise CommandError(self.described(file, set_errors(exc), "nothing was applied")) from exc
        self.stdout.write(plan.as_text(declared=len(specs)), ending="")
        if dry_run:
            self.stdout.write("Dry run: nothing was written. Run again without --dry-run to apply.")
        elif plan.changed:
            self.stdout.write(f"Applied. Every change is in the audit log (actor {actor}).")

    def read(self, file):
        """The file's set, validated as PUT /v1/schedules validates its body."""
        try:
            text = sys.stdin.read() if file == "-" else open(file, encoding="utf-8").read()
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from exc
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise CommandError(f"{file} is not valid TOML: {exc}") from exc
        serializer = ScheduleSetSerializer(data=jsonable(data))
        if not serializer.is_valid():
            raise CommandError(self.described(file, body_errors(serializer.errors), "nothing was applied"))
        return serializer.validated_data

    @staticmethod
    def described(file, errors, outcome):
        lines = [f"{file}: {len(errors)} problem(s), {outcome}:"]
        lines += [f"  {e['field'] or 'file'}: {e['detail']}" for e in errors]
        return "\n".join(lines)
