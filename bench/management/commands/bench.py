import json

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

# --runs, --rate and --seconds when not given: these, or for a workload listed in SIZES its own.
DEFAULT_SIZES = {"runs": 20_000, "rate": 1000.0, "seconds": 10.0}
# bench noisy: the shape (issue 26): ten quiet tenants at 20 runs/s for 40 s, a 50,000-run flood.
SIZES = {"noisy": {"runs": 50_000, "rate": 20.0, "seconds": 40.0}}


def _workloads():
    from bench import (
        celery_transport,
        explain,
        failover,
        history,
        materialize,
        noisy,
        overhead,
        portal,
        startup,
        tasks_drain,
    )
    from bench.workloads import WORKLOADS

    return {
        **WORKLOADS,
        **celery_transport.WORKLOADS,
        **overhead.WORKLOADS,
        "explain": explain.run,
        "history": history.run,
        "portal": portal.run,
        "startup": startup.run,
        "failover": failover.run,
        "materialize": materialize.run,
        "tasks-drain": tasks_drain.run,
        "noisy": noisy.run,
    }


class Command(BaseCommand):
    help = (
        "Measure Duetime: drain, steady, spike, backlog, tenants, noisy, explain, portal, startup, failover, materialize, history, "
        "celery-drain, celery-steady, tasks-drain, metrics-overhead, move-log-overhead. "
        "Last line: one JSON object."
    )

    def add_arguments(self, parser):
        parser.add_argument("workload")
        parser.add_argument("--runs", type=int, help="Runs (default 20,000; noisy: the flood, 50,000).")
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--concurrency", type=int, default=200, help="Slots per worker process.")
        parser.add_argument("--batch", type=int, default=100, help="Runs per claim.")
        parser.add_argument("--pool", choices=["threads", "processes"], default="threads", help="run_worker --pool.")
        parser.add_argument("--rate", type=float, help="Runs per second (default 1,000; noisy: per quiet tenant, 20).")
        parser.add_argument("--seconds", type=float, help="How long the rate lasts (default 10; noisy: 40).")
        parser.add_argument("--future", type=int, default=1_000_000)
        parser.add_argument("--timeout", type=float, default=300.0)
        parser.add_argument(
            "--repeat",
            type=int,
            default=3,
            help="backlog, tenants, metrics-overhead, move-log-overhead: drains per side, compared by median.",
        )
        parser.add_argument("--tenants", type=int, default=100_000, help="tenants: tenants in all, idle but --active.")
        parser.add_argument("--active", type=int, default=100, help="tenants: tenants with work.")
        parser.add_argument(
            "--cap", type=int, default=10, help="noisy: the flooding tenant's max_concurrent_runs (below the slots)."
        )
        parser.add_argument(
            "--shape",
            choices=["idle", "design"],
            default="idle",
            help="tenants: what the other tenants hold: nothing (idle), or a cron job with --future runs ahead (design).",
        )
        parser.add_argument("--children", type=int, default=2, help="celery-*: Celery worker children (prefork).")
        parser.add_argument(
            "--minutes", type=float, default=5.0, help="failover: how long to kill the busiest scheduler every 30 s."
        )
        parser.add_argument("--schedulers", type=int, default=3, help="failover, materialize: run_scheduler processes.")
        parser.add_argument("--jobs", type=int, default=10_000, help="materialize: cron definitions.")
        parser.add_argument(
            "--days", type=int, default=30, help="history: days of history kept (--repeat older ones are dropped)."
        )
        parser.add_argument("--runs-per-day", type=int, default=100_000, help="history: finished runs per day.")

    def handle(self, *args, workload, **options):
        workloads = _workloads()
        if workload not in workloads:
            raise CommandError(f"unknown workload {workload!r}; choose one of: {', '.join(sorted(workloads))}")
        if connection.vendor != "postgresql":
            self.stderr.write("note: the targets are set for PostgreSQL; this database is " + connection.vendor)
        for name, size in SIZES.get(workload, DEFAULT_SIZES).items():
            if options[name] is None:
                options[name] = size
        result = workloads[workload](options)
        self.stdout.write(json.dumps(result, default=str))
