"""`manage.py backfill JOB --tenant T --start ... --end ... [--max-runs N] [--ignore-windows]`: run past occurrences again.

The same service as the portal's backfill action (runs.backfill.backfill):
the same plan, cap, audit record and origin `backfill`, and the tenant's
pending-run quota, checked for the whole window first. Shows a progress bar
while the runs are created. The job's maintenance windows and calendars leave
occurrences out (each reason printed) unless `--ignore-windows`.
"""

import datetime as dt
import getpass
import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs.models import JobDefinition
from jobs.permissions import Revoked
from jobs.quotas import QuotaExceeded
from runs import backfill
from runs.enqueue import Quota

BAR_WIDTH = 30


def instant(text):
    """An ISO 8601 instant; without an offset it is read as UTC."""
    try:
        value = parse_datetime(text)
    except ValueError:  # well formed, but no such day or hour (2026-02-30)
        value = None
    if value is None:
        raise CommandError(
            f"'{text}' is not a date and time: use ISO 8601, e.g. 2026-05-01T00:00 or 2026-05-01T00:00+02:00"
        )
    return value if timezone.is_aware(value) else value.replace(tzinfo=dt.UTC)


class Command(BaseCommand):
    help = (
        "Create runs now for the occurrences of a cron or every job in [start, end), at most --max-runs (default 100)."
    )

    def add_arguments(self, parser):
        parser.add_argument("job", help="The job's name, e.g. billing.export-invoices.")
        parser.add_argument("--tenant", required=True, help="The tenant the job belongs to.")
        parser.add_argument("--start", required=True, help="Window start, ISO 8601 (UTC unless an offset is given).")
        parser.add_argument("--end", required=True, help="Window end (exclusive), in the past.")
        parser.add_argument(
            "--max-runs", type=int, default=100, help=f"Cap on runs created (1 to {backfill.BACKFILL_LIMIT})."
        )
        parser.add_argument("--note", default="", help="Why: saved in the audit record.")
        parser.add_argument("--dry-run", action="store_true", help="Only say how many runs it would create.")
        parser.add_argument(
            "--ignore-windows",
            action="store_true",
            help="Also run the occurrences that maintenance windows and calendars hold back (docs/windows.md).",
        )

    def handle(self, *args, job, tenant, start, end, max_runs, note, dry_run, ignore_windows, **options):
        definition = JobDefinition.objects.select_related("tenant").filter(tenant__name=tenant, name=job).first()
        if definition is None:
            raise CommandError(f"no job '{job}' in tenant '{tenant}'")
        start, end = instant(start), instant(end)
        try:
            plan = backfill.backfill_plan(definition, start, end, max_runs, ignore_windows=ignore_windows)
            truncated = plan.truncated
            for reason in plan.reasons:
                self.stdout.write(f"Left out: {reason}")
            if dry_run:
                more = f" (capped at {max_runs}; the window holds more)" if truncated else ""
                self.stdout.write(f"Would create {len(plan.times)} run(s) of {tenant}/{job}{more}.")
                return
            runs = backfill.backfill(
                definition,
                start,
                end,
                actor=f"cli:{getpass.getuser()}",
                max_runs=max_runs,
                note=note,
                progress=self.progress,
                quota=Quota.PENDING,
                ignore_windows=ignore_windows,
                plan=plan,
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages))
        except QuotaExceeded as exc:
            raise CommandError(f"capped by quota, no run created: {exc}")
        except Revoked as exc:
            raise CommandError(f"no run created: {exc}")
        self.stdout.write("")
        more = f" (capped at {max_runs}; the window holds more occurrences)" if truncated else ""
        self.stdout.write(self.style.SUCCESS(f"Created {len(runs)} run(s) of {tenant}/{job}{more}."))

    def progress(self, done, total):
        filled = BAR_WIDTH * done // max(total, 1)
        line = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} runs"
        if sys.stdout.isatty():
            self.stdout.write(f"\r{line}", ending="")
            self.stdout.flush()
        else:
            self.stdout.write(line)
