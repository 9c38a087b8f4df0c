"""`manage.py after_restore [--reason TEXT]`: start a new restore generation after a restore or a promotion.

Step of the restore runbook (docs/operations.md, "Backups and restore") and
of the Patroni role-change hook (deploy/patroni/duetime-role-change): every
fencing token issued from now on is above every token issued before, on any
server (runs/generations.py); leases of earlier generations are given back
(their runs are claimable again at once, the attempt uncounted) and their
holders are refused as stale. Safe to run again: each run only moves the
generation on once more. Prints the generation, its first token and how many
leases it gave back.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from runs import generations, transitions


class Command(BaseCommand):
    help = "After a restore or a promotion: fencing tokens from now on exceed every earlier one; old leases released."

    def add_arguments(self, parser):
        parser.add_argument(
            "--reason", default="manage.py after_restore", help="Recorded with the generation (runs_generation)."
        )

    def handle(self, *args, reason, **options):
        try:
            number, _ = generations.bump_generation(reason)
            released = transitions.release_older_generations(
                why=f"released by after_restore: restore generation {number} began"
            )
        except DatabaseError as error:
            raise CommandError(f"after_restore failed, nothing to undo (run it again): {error}") from error
        self.stdout.write(
            f"restore generation {number}: fencing tokens from {generations.first_token(number)} on; "
            f"{released} lease(s) of earlier generations released"
        )
