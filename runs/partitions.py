"""Run history by day on PostgreSQL: the partitions of runs_run, runs_attempt and dlq_deadletter.

Each of the three tables is partitioned by range of `history_day` (its
primary key is (id, history_day); migration runs/0006 built the layout):

- `<table>_open` holds the rows whose history_day is OPEN_DAY (9999-12-31):
  the runs still pending (scheduled, leased, retry_wait), the dead runs whose
  dead letter is open, their attempts, and the open dead letters. Claims,
  heartbeats, completions and the reaper name OPEN_DAY in their SQL, so the
  planner prunes every other partition: they never read history.
- `<table>_pYYYYMMDD` holds one day of history: what finished, or whose dead
  letter was resolved, that day (UTC). A run's row moves there when it
  finishes (the UPDATE that finishes it sets history_day; PostgreSQL moves
  the row), with its attempts; a dead run stays open until its letter is
  replayed (it is pending again) or discarded (it moves to that day).

The days that have a partition are listed in runs_history_day (one row per
day, written in the transaction that attaches the day's three partitions,
deleted before they are detached). A row going into history takes the
newest listed day on or before its own (`history_day`; the hot SQL computes
the same in the statement that moves it): a day with no partition of its own
(a pinned clock in a test, days with no scheduler to create them) shares
the previous one, so no write ever fails for want of a partition. Retention
follows from it: a day's partitions hold rows up to the next listed day, so
they are dropped only once that next day is past the retention (`expired`).

runs_history_day is not a Django model table: Django's test flush leaves it
alone, as it does the partitions themselves. On SQLite nothing here applies:
history_day is the row's own day and runs.retention deletes old rows in batches.
"""

import datetime as dt
import logging

from django.db import connection, transaction

from runs import sql

log = logging.getLogger("duetime.retention")

OPEN_DAY = dt.date(9999, 12, 31)
TABLES = ("runs_run", "runs_attempt", "dlq_deadletter")
AHEAD_DAYS = (
    3  # partitions exist this many days ahead (a longer outage of every scheduler only shares them: history_day)
)
# A DDL statement waits this long for its lock, then gives up until the next pass: a claim must never
# queue behind a partition change that itself waits for a long portal query.
LOCK_TIMEOUT = "2s"

# Each day partition of runs_run gets the occurrence and caller-key lookups that runs/sql insert_runs
# makes before inserting (not unique: the open partition's unique indexes arbitrate, see runs_run_open).
DAY_INDEXES = {
    "runs_run": (
        "CREATE INDEX IF NOT EXISTS {name}_occurrence ON {name} (job_id, due_at) WHERE origin = 'schedule'",
        "CREATE INDEX IF NOT EXISTS {name}_api_key ON {name} (tenant_id, idempotency_key) WHERE origin = 'api'",
    ),
}


def partitioned():
    """True where history is partitioned (PostgreSQL)."""
    return connection.vendor == "postgresql"


def partition_name(table, day):
    return f"{table}_p{day:%Y%m%d}"


def history_day(instant):
    """The history_day of a row that goes into history at `instant` (see the module docstring)."""
    day = instant.astimezone(dt.UTC).date()
    if not partitioned():
        return day
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce((SELECT max(day) FROM runs_history_day WHERE day <= %s),"
            " (SELECT min(day) FROM runs_history_day))",
            [day],
        )
        return cursor.fetchone()[0]


def days():
    """The listed days, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT day FROM runs_history_day ORDER BY day")
        return [row[0] for row in cursor.fetchall()]


def attached(table="runs_run"):
    """{day: detach pending?} of the day partitions `table` has in the catalog."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.inhdetachpending FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass AND c.relname ~ %s",
            [table, f"^{table}_p[0-9]{{8}}$"],
        )
        return {dt.datetime.strptime(name[-8:], "%Y%m%d").date(): pending for name, pending in cursor.fetchall()}


