"""`bench history`: steady lateness with 30 days of history in the partitions, while a day of it is dropped.

1. Fill `--days` days of finished history (yesterday and before), plus
   `repeat` older days already past a retention of `--days`: each day a
   partition of its own, `--runs-per-day` succeeded runs with their attempt,
   made by a SELECT from generate_series that runs.enqueue.insert_selected
   inserts (as bench portal does), one statement per table and day, into a
   tenant `bench-history-<hex>`. Then VACUUM,
   CHECKPOINT and an operating-system sync, so that no write of the fill is
   still going to disk while a side is measured, and one unmeasured steady
   run (the fleet's first run meets cold caches).
2. `repeat` pairs of steady runs (`--rate` runs/s for `--seconds`, as
   `bench steady`), the two sides taking turns on the same database:
   - without history: the filled days' partitions detached from runs_run,
     runs_attempt and dlq_deadletter for the run (plain DETACH, the engine
     stopped between runs), attached again after it: the same tables, files
     and caches, with the history out of the engine's sight;
   - with history and a drop: every day attached; halfway through the run's
     due times a thread drops the oldest expired day the way the retention
     pass does (runs.partitions.drop: DETACH ... CONCURRENTLY, then DROP).
   Taking turns keeps what drifts over the series (the day's own partition
   growing with each run's runs, the machine) out of the comparison. The
   rollup cursor is moved past the filled attempts first: history that old
   was folded when it happened.

Prints the median p99 lateness of each side and their ratio (target <= 1.2),
how long each drop took and the p99 of the runs due around it, and the
database's size before the fill, after it and after the drops: what retention
keeps bounded. The bench holds the retention lease throughout, so the fleet's
scheduler drops nothing on its own. The history left (`--days` days) stays for
inspection; later runs of the bench add to its days.
"""

import contextlib
import datetime as dt
import os
import statistics
import sys
import threading
import time

from django.db import connection

from bench import workloads
from bench.setup import bench_tenant
from runs import enqueue, partitions, retention

OWNER = "bench-history"

# The day's runs, for runs.enqueue.insert_selected (which puts them in the day's partition, by finished_at).
FILL_RUNS = """
SELECT %(job)s AS job_id, %(tenant)s AS tenant_id, 'schedule' AS origin, due AS due_at, due AS available_at,
       'succeeded' AS state, 1 AS attempt, 3 AS max_attempts, 300 AS timeout_seconds,
       'bench.history@' || %(day)s || '-' || i AS idempotency_key, i AS fencing_token, 'bench-history' AS worker_id,
       %(queue)s AS queue, 1 AS priority, 0 AS shard, due + interval '4 milliseconds' AS started_at,
       due + interval '9 milliseconds' AS finished_at, due - interval '1 minute' AS created_at
FROM generate_series(0, %(n)s - 1) AS i,
     LATERAL (SELECT %(day)s::date::timestamp AT TIME ZONE 'UTC' + make_interval(secs => i * 86400.0 / %(n)s) AS due) d
"""

FILL_ATTEMPTS = """
INSERT INTO runs_attempt (run_id, attempt, fencing_token, worker_id, available_at, started_at, ended_at, outcome, error,
    history_day)
SELECT r.id, 1, r.fencing_token, r.worker_id, r.available_at, r.started_at, r.finished_at, 'succeeded', '', r.history_day
FROM runs_run r
WHERE r.history_day = %(day)s AND r.tenant_id = %(tenant)s
"""


def run(options):
    if connection.vendor != "postgresql":
        raise SystemExit("bench history needs PostgreSQL (its history is partitioned by day)")
    days, per_day, repeat = options["days"], options["runs_per_day"], options["repeat"]
    today = _today()
    hold_retention()
    attach(partitions.days())  # what an earlier run that died between its sides left detached
    size_before = database_size()
    tenant, job = bench_tenant("history")
    started = time.monotonic()
    filled = [today - dt.timedelta(days=n) for n in range(days + repeat, 0, -1)]
    fill(tenant, job, filled, per_day)
    fill_seconds = time.monotonic() - started
    skip_rollups()
    _vacuum()
    size_filled, history_filled = database_size(), partitions.size_bytes()
    workloads.steady(options)  # a warm-up, not measured: the fleet's first run meets cold caches
    baseline, with_history, drops, around = [], [], [], []
    for _ in range(repeat):
        hold_retention()
        with detached([day for day in filled if day in partitions.days()]):
            baseline.append(_p99(workloads.steady(options)))
        hold_retention()
        dropper = Dropper(today, days)
        figures = workloads.steady(options, during=dropper.start_midway)
        dropper.join()
        with_history.append(_p99(figures))
        drops.append(dropper.took)
        around.append(p99_around(figures["tenant"], dropper.at, dropper.took) if dropper.took else None)
    size_after, history_after = database_size(), partitions.size_bytes()
    without, with_ = statistics.median(baseline), statistics.median(with_history)
    return {
        "workload": "history",
        "tenant": tenant.name,
        "days": days,
        "runs_per_day": per_day,
        "rate": options["rate"],
        "seconds": options["seconds"],
        "p99_ms_without_history": without,
        "p99_ms_with_history_and_a_drop": with_,
        "ratio": round(with_ / without, 3) if without and with_ else None,
        "p99s": {"without_history": baseline, "with_history": with_history},
        "drop_seconds": drops,
        "p99_ms_due_during_each_drop": around,
        "fill_seconds": round(fill_seconds, 1),
        "fill_runs_per_s": round((days + repeat) * per_day / fill_seconds),
        "database_bytes": {"before_fill": size_before, "filled": size_filled, "after_drops": size_after},
        "history_bytes": {"filled": history_filled, "after_drops": history_after},
        "bytes_per_run": round(history_filled / ((days + repeat) * per_day)) if per_day else None,
        "days_listed": len(partitions.days()),
    }


