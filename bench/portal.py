"""`manage.py bench portal`: the dashboards' render time with 10 million runs in the tables.

Fills PostgreSQL with one bench tenant ("bench-portal") of 200 cron jobs and
N runs (10 million unless `--runs` says otherwise) spread over the last 30
days, the way a busy installation looks: almost all finished (succeeded, a
few dead with their dead letters and attempts, some cancelled and skipped),
a ready backlog, retries, leases, runs scheduled ahead, attempts for the last
day, and the rollups of the last eight days. The runs are made by a SELECT
from generate_series that runs.enqueue.insert_selected inserts (with their
ready marks), a million at a time, the other rows by INSERT ... SELECT; the
tenant is reused by the next run of the bench if it already holds N runs.

Then it renders each portal page REPEAT times in-process, as a member of the
bench tenant (so tenant scoping is on), and reports p50/p95 per page in ms.
Target: p95 <= 300 ms per page on 2 cores with PostgreSQL on the same machine.
"""

import math
import statistics
import time

from django.db import connection
from django.test import Client
from django.urls import reverse

from jobs.models import JobDefinition, Tenant, shard_for
from runs import enqueue

TENANT = "bench-portal"
DEFAULT_RUNS = 10_000_000
JOBS = 200
DAYS = 30
REPEAT = 20
TARGET_MS = 300
CHUNK = 1_000_000
EXPRESSIONS = [
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "*/15 * * * *",
    "0 */2 * * *",
    "15 * * * *",
    "0 9 * * 1-5",
]
QUEUES = ["default", "reports", "billing", "email"]


def run(options):
    """Fill (or reuse) the bench tenant, render every page, return the figures."""
    if connection.vendor != "postgresql":
        raise SystemExit("bench portal needs PostgreSQL (INSERT ... SELECT generate_series): set DATABASE_URL")
    runs = options.get("runs") or DEFAULT_RUNS
    if runs == 20_000:  # the bench command's default for the engine workloads
        runs = DEFAULT_RUNS
    started = time.monotonic()
    tenant, filled = prepare(runs)
    fill_seconds = time.monotonic() - started if filled else 0.0
    pages = measure(tenant, options.get("repeat") or REPEAT)
    return {
        "workload": "portal",
        "runs": runs,
        "filled": filled,
        "fill_seconds": round(fill_seconds, 1),
        "target_p95_ms": TARGET_MS,
        "pages": pages,
        "all_within_target": all(p["p95_ms"] <= TARGET_MS for p in pages.values()),
    }


def prepare(runs):
    """The bench tenant with `runs` runs; (tenant, True if it was filled now)."""
    tenant = Tenant.objects.filter(name=TENANT).first()
    if tenant and _count(tenant) == runs:
        return tenant, False
    if tenant:
        _drop(tenant)
    tenant = Tenant.objects.create(
        name=TENANT, max_pending_runs=100_000_000, max_concurrent_runs=100_000, task_module_prefixes="bench.handlers"
    )
    jobs = JobDefinition.objects.bulk_create(
        [
            JobDefinition(
                tenant=tenant,
                name=f"bench.job-{i:03d}",
                schedule_kind="cron",
                cron_expr=EXPRESSIONS[i % len(EXPRESSIONS)],
                time_zone=("UTC", "Europe/Berlin", "America/New_York")[i % 3],
                queue=QUEUES[i % len(QUEUES)],
                target_ref="bench.handlers.noop",
                jitter_seconds=(0, 0, 300)[i % 3],
                shard=shard_for(TENANT, f"bench.job-{i:03d}"),
                next_due_at=None,  # never materialised by a scheduler running meanwhile
            )
            for i in range(JOBS)
        ]
    )
    job_ids = [j.pk for j in jobs]
    for start in range(0, runs, CHUNK):
        enqueue.insert_selected(
            INSERT_RUNS,
            {
                "tenant": tenant.pk,
                "job_ids": job_ids,
                "jobs": JOBS,
                "n": runs,
                "start": start,
                "stop": min(runs, start + CHUNK) - 1,
                "days": DAYS,
                "queues": QUEUES,
            },
        )
    with connection.cursor() as cursor:
        cursor.execute(INSERT_ATTEMPTS, {"tenant": tenant.pk})
        cursor.execute(INSERT_DEAD_LETTERS, {"tenant": tenant.pk})
        cursor.execute(INSERT_TENANT_MINUTES, {"tenant": tenant.pk})
        cursor.execute(INSERT_JOB_HOURS, {"tenant": tenant.pk})
        for table in ("runs_run", "runs_attempt", "dlq_deadletter", "runs_tenantminute", "runs_jobhour"):
            cursor.execute(f"VACUUM (ANALYZE) {table}")
    return tenant, True


