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
from runs import claims, sql


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


def _explain(cursor, name, params, timings):
    """Print the plan of `name`'s last statement, after running the ones before it.

    EXPLAIN ANALYZE really executes it, as the claim would.
    """
    *before, last = sql.load(sql.dialect())[name]
    for statement in before:
        cursor.execute(statement, params)
    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + last, params)
    plan = [row[0] for row in cursor.fetchall()]
    print(f"\n-- {name}\n" + "\n".join(plan))
    timings[name] = float(re.search(r"Execution Time: ([\d.]+)", plan[-1]).group(1))