def hold_retention():
    """Take the retention lease for the bench (15 minutes), so no scheduler drops a day on its own meanwhile."""
    from runs import leases, shards

    retention.take_lease(OWNER, _now())  # creates the row if need be
    (epoch,) = shards.next_fencing_tokens(1)
    leases.seize(retention.LEASE_NAME, OWNER, until=_now() + retention.LEASE, epoch=epoch)


@contextlib.contextmanager
def detached(days):
    """The partitions of `days` detached from their tables meanwhile (the days stay listed), attached again after.

    A plain DETACH: nothing runs between two steady runs. No row goes into
    those days meanwhile (a row goes into history on today's day), and if the
    bench dies before it attaches them again, its next run does (`attach`).
    """
    with connection.cursor() as cursor:
        for day in days:
            for table in partitions.TABLES:
                cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {partitions.partition_name(table, day)}")
    try:
        yield
    finally:
        attach(days)


def attach(days):
    """Attach the three partitions of each of `days` that exist detached (what `detached` left)."""
    with connection.cursor() as cursor:
        for day in days:
            for table in partitions.TABLES:
                name = partitions.partition_name(table, day)
                cursor.execute("SELECT to_regclass(%s)", [name])
                if cursor.fetchone()[0] is None or day in partitions.attached(table):
                    continue
                cursor.execute(
                    f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
                    [day, day + dt.timedelta(days=1)],
                )


def fill(tenant, job, days, per_day):
    """`per_day` succeeded runs, each with its attempt, on each of `days`, each day in its own partition."""
    for day in days:
        partitions.create(day)
        with connection.cursor() as cursor:
            params = {"job": job.pk, "tenant": tenant.pk, "queue": job.queue, "day": day, "n": per_day}
            enqueue.insert_selected(FILL_RUNS, params)
            cursor.execute(FILL_ATTEMPTS, params)
        sys.stderr.write(f"history: {day} filled ({per_day} runs)\n")


class Dropper(threading.Thread):
    """Drops the oldest day past a retention of `days`, after `delay` seconds, as the retention pass does."""

    def __init__(self, today, days, delay=0.0):
        super().__init__(name="bench-history-drop")
        self.today, self.days, self.delay, self.took, self.at = today, days, delay, None, None

    def start_midway(self, first_due, last_due):
        """Start, to drop halfway between the first and the last due time of the steady run."""
        self.delay = max(0.0, ((first_due + (last_due - first_due) / 2) - _now()).total_seconds())
        self.start()

    def run(self):
        try:
            time.sleep(self.delay)
            expired = partitions.expired(self.today, self.days)
            if expired:
                started, self.at = time.monotonic(), _now()
                partitions.drop(expired[0])
                self.took = round(time.monotonic() - started, 3)
                sys.stderr.write(f"history: dropped {expired[0]} in {self.took} s, from {self.at}\n")
        finally:
            connection.close()


def skip_rollups():
    """Move the rollup cursor past the attempts just filled: history that old was folded when it happened.

    Otherwise the fleet's scheduler spends the steady runs folding millions of
    attempts 20,000 a pass, which no running system does.
    """
    from runs.models import Attempt, RollupCursor

    last = Attempt.objects.order_by("-id").values_list("id", flat=True).first() or 0
    RollupCursor.objects.update_or_create(name="attempts", defaults={"last_id": last})


def p99_around(tenant_name, at, took):
    """p99 lateness (ms) of the tenant's first attempts available from 1 s before the drop to 1 s after it ended."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - a.available_at))"
            " FROM runs_attempt a JOIN runs_run r ON r.id = a.run_id AND r.history_day = a.history_day"
            " JOIN jobs_tenant t ON t.id = r.tenant_id"
            " WHERE t.name = %s AND a.attempt = 1 AND a.history_day >= %s"
            " AND a.available_at BETWEEN %s AND %s",
            [tenant_name, at.date(), at - dt.timedelta(seconds=1), at + dt.timedelta(seconds=took + 1)],
        )
        value = cursor.fetchone()[0]
    return None if value is None else round(value * 1000, 1)


def database_size():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return cursor.fetchone()[0]


def _p99(figures):
    return figures["lateness_ms"]["p99"]


def _vacuum():
    """As bench.setup.settle does for the engine's tables, for the history just written (its visibility map)."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) runs_run")
        cursor.execute("VACUUM (ANALYZE) runs_attempt")
        cursor.execute("CHECKPOINT")
    os.sync()  # the checkpoint's writes are in the operating system's cache: to disk now, not during a side


def _now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def _today():
    return _now().astimezone(dt.UTC).date()
