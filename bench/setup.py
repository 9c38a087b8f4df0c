"""Creating the bench tenant, job and runs quickly."""

import datetime as dt
import uuid

from django.db import connection, transaction

from jobs.models import JobDefinition, Tenant, shard_for
from runs import enqueue
from runs.enqueue import build_runs
from runs.models import Run

INSERT_CHUNK = 10_000


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
