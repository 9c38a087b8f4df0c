import logging
import os
import socket

from django.conf import settings
from django.core.management.base import BaseCommand

from notify import notifier
from runs import canary, metrics, scheduler, shards
from runs.loop import DATABASE_ERRORS, GracefulStop, run_loop

log = logging.getLogger("duetime.scheduler")


class Command(BaseCommand):
    # Only Duetime's knobs (scheduler_project/checks.py): `manage.py check` covers the rest, and a
    # replacement process must start fast.
    requires_system_checks = ["duetime"]
    help = (
        "Materialise cron runs ahead, apply missed-run policies, reap expired leases; loops at most 1 s apart, "
        "renewing its shard leases every pass."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Do one pass and exit.")
        parser.add_argument(
            "--interval",
            type=float,
            default=0.5,
            help=f"Seconds between passes when idle (at most {shards.RENEW_EVERY_SECONDS:g}).",
        )
        parser.add_argument("--node", default="", help="This node's name in shard leases (default host:pid).")
        metrics.add_port_argument(parser)

    def handle(self, *args, once, interval, node, metrics_port, **options):
        owner = node or f"{socket.gethostname()}:{os.getpid()}"
        # Every pass renews the shard leases: a longer sleep would lose them (and the failover bound).
        interval = min(max(interval, 0.05), shards.RENEW_EVERY_SECONDS)
        stop = GracefulStop()
        shards.ensure_rows()
        if settings.DUETIME_CANARY:
            canary.ensure()
        metrics.serve(metrics.engine_port(metrics_port, "run_scheduler"), log)
        courier = notifier.use_courier()  # owners' webhooks and email from a thread: a slow one holds no pass
        log.info("scheduler %s started", owner)
        run_loop(
            lambda: self.step(owner),
            rest=lambda result: None if result.busy else stop.sleep(interval),
            done=lambda result: once,
            stop=stop,
            log=log,
            name=f"scheduler {owner}",
        )
        courier.stop(settings.DUETIME_NOTIFY_TIMEOUT_SECONDS + 1)  # a webhook under way: its answer is recorded
        try:
            shards.release(owner)
        except DATABASE_ERRORS:  # the database is away: the shards are taken over once their leases expire
            log.exception("scheduler %s: could not give its shards back", owner)
        log.info("scheduler %s stopped", owner)

    def step(self, owner):
        result = scheduler.tick(owner)
        if result.inserted or result.skipped or result.reaped or result.refused_shards:
            log.info(
                "tick: shards=%d jobs=%d inserted=%d skipped=%d reaped=%d refused_shards=%d",
                result.shards,
                result.materialized_jobs,
                result.inserted,
                result.skipped,
                result.reaped,
                result.refused_shards,
            )
        return result
