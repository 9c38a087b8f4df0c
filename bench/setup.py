"""Creating the bench tenant, job and runs quickly."""

import datetime as dt
import uuid

from django.db import connection, transaction

from jobs.models import JobDefinition, Tenant, shard_for
from runs import enqueue
from runs.enqueue import build_runs
from runs.models import Run

INSERT_CHUNK = 10_000
DESIGN_AHEAD_SECONDS = 300  # design_tenants: how far ahead the cron jobs' first runs are materialised


def bench_tenant(workload, queue=None):
    """A fresh tenant `bench-<workload>-<random>` with one no-op job on `queue` (default: its own name)."""
    name = f"bench-{workload}-{uuid.uuid4().hex[:8]}"
    tenant = Tenant.objects.create(
        name=name,
        max_pending_runs=100_000_000,
        max_concurrent_runs=100_000,
        enqueue_rate_per_minute=100_000_000,
        task_module_prefixes="bench.handlers",
    )
    job = JobDefinition.objects.create(
        tenant=tenant,
        name="bench.noop",
        schedule_kind="none",
        target_kind="python",
        target_ref="bench.handlers.noop",
        queue=queue or name,
        overlap_policy="allow",
        max_attempts=3,
        timeout_seconds=300,
        shard=shard_for(name, "bench.noop"),
    )
    return tenant, job


def idle_tenants(prefix, count):
    """`count` tenants with no job and no run, `<prefix>-idle-<i>`, inserted INSERT_CHUNK at a time."""
    for start in range(0, count, INSERT_CHUNK):
        names = (f"{prefix}-idle-{i}" for i in range(start, min(count, start + INSERT_CHUNK)))
        Tenant.objects.bulk_create(Tenant(name=name) for name in names)


def design_tenants(prefix, count, queue, future, ahead_seconds=DESIGN_AHEAD_SECONDS):
    """The design's shape: `count` tenants `<prefix>-cron-<i>`, each with one every-minute cron job on
    `queue` and `future` // `count` (at least 1) runs materialised ahead, the first `ahead_seconds` ahead.

    PostgreSQL only, and the bulk path: the tenants go in through the ORM a chunk at a time, then one
    statement clones a template job (created through the ORM) for every one of them, and
    runs.enqueue.insert_selected inserts their runs, made by generate_series, with their ready marks
    in one statement, where runs.enqueue.insert_runs would take one statement per job. The runs are what the
    materialiser writes (origin schedule, one per minute per job, each job at its own second);
    the jobs' next_due_at is past the last of them, so a scheduler would have nothing to add yet.
    Returns the number of runs it inserted.
    """
    if connection.vendor != "postgresql":
        raise SystemExit("the design shape is built with PostgreSQL's generate_series: set DATABASE_URL")
    names = [f"{prefix}-cron-{i}" for i in range(count)]
    for start in range(0, count, INSERT_CHUNK):
        Tenant.objects.bulk_create(
            Tenant(name=name, task_module_prefixes="bench.handlers") for name in names[start : start + INSERT_CHUNK]
        )
    per_tenant = max(1, future // max(1, count))
    first = db_now() + dt.timedelta(seconds=ahead_seconds)
    template = JobDefinition.objects.create(
        tenant=Tenant.objects.get(name=names[0]),
        name="design.cron",
        schedule_kind="cron",
        cron_expr="* * * * *",
        target_kind="python",
        target_ref="bench.handlers.noop",
        queue=queue,
        overlap_policy="allow",
        next_due_at=first + dt.timedelta(minutes=per_tenant + 1),
        shard=shard_for(names[0], "design.cron"),
    )
    columns = [f.column for f in JobDefinition._meta.concrete_fields if f.column not in ("id", "tenant_id")]
    pattern = f"{prefix}-cron-%"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO jobs_jobdefinition (tenant_id, {', '.join(columns)}) "
            f"SELECT t.id, {', '.join('j.' + c for c in columns)} FROM jobs_tenant t, jobs_jobdefinition j "
            "WHERE j.id = %s AND t.name LIKE %s AND t.id <> j.tenant_id",
            [template.pk, pattern],
        )
        enqueue.insert_selected(DESIGN_RUNS, {"first": first, "per": per_tenant, "pattern": pattern})
    return count * per_tenant


# design_tenants: the runs of the cloned cron jobs, one a minute from %(first)s (each job at its own
# second), for runs.enqueue.insert_selected.
DESIGN_RUNS = """
SELECT j.id AS job_id, j.tenant_id, 'schedule' AS origin, d.due AS due_at, d.due AS available_at, j.max_attempts,
       j.timeout_seconds, j.name || '@' || d.due AS idempotency_key, j.queue, j.priority, j.shard
FROM jobs_jobdefinition j
JOIN jobs_tenant t ON t.id = j.tenant_id AND t.name LIKE %(pattern)s
CROSS JOIN LATERAL (
    SELECT %(first)s::timestamptz + make_interval(secs => j.id %% 60 + k * 60) AS due
    FROM generate_series(0, %(per)s - 1) AS k
) AS d
"""


def insert_runs(job, first_due, count, spacing_seconds=0.0, start_index=0):
    """Insert `count` scheduled runs due at first_due + i * spacing (no jitter), in one transaction.

    Through runs.enqueue.insert_runs, the engine's one insert path, a chunk at
    a time so that a million rows never sit in memory at once.
    """
    with transaction.atomic():
        for start in range(0, count, INSERT_CHUNK):
            dues = [
                first_due + dt.timedelta(seconds=i * spacing_seconds)
                for i in range(start, min(count, start + INSERT_CHUNK))
            ]
            rows = build_runs(job, dues, origin=Run.Origin.API, key="bench")  # each gets its own key below
            for i, row in enumerate(rows, start=start_index + start):
                row.idempotency_key = f"{job.name}@bench-{i}"
            enqueue.insert_runs(rows)


def db_now():
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0]
    from django.utils import timezone

    return timezone.now()


def settle():
    """Bring the tables to the state a running system keeps them in before measuring.

    After a bulk insert PostgreSQL has dirty pages to write and stale
    statistics; autovacuum and the checkpointer would deal with them minutes
    later, in the middle of the measurement. Do it now instead, for every
    phase alike, so each phase measures the engine, not the bulk insert.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) runs_run")
        cursor.execute("VACUUM (ANALYZE) jobs_tenant")
        cursor.execute("CHECKPOINT")