def _count(tenant):
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs_run WHERE tenant_id = %s", [tenant.pk])
        return cursor.fetchone()[0]


def _drop(tenant):
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM runs_attempt a USING runs_run r WHERE a.run_id = r.id AND r.tenant_id = %s", [tenant.pk]
        )
        for table in (
            "dlq_deadletter",
            "runs_tenantminute",
            "runs_jobhour",
            "runs_run",
            "runs_readymark",
            "jobs_auditentry",
        ):
            cursor.execute(f"DELETE FROM {table} WHERE tenant_id = %s", [tenant.pk])
    tenant.delete()


# Run i of n is due at now - days + i * (days + 1 hour) / n: the newest are
# scheduled ahead (the last hour), the last 0.5 % before them hold the leased,
# retry_wait and ready (due in the last 10 minutes) runs; of the rest, per
# 10,000 runs: 100 dead, 50 cancelled, 50 skipped, 9,800 succeeded.
INSERT_RUNS = """
SELECT (%(job_ids)s::bigint[])[1 + i %% %(jobs)s] AS job_id, %(tenant)s AS tenant_id, 'schedule' AS origin,
       due AS due_at, due AS available_at, state,
       CASE WHEN state IN ('scheduled') THEN 0 ELSE 1 END AS attempt, 5 AS max_attempts, 900 AS timeout_seconds,
       'bench@' || i AS idempotency_key,
       CASE WHEN state = 'leased' THEN 1000000000 + i END AS fencing_token,
       CASE WHEN state = 'leased' THEN 'bench-worker' ELSE '' END AS worker_id,
       CASE WHEN state = 'leased' THEN now() + interval '20 seconds' END AS lease_expires_at,
       (%(queues)s::text[])[1 + (i %% %(jobs)s) %% 4] AS queue, 1 AS priority, 0 AS shard,
       CASE WHEN state IN ('succeeded', 'dead', 'leased') THEN due + interval '1 second' END AS started_at,
       CASE WHEN state IN ('succeeded', 'dead', 'cancelled', 'skipped') THEN due + interval '3 seconds' END AS finished_at,
       CASE WHEN state = 'dead' THEN 'Traceback (most recent call last):\n  ...\nValueError: bench failure ' || i ELSE '' END
           AS last_error,
       CASE WHEN state = 'cancelled' THEN 'cancelled by bench' WHEN state = 'skipped' THEN 'overlap: the previous run was still running (overlap policy forbid)' ELSE '' END
           AS reason
FROM generate_series(%(start)s, %(stop)s) AS i,
     LATERAL (SELECT now() - make_interval(days => %(days)s) + (i::float8 / %(n)s) * (make_interval(days => %(days)s) + interval '1 hour') AS due) AS d,
     LATERAL (SELECT CASE
         WHEN due > now() THEN 'scheduled'
         WHEN i >= %(n)s * 0.995 AND i %% 100 = 0 THEN 'leased'
         WHEN i >= %(n)s * 0.995 AND i %% 100 = 1 THEN 'retry_wait'
         WHEN i >= %(n)s * 0.995 AND due > now() - interval '10 minutes' THEN 'scheduled'
         WHEN i %% 10000 < 100 THEN 'dead'
         WHEN i %% 10000 < 150 THEN 'cancelled'
         WHEN i %% 10000 < 200 THEN 'skipped'
         ELSE 'succeeded' END AS state) AS s
"""

