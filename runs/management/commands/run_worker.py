import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobs import identifiers
from jobs.models import Tenant
from runs import metrics
from runs.loop import GracefulStop, run_loop
from runs.worker import POOL_THREADS, POOLS, Worker

log = logging.getLogger("duetime.worker")


class Command(BaseCommand):
    # Only Duetime's knobs (scheduler_project/checks.py): `manage.py check` covers the rest, and a
    # replacement process must start fast.
    requires_system_checks = ["duetime"]
    help = "Claim due runs of the given queues in batches and execute their python and http targets."

    def add_arguments(self, parser):
        parser.add_argument("--queues", default="default", help="Comma-separated queues to serve.")
        parser.add_argument("--concurrency", type=int, default=10, help="Runs executed at once (slots).")
        parser.add_argument(
            "--pool",
            choices=POOLS,
            default=POOL_THREADS,
            help="threads: handlers run in this process, timeouts are soft (for I/O-bound handlers); "
            "processes: one child process per slot, killed at timeout_seconds, a crash fails only its attempt.",
        )
        parser.add_argument("--batch", type=int, default=0, help="Most runs per claim (default DUETIME_CLAIM_BATCH).")
        parser.add_argument(
            "--poll", type=float, default=0, help="Seconds between claims when idle (default DUETIME_POLL_SECONDS)."
        )
        parser.add_argument("--grace", type=float, default=30, help="Seconds to let running work finish on SIGTERM.")
        parser.add_argument(
            "--worker-id", default="", help=f"Name recorded on leases (default host:pid): {identifiers.RULE}."
        )
        parser.add_argument(
            "--tenants",
            default="",
            help="Comma-separated tenant names: serve only their runs (a dedicated pool). Default: every tenant.",
        )
        parser.add_argument(
            "--exclude-tenants",
            default="",
            help="Comma-separated tenant names whose runs this worker never claims (they have their own pool).",
        )
        parser.add_argument("--once", action="store_true", help="Claim once, wait for those runs, complete, exit.")
        metrics.add_port_argument(parser)

    def handle(self, *args, queues, concurrency, pool, batch, poll, grace, worker_id, once, metrics_port, **options):
        queue_list = [q.strip() for q in queues.split(",") if q.strip()]
        if not queue_list:
            raise CommandError("--queues needs at least one queue name")
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        if worker_id and (problem := identifiers.problem(worker_id)):
            raise CommandError(f"--worker-id {problem}")  # logged on every move: never echoed
        only, excluded = dedicated_pool(options["tenants"], options["exclude_tenants"])
        poll = poll or settings.DUETIME_POLL_SECONDS
        stop = GracefulStop()
        worker = Worker(
            queue_list,
            concurrency,
            worker_id=worker_id or None,
            batch=batch or None,
            pool=pool,
            only_tenants=only and list(only.values()),
            except_tenants=list(excluded.values()),
        )
        log.info(
            "worker %s serving %s with %d slots (%s)%s",
            worker.worker_id,
            ",".join(queue_list),
            concurrency,
            pool,
            describe_pool(only, excluded),
        )
        metrics.serve(metrics.engine_port(metrics_port, "run_worker"), log)
        # A failed tick committed nothing: the leases of runs it finished expire and are retried.
        run_loop(
            worker.tick,
            rest=lambda result: worker.rest(result, poll),
            # --once: the first claim, or nothing left in flight; the drain below waits for the runs.
            done=lambda result: once and (result.claimed or not worker.inflight),
            stop=stop,
            log=log,
            name=f"worker {worker.worker_id}",
        )
        released = worker.drain(grace if not once else 3600)
        log.info("worker %s stopped (%d leases released)", worker.worker_id, released)


def dedicated_pool(tenants, exclude_tenants):
    """({name: id} to serve only (None: every tenant), {name: id} never to serve) from the two options.

    A name that matches no tenant is an error, not an empty pool: a typo must not leave a worker idle
    or let it serve the tenant it was meant to leave alone.
    """
    only = names(tenants, "--tenants")
    excluded = names(exclude_tenants, "--exclude-tenants") or {}
    if only is not None and excluded:
        raise CommandError("give --tenants or --exclude-tenants, not both")
    return only, excluded


def names(text, option):
    wanted = [name.strip() for name in text.split(",") if name.strip()]
    if not wanted:
        if text.strip():
            raise CommandError(f"{option} needs at least one tenant name")
        return None
    found = dict(Tenant.objects.filter(name__in=wanted).values_list("name", "pk"))
    unknown = sorted(set(wanted) - set(found))
    if unknown:
        raise CommandError(f"{option}: no tenant named {', '.join(unknown)}")
    return found


def describe_pool(only, excluded):
    if only is not None:
        return f" for tenants {','.join(sorted(only))} only"
    if excluded:
        return f" for every tenant but {','.join(sorted(excluded))}"
    return ""
