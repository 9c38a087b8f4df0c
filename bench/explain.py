"""`bench explain`: EXPLAIN (ANALYZE, BUFFERS) of the hot queries on the current tables.

Inserts `--runs` due runs (and `--future` runs scheduled days ahead) for a
fresh bench tenant, then plans and runs a claim of one batch and the
completion of that batch, in one transaction that is rolled back at the end.
Prints each plan and, last, a JSON line with each statement's execution time.
"""

import datetime as dt
import re

from django.db import connection, transaction

from bench.setup import bench_tenant, db_now, insert_runs, settle
from jobs.models import JobDefinition
from runs import claims, metrics, sql


def run(options):
    if connection.vendor != "postgresql":
        raise SystemExit("bench explain needs PostgreSQL")
    tenant, job = bench_tenant("explain")
    if options["future"]:
        insert_runs(
            job, db_now() + dt.timedelta(days=3), options["future"], spacing_seconds=0.2, start_index=10_000_000
        )
    insert_runs(job, db_now(), options["runs"])
    settle()
    timings = {}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs_run")
        total = cursor.fetchone()[0]
        params = {"queues": [job.queue], "tenant": None, "kinds": None, "now": None, "n": options["batch"]}
        params.update(only_tenants=None, except_tenants=[])
        params.update(lock_timeout=claims.CLAIM_LOCK_TIMEOUT, idle_timeout=claims.CLAIM_IDLE_TIMEOUT)
        _explain(cursor, "lock_ready_tenants", params, timings)
        _explain(
            cursor, "claim_candidates", {**params, "tenants": [tenant.pk], "per_tenant": options["batch"]}, timings
        )
        cursor.execute(
            "SELECT id FROM runs_run WHERE tenant_id = %s AND state = 'scheduled' ORDER BY available_at LIMIT %s",
            [tenant.pk, options["batch"]],
        )
        ids = [row[0] for row in cursor.fetchall()]
        _explain(cursor, "lease_runs", {"ids": ids, "worker": "explain", "now": None, "lease": 30}, timings)
        cursor.execute("SELECT id, fencing_token FROM runs_run WHERE id = ANY(%s)", [ids])
        leased = cursor.fetchall()
        completion = {
            "ids": [row[0] for row in leased],
            "tokens": [row[1] for row in leased],
            "outcomes": ["succeeded"] * len(leased),
            "errors": [""] * len(leased),
            "retryable": [False] * len(leased),
            "results": [None] * len(leased),
            "now": None,
        }
        heartbeat = {"id": leased[0][0], "token": leased[0][1], "lease": 30, "now": None}
        _explain(cursor, "heartbeat", heartbeat, timings)
        _explain(cursor, "complete_runs", completion, timings)
        _explain(cursor, "expire_leases", {"now": None, "n": 1000}, timings)
        transaction.set_rollback(True)
    return {
        "workload": "explain",
        "tenant": tenant.name,
        "rows_in_runs_run": total,
        "batch": len(ids),
        "execution_ms": timings,
    }


def claim_plans(queue, tenant_ids, batch, label):
    """EXPLAIN (ANALYZE, BUFFERS) of one claim's tenant and candidate queries, and of the ready-backlog
    gauges' query (runs.metrics.ready_backlog, read at each /metrics scrape), `batch` runs due now spread
    over `tenant_ids` (their jobs on `queue`), in a transaction rolled back at the end.

    For bench tenants, which prints them for each shape; returns each query's execution ms.
    """
    timings = {}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, tenant_id FROM jobs_jobdefinition WHERE tenant_id = ANY(%s) AND queue = %s", [tenant_ids, queue]
        )
        jobs = JobDefinition.objects.filter(pk__in=[row[0] for row in cursor.fetchall()])
        each = max(1, batch // len(tenant_ids))
        for i, job in enumerate(jobs):
            insert_runs(job, db_now(), each, start_index=90_000_000 + i * each)
        params = {"queues": [queue], "tenant": None, "kinds": None, "now": None, "n": batch, **claims.EVERY_TENANT}
        params.update(lock_timeout=claims.CLAIM_LOCK_TIMEOUT, idle_timeout=claims.CLAIM_IDLE_TIMEOUT)
        print(f"\n-- {label}")
        _explain(cursor, "lock_ready_tenants", params, timings)
        per_tenant = -(-batch // len(tenant_ids))
        _explain(cursor, "claim_candidates", {**params, "tenants": tenant_ids, "per_tenant": per_tenant}, timings)
        gauge, gauge_params = metrics.backlog_probes(db_now()).query.sql_with_params()
        _explain_statement(cursor, "ready_backlog", gauge, gauge_params, timings)
        transaction.set_rollback(True)
    return timings


def _explain(cursor, name, params, timings):
    """Print the plans of `name`'s statements (those that read tables), each run as the claim would.

    EXPLAIN ANALYZE really executes them; the settings statement (set_config) is run, not printed.
    `timings[name]` is the sum of their execution times.
    """
    timings[name] = 0.0
    for statement in sql.load(sql.dialect())[name]:
        if statement.startswith("SELECT set_config"):
            cursor.execute(statement, params)
            continue
        _explain_statement(cursor, name, statement, params, timings)


def _explain_statement(cursor, name, statement, params, timings):
    """Print the plan of one statement of `name`, adding its execution time to `timings[name]`."""
    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
    plan = [row[0] for row in cursor.fetchall()]
    print(f"\n-- {name}\n" + "\n".join(plan))
    timings[name] = timings.get(name, 0.0) + float(re.search(r"Execution Time: ([\d.]+)", plan[-1]).group(1))