# First attempts of the last day's started runs, and of every dead run.
INSERT_ATTEMPTS = """
INSERT INTO runs_attempt (run_id, attempt, fencing_token, worker_id, available_at, started_at, ended_at, outcome, error,
    history_day)
SELECT r.id, 1, r.id, 'bench-worker', r.available_at, r.available_at + interval '1 second' * (random() * 2),
       r.available_at + interval '3 seconds', CASE WHEN r.state = 'dead' THEN 'failed' ELSE 'succeeded' END, r.last_error,
       r.history_day
FROM runs_run r
WHERE r.tenant_id = %(tenant)s AND r.state IN ('succeeded', 'dead')
  AND (r.state = 'dead' OR r.due_at > now() - interval '1 day')
"""

INSERT_DEAD_LETTERS = """
INSERT INTO dlq_deadletter (run_id, job_id, tenant_id, last_error, dead_at, resolved_by, history_day)
SELECT r.id, r.job_id, r.tenant_id, r.last_error, r.finished_at, '', DATE '9999-12-31'
FROM runs_run r WHERE r.tenant_id = %(tenant)s AND r.state = 'dead'
"""

# Eight days of per-minute rollups, as runs/rollups.py keeps them.
INSERT_TENANT_MINUTES = """
INSERT INTO runs_tenantminute (tenant_id, minute, first_attempts, lateness_ms_sum, lateness_ms_max, histogram,
    succeeded, failed, timed_out, lease_expired, stale)
SELECT %(tenant)s, m, 230, 230 * 400, 9000,
       jsonb_build_object('0', 20, '20', 60, '27', 80, '30', 40, '35', 20, '38', 8, '41', 2),
       225, 5, 0, (extract(minute FROM m)::int %% 17 = 0)::int, 0
FROM generate_series(date_trunc('minute', now()) - interval '8 days', date_trunc('minute', now()), interval '1 minute') AS m
"""

INSERT_JOB_HOURS = """
INSERT INTO runs_jobhour (job_id, tenant_id, hour, first_attempts, lateness_ms_sum, lateness_ms_max, histogram,
    succeeded, failed, timed_out, lease_expired, stale)
SELECT j.id, %(tenant)s, h, 70, 70 * 400, 9000, jsonb_build_object('0', 6, '20', 18, '27', 24, '30', 12, '35', 7, '38', 2, '41', 1),
       68, 2, 0, 0, 0
FROM jobs_jobdefinition j,
     generate_series(date_trunc('hour', now()) - interval '8 days', date_trunc('hour', now()), interval '1 hour') AS h
WHERE j.tenant_id = %(tenant)s
"""


def measure(tenant, repeat):
    """Render each page `repeat` times (after one warm-up); {page: {p50_ms, p95_ms, max_ms}}."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    user, _ = User.objects.get_or_create(username="bench-portal-operator", defaults={"is_staff": True})
    user.is_staff = True
    user.save()
    tenant.members.add(user, through_defaults={"role": "owner"})  # the pages as an owner sees them (every button)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    job = JobDefinition.objects.filter(tenant=tenant).order_by("pk").first()
    pages = {
        "overview": reverse("admin:portal_overview") + f"?tenant={tenant.name}",
        "lateness": reverse("admin:portal_lateness") + f"?tenant={tenant.name}",
        "heatmap": reverse("admin:portal_heatmap") + f"?tenant={tenant.name}",
        "job_page": reverse("admin:portal_job", args=[job.pk]),
        "run_list": reverse("admin:runs_run_changelist"),
        "run_list_ready": reverse("admin:runs_run_changelist") + "?state=ready",
        "job_list": reverse("admin:jobs_jobdefinition_changelist"),
        "dead_letters": reverse("admin:dlq_deadletter_changelist") + "?status=open",
    }
    results = {}
    for name, url in pages.items():
        timings = []
        for i in range(repeat + 1):
            t0 = time.perf_counter()
            response = client.get(url, secure=True)
            elapsed = (time.perf_counter() - t0) * 1000
            if response.status_code != 200:
                raise SystemExit(f"{name}: HTTP {response.status_code} for {url}")
            if i:
                timings.append(elapsed)
        timings.sort()
        results[name] = {
            "p50_ms": round(statistics.median(timings), 1),
            "p95_ms": round(timings[min(len(timings) - 1, math.ceil(0.95 * len(timings)) - 1)], 1),
            "max_ms": round(timings[-1], 1),
        }
    return results
