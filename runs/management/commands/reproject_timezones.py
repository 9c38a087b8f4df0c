"""`manage.py reproject_timezones [--dry-run]`: move future runs onto the tz database on disk now.

The same work as the scheduler's step (runs/reproject.py), every batch at
once: for each zone in use whose rules differ from those its runs were
projected with, the unclaimed runs that are no longer occurrences are
cancelled, the new occurrences inserted, `next_due_at` moved, and each job
that moved audited. `--dry-run` prints what would move and writes nothing.
"""

import getpass

from django.core.management.base import BaseCommand

from runs import reproject


class Command(BaseCommand):
    help = "Re-project future runs of the zones whose tz database rules changed (docs/timezone-changes.md)."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Say what would move; change nothing.")

    def handle(self, *args, dry_run, **options):
        result = reproject.reproject(dry_run=dry_run, actor=f"cli:{getpass.getuser()}", exhaust=True)
        verb = "would move" if dry_run else "moved"
        for change in result.changes:
            self.stdout.write(
                f"{change.zone}: tzdata {change.before} -> {change.after}: {verb} {change.jobs} job(s), "
                f"{change.cancelled} run(s) cancelled, {change.inserted} inserted"
            )
        if not result.changes:
            self.stdout.write(f"{result.zones} zone(s) in use; none changed since its runs were projected.")
        elif not dry_run:
            self.stdout.write(self.style.SUCCESS("Done: every move is in the audit log (action reproject)."))
