"""Creating the bench tenant, job and runs quickly (PostgreSQL: INSERT ... SELECT)."""

import datetime as dt
import uuid

from django.db import connection

from jobs.models import JobDefinition, Tenant, shard_for


def bench_tenant(workload):
    name = f"bench-{workload}-{uuid.uuid4().hex[:8]}"
    tenant = Tenant.objects.create(
        name=name, max_pending_runs=100_000_000, max_concurrent_runs=100_000, enqueue_rate_per_minute=100_000_000
    )
    job = JobDefinition.objects.create(
        tenant=tenant,
        name="bench.noop",
        schedule_kind="none",
        target_kind="python",
        target_ref="bench.handlers.noop",
        queue=name,
        overlap_policy="allow",
        max_attempts=3,
        timeout_seconds=300,
        shard=shard_for(name, "bench.noop"),
    )
    return tenant, job


def insert_runs(job, first_due, count, spacing_seconds=0.0, start_index=0):
    """Insert `count` scheduled runs due at first_due + i * spacing (no jitter)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                """
                INSERT INTO runs_run (job_id, tenant_id, origin, due_at, available_at, state, attempt, max_attempts,
                    timeout_seconds, idempotency_key, queue, priority, shard, payload, worker_id, last_error, reason,
                    created_at)
                SELECT %(job)s, %(tenant)s, 'api', d, d, 'scheduled', 0, %(max_attempts)s, %(timeout)s,
                       %(name)s || '@bench-' || i, %(queue)s, %(priority)s, %(shard)s, '{}'::jsonb, '', '', '', now()
                FROM generate_series(%(start)s, %(start)s + %(count)s - 1) AS i,
                     LATERAL (SELECT %(first)s::timestamptz + make_interval(secs => (i - %(start)s) * %(spacing)s)) AS t(d)
                """,
                {
                    "job": job.pk,
                    "tenant": job.tenant_id,
                    "max_attempts": job.max_attempts,
                    "timeout": job.timeout_seconds,
                    "name": job.name,
                    "queue": job.queue,
                    "priority": job.priority,
                    "shard": job.shard,
                    "start": start_index,
                    "count": count,
                    "first": first_due,
                    "spacing": spacing_seconds,
                },
            )
            return
    from runs.materialize import build_runs
    from runs.models import Run

    dues = [first_due + dt.timedelta(seconds=i * spacing_seconds) for i in range(count)]
    rows = build_runs(job, dues, origin=Run.Origin.API)
    for i, row in enumerate(rows):
        row.idempotency_key = f"{job.name}@bench-{start_index + i}"
    Run.objects.bulk_create(rows, batch_size=2000)


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
        cursor.execute("CHECKPOINT")
