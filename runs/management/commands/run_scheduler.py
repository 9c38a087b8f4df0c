import logging
import os
import socket

from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections

from runs import scheduler, shards
from runs.loop import GracefulStop

log = logging.getLogger("duetime.scheduler")


class Command(BaseCommand):
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
        while not stop.requested:
            try:
                result = scheduler.tick(owner)
            except DatabaseError:
                # The database went away or failed over: every step is idempotent, so try again.
                log.exception("scheduler %s: tick failed; retrying in 1 s", owner)
                close_old_connections()
                stop.sleep(1)
                continue
            if result.inserted or result.skipped or result.reaped:
                log.info(
                    "tick: shards=%d jobs=%d inserted=%d skipped=%d reaped=%d",
                    result.shards,
                    result.materialized_jobs,
                    result.inserted,
                    result.skipped,
                    result.reaped,
                )
            if once:
                break
            if not result.busy:
                stop.sleep(interval)
        shards.release(owner)
        log.info("scheduler %s stopped", owner)
