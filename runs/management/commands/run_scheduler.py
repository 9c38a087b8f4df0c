import logging
import os
import socket

from django.core.management.base import BaseCommand

from runs import scheduler, shards
from runs.loop import DATABASE_ERRORS, GracefulStop, run_loop

log = logging.getLogger("duetime.scheduler")


class Command(BaseCommand):
    # Only Duetime's knobs (scheduler_project/checks.py): `manage.py check` covers the rest, and a
    # replacement process must start fast.
    requires_system_checks = ["duetime"]
    help = "Materialise cron runs ahead, apply missed-run policies, reap expired leases; loops at most 1 s apart."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Do one pass and exit.")
        parser.add_argument("--interval", type=float, default=0.5, help="Seconds between passes when idle (at most 1).")
        parser.add_argument("--node", default="", help="This node's name in shard leases (default host:pid).")

    def handle(self, *args, once, interval, node, **options):
        owner = node or f"{socket.gethostname()}:{os.getpid()}"
        interval = min(max(interval, 0.05), 1.0)
        stop = GracefulStop()
        shards.ensure_rows()
        log.info("scheduler %s started", owner)
        run_loop(
            lambda: self.step(owner),
            rest=lambda result: None if result.busy else stop.sleep(interval),
            done=lambda result: once,
            stop=stop,
            log=log,
            name=f"scheduler {owner}",
        )
        try:
            shards.release(owner)
        except DATABASE_ERRORS:  # the database is away: the shards are taken over once their leases expire
            log.exception("scheduler %s: could not give its shards back", owner)
        log.info("scheduler %s stopped", owner)

    def step(self, owner):
        result = scheduler.tick(owner)
        if result.inserted or result.skipped or result.reaped:
            log.info(
                "tick: shards=%d jobs=%d inserted=%d skipped=%d reaped=%d",
                result.shards,
                result.materialized_jobs,
                result.inserted,
                result.skipped,
                result.reaped,
            )
        return result