def create(day):
    """Attach the three partitions of `day` and list it, in one transaction; False if it was listed already.

    CREATE TABLE ... PARTITION OF would lock the parent against every claim;
    a table created on its own and then attached takes only SHARE UPDATE
    EXCLUSIVE on the parent, which reads and writes do not wait for.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [LOCK_TIMEOUT])
        cursor.execute("SELECT 1 FROM runs_history_day WHERE day = %s FOR UPDATE", [day])
        if cursor.fetchone():
            return False
        for table in TABLES:
            name = partition_name(table, day)
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
            for statement in DAY_INDEXES.get(table, ()):
                cursor.execute(statement.format(name=name))
            if day not in attached(table):
                cursor.execute(
                    f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
                    [day, day + dt.timedelta(days=1)],
                )
        cursor.execute("INSERT INTO runs_history_day (day) VALUES (%s)", [day])
    return True


def ensure_ahead(today, ahead=AHEAD_DAYS):
    """Create the partitions of `today` up to `ahead` days later, after the newest that exists; returns the days created.

    Never before the newest: a past day without a partition of its own stays
    with the partition before it (its rows are already there).
    """
    listed = days()
    start = max(today, listed[-1] + dt.timedelta(days=1)) if listed else today
    created = []
    day = start
    while day <= today + dt.timedelta(days=ahead):
        if create(day):
            created.append(day)
        day += dt.timedelta(days=1)
    return created


def expired(today, retention_days, listed=None):
    """The listed days (`listed`, default the database's) whose partitions are past the retention at `today`.

    Day d's partitions hold rows up to the next listed day (exclusive), so d
    expires once that next day is `retention_days` old: every row in it then
    finished at least that long ago. The newest day never expires. Oldest first.
    """
    cutoff = today - dt.timedelta(days=retention_days)
    listed = days() if listed is None else sorted(listed)
    return [day for day, following in zip(listed, listed[1:]) if following <= cutoff]


def drop(day):
    """Unlist `day`, then detach its three partitions concurrently and drop them. Needs autocommit.

    DETACH ... CONCURRENTLY takes only SHARE UPDATE EXCLUSIVE on the parent
    and waits for the queries that may still see the partition, so claims go
    on meanwhile; a plain DETACH would hold ACCESS EXCLUSIVE over every run.
    Once unlisted, no new row goes into the day. A crash or a lock timeout
    halfway leaves a detach pending or a detached table: `drop` again (the
    retention pass does, through `leftovers`) finishes it.
    """
    if connection.in_atomic_block:
        raise RuntimeError("runs.partitions.drop needs autocommit: DETACH ... CONCURRENTLY cannot run in a transaction")
    # Behind a transaction pooler a session setting would land on some other client's server connection:
    # there the detach waits for its lock without a timeout (it blocks no claim meanwhile).
    session = not sql.transaction_pooling()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_history_day WHERE day = %s", [day])
        if session:
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [LOCK_TIMEOUT])
        try:
            for table in TABLES:
                name = partition_name(table, day)
                pending = attached(table).get(day)
                if pending is False:
                    cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name} CONCURRENTLY")
                elif pending:
                    cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name} FINALIZE")
                cursor.execute(f"DROP TABLE IF EXISTS {name}")
        finally:
            if session:
                cursor.execute("SELECT set_config('lock_timeout', '0', false)")


def leftovers():
    """Days that have partitions in the catalog (or a detach pending) but are no longer listed: a drop cut short."""
    listed = set(days())
    found = set()
    for table in TABLES:
        found |= {day for day in attached(table) if day not in listed}
    return sorted(found)


def size_bytes():
    """The three tables' size on disk, every partition and index included."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " WHERE c.relkind = 'r' AND (c.relname = ANY(%s) OR c.relname ~ %s)",
            [[f"{t}_open" for t in TABLES], "^(runs_run|runs_attempt|dlq_deadletter)_p[0-9]{8}$"],
        )
        return int(cursor.fetchone()[0])
