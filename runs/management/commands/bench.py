import json

from django.core.management.base import BaseCommand, CommandError
from django.db import connection


def _workloads():
    from bench import explain, portal
    from bench.workloads import WORKLOADS

    return {**WORKLOADS, "explain": explain.run, "portal": portal.run}


class Command(BaseCommand):
    help = "Measure Duetime: drain, steady, spike, backlog, explain, portal. Last line: one JSON object."

    def add_arguments(self, parser):
        parser.add_argument("workload")
        parser.add_argument("--runs", type=int, default=20_000)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--concurrency", type=int, default=200, help="Slots per worker process.")
        parser.add_argument("--batch", type=int, default=100, help="Runs per claim.")
        parser.add_argument("--rate", type=float, default=1000.0)
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--future", type=int, default=1_000_000)
        parser.add_argument("--timeout", type=float, default=300.0)
        parser.add_argument("--repeat", type=int, default=3, help="backlog: drains per side, compared by median.")

    def handle(self, *args, workload, **options):
        workloads = _workloads()
        if workload not in workloads:
            raise CommandError(f"unknown workload {workload!r}; choose one of: {', '.join(sorted(workloads))}")
        if connection.vendor != "postgresql":
            self.stderr.write("note: the targets are set for PostgreSQL; this database is " + connection.vendor)
        result = workloads[workload](options)
        self.stdout.write(json.dumps(result, default=str))
