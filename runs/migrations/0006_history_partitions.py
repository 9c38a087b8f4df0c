# PostgreSQL: runs_run, runs_attempt and dlq_deadletter become tables partitioned by range of history_day
# (runs/partitions.py): an open partition (9999-12-31) for what is still open, one partition per day of
# history, and the list of those days (runs_history_day). SQLite keeps its plain tables: nothing here.
#
# Each table is rebuilt: renamed, created again partitioned with the same columns, checks and identity,
# its rows copied (history so far goes into today's partition), the old one dropped, then its indexes and
# foreign keys created again as they were, except:
# - primary keys become (id, history_day): a partitioned table's keys must hold the partition key;
# - unique (job, due_at) and (tenant, idempotency_key) of runs, and one open dead letter per run, become
#   unique indexes of the open partitions (runs/sql insert_runs checks history; see runs/enqueue.py), and
#   plain indexes of each day of runs for that check;
# - an attempt's (run, attempt) gains history_day (a run's attempts share its day).
# On a large install the copy takes a while: run this migration in a maintenance window.
# State: nothing changes (runs/0005 and dlq/0002 brought the columns); not reversible.

import datetime

from django.db import migrations

OPEN_DAY = "9999-12-31"
AHEAD_DAYS = 3
TABLES = ("runs_run", "runs_attempt", "dlq_deadletter")
# Unique indexes of the plain tables, and what each becomes. Any other unique index stops the migration.
UNIQUE = {
    "run_unique_occurrence": None,  # see OPEN_INDEXES and DAY_INDEXES
    "run_unique_api_key": None,
    "attempt_unique_per_run": "CREATE UNIQUE INDEX attempt_unique_per_run ON runs_attempt (run_id, attempt, history_day)",
    "deadletter_one_open_per_run": None,
}
OPEN_INDEXES = (
    "CREATE UNIQUE INDEX run_open_unique_occurrence ON runs_run_open (job_id, due_at) WHERE origin = 'schedule'",
    "CREATE UNIQUE INDEX run_open_unique_api_key ON runs_run_open (tenant_id, idempotency_key) WHERE origin = 'api'",
    "CREATE UNIQUE INDEX deadletter_open_one_per_run ON dlq_deadletter_open (run_id)"
    " WHERE replayed_at IS NULL AND discarded_at IS NULL",
)
DAY_INDEXES = (
    "CREATE INDEX {name}_occurrence ON {name} (job_id, due_at) WHERE origin = 'schedule'",
    "CREATE INDEX {name}_api_key ON {name} (tenant_id, idempotency_key) WHERE origin = 'api'",
)


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")
        (first,) = cursor.fetchone()
        days = [first + datetime.timedelta(days=n) for n in range(AHEAD_DAYS + 1)]
        cursor.execute("CREATE TABLE runs_history_day (day date PRIMARY KEY)")
        cursor.executemany("INSERT INTO runs_history_day (day) VALUES (%s)", [[day] for day in days])
        for table in TABLES:
            rebuild(cursor, table, first, days)
        for statement in OPEN_INDEXES:
            cursor.execute(statement)
        for day in days:
            for statement in DAY_INDEXES:
                cursor.execute(statement.format(name=f"runs_run_p{day:%Y%m%d}"))


def rebuild(cursor, table, first, days):
    cursor.execute(
        "SELECT conname FROM pg_constraint WHERE confrelid = %s::regclass AND conrelid <> confrelid", [table]
    )
    if referencing := cursor.fetchall():
        raise RuntimeError(f"{table} is still referenced by foreign keys {referencing}: drop them first")
    cursor.execute(
        "SELECT c.relname, i.indisunique, i.indisprimary, pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass",
        [table],
    )
    indexes = []
    for name, unique, primary, definition in cursor.fetchall():
        if primary:
            continue
        if unique:
            if name not in UNIQUE:
                raise RuntimeError(f"unexpected unique index {name} on {table}: say what it becomes in UNIQUE")
            if UNIQUE[name]:
                indexes.append(UNIQUE[name])
            continue
        indexes.append(definition)
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    foreign_keys = cursor.fetchall()
    cursor.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
        " ORDER BY attnum",
        [table],
    )
    columns = [row[0] for row in cursor.fetchall()]
    old = f"{table}_unpartitioned"
    cursor.execute(f"ALTER TABLE {table} RENAME TO {old}")
    cursor.execute(
        f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)"
        " PARTITION BY RANGE (history_day)"
    )
    cursor.execute(f"CREATE TABLE {table}_open PARTITION OF {table} FOR VALUES FROM ('{OPEN_DAY}') TO (MAXVALUE)")
    for day in days:
        cursor.execute(
            f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table} FOR VALUES FROM (%s) TO (%s)",
            [day, day + datetime.timedelta(days=1)],
        )
    listed = ", ".join(columns)
    chosen = ", ".join(
        f"CASE WHEN history_day = '{OPEN_DAY}' THEN history_day ELSE %(first)s END" if c == "history_day" else c
        for c in columns
    )
    cursor.execute(f"INSERT INTO {table} ({listed}) SELECT {chosen} FROM {old}", {"first": first})
    cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), coalesce(max(id), 0) + 1, false) FROM {old}")
    cursor.execute(f"DROP TABLE {old}")
    cursor.execute(f"SELECT pg_get_serial_sequence('{table}', 'id')")
    cursor.execute(f"ALTER SEQUENCE {cursor.fetchone()[0]} RENAME TO {table}_id_seq")
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id, history_day)")
    for definition in indexes:
        cursor.execute(definition)
    for name, definition in foreign_keys:
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")


class Migration(migrations.Migration):
    # DDL over three tables in one transaction; PostgreSQL runs it atomically.
    dependencies = [
        ("runs", "0005_history_layout"),
        ("dlq", "0002_history_layout"),
    ]

    operations = [migrations.RunPython(partition)]
