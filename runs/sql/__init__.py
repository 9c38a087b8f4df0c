"""Named queries for the hot paths, one file per dialect with the same names.

Each query in postgres.sql / sqlite.sql starts with `-- name: <name>` and a
purpose line; the name equals the Python function that runs it, through
`execute(name, params)`. A query may be several statements (SQLite has no
data-modifying CTEs): they run in order, in one transaction, and the rows of
the last one are the result.

This module is the only place that tells the dialects apart: it picks the
file, and it converts parameters for SQLite (see `sqlite_params`). Callers
pass the same parameters on both and read datetimes back through `aware`.
"""

import contextlib
import datetime as dt
import functools
import json
import logging
import re
from pathlib import Path

from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, connection, connections, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

HERE = Path(__file__).parent
log = logging.getLogger("duetime.db")
HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
# Statements of one query end with `;` at the end of a line.
STATEMENT_END = re.compile(r";\s*$", re.MULTILINE)


@functools.cache
def load(dialect):
    """{name: [statement, ...]} of one dialect's file."""
    text = (HERE / f"{dialect}.sql").read_text()
    parts = HEADER.split(text)[1:]
    return {name: _statements(body) for name, body in zip(parts[::2], parts[1::2])}


def _statements(body):
    code = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
    return [statement.strip() for statement in STATEMENT_END.split(code) if statement.strip()]


def dialect(db=None):
    """The dialect file of `db` (default: this thread's default connection)."""
    return "postgres" if (db or connection).vendor == "postgresql" else "sqlite"


def query(name):
    """The SQL text of `name` for the current connection's dialect (bench explain prints its plan)."""
    return ";\n".join(load(dialect())[name])


def execute(name, params):
    """Run the named query with `params`; returns the rows of its last statement."""
    db = connections[DEFAULT_DB_ALIAS]  # looked up once: each `connection.x` is a lookup of this thread's
    kind = dialect(db)
    postgres = kind == "postgres"
    statements = load(kind)[name]
    if not postgres:
        params = sqlite_params(params)
    one_transaction = transaction.atomic(savepoint=False) if len(statements) > 1 else contextlib.nullcontext()
    # Errors as Django's (django.db.DatabaseError and kin), as the ORM raises them:
    # the loops retry after those.
    try:
        with one_transaction, db.wrap_database_errors:
            if postgres:
                c = _hot_cursor(db)
                for statement in statements:
                    c.execute(statement, params)
                # The result's status, not `description` (which builds a column object per column each time).
                return c.fetchall() if c.pgresult.status == _TUPLES_OK else []
            with db.cursor() as c:
                for statement in statements:
                    c.execute(statement, params)
                return c.fetchall() if c.description else []
    except (DatabaseError, InterfaceError):
        drop_if_broken(db)
        raise


def drop_if_broken(db=None):
    """Close this thread's connection if an error left it unusable, so its next query reconnects.

    Inside a transaction the outermost `atomic` does it on its way out (its
    rollback fails on a dead connection, and it then closes it).
    """
    db = db or connection
    if db.errors_occurred and not db.in_atomic_block:
        db.close_if_unusable_or_obsolete()


# After this many runs of one query on one connection, psycopg prepares it (a server-side statement).
PREPARE_THRESHOLD = 5
_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK: the statement returned rows (perhaps none)


def on_connect(sender, connection, **kwargs):
    """Each new PostgreSQL connection's session: prepared statements keep one generic plan, and no JIT.

    With plan_cache_mode `auto` the server re-plans a prepared statement for
    every execution whenever a plan made for the values looks cheaper than
    the generic one, and with the partitioned run history it always does:
    the completion and the claim's candidates were planned anew each time,
    1.1-1.4 ms of planning for 0.3-0.6 ms of execution. Their generic plans
    prune the day partitions when they run (the queries name the open
    partition as a constant). Only the named queries are prepared (see
    `_hot_cursor`), so Django's own queries are planned as before.

    JIT compilation is for long analytical queries; every query here is
    short, but one that spans the day partitions (the rollups' fold, the
    portal's lists over history) is estimated above `jit_above_cost` once a
    few days of history exist, and then compiles hundreds of functions per
    execution: 3 s of CPU for an 18 ms fold, each scheduler pass, taken from
    the claims and completions on the same machine.

    Connected to django.db.backends.signals.connection_created (runs.apps);
    the session is in autocommit then, so the settings hold for the
    connection's life.
    """
    if connection.vendor != "postgresql":
        return
    if not transaction_pooling():
        with connection.connection.cursor() as c:
            c.execute("SET plan_cache_mode = force_generic_plan; SET jit = off")
    elif not _jit_checked:
        _warn_if_jit(connection)


_jit_checked = False  # this process already looked at `jit` behind a transaction pooler


def _warn_if_jit(connection):
    """Behind a transaction pooler nothing is SET at connect: say once per process if the role left JIT on.

    With JIT on, the hot statements (planned at every execution, as nothing is
    prepared) are compiled whenever their estimate passes jit_above_cost: the
    drain behind PgBouncer ran at a third of its rate until `ALTER ROLE ... SET
    jit = off` (docs/operations.md, PgBouncer).
    """
    global _jit_checked
    _jit_checked = True
    with connection.connection.cursor() as c:
        c.execute("SHOW jit")
        (jit,) = c.fetchone()
    if jit == "on":
        log.warning(
            "DUETIME_DATABASE_POOLING=transaction and the database role has jit = on: every hot statement is "
            "planned at each execution and may be JIT-compiled, which cut the drain to a third here. Run once: "
            "ALTER ROLE <duetime's role> SET jit = off; (docs/operations.md, PgBouncer)"
        )


def transaction_pooling():
    """DATABASE_URL names a pooler in transaction mode (DUETIME_DATABASE_POOLING): no session state of ours.

    A session setting would stay on the server connection for the next client
    the pooler gives it to, and a prepared statement would be looked for on
    a server connection that never saw it. So nothing is SET at connect (the
    settings go on the database role instead, docs/operations.md) and the
    hot cursor never prepares.
    """
    from django.conf import settings

    return settings.DUETIME_DATABASE_POOLING == "transaction"


def _hot_cursor(db):
    """The hot-path cursor of `db`'s current connection: made once per connection, then reused.

    On PostgreSQL it binds parameters server-side and psycopg prepares each
    named query after PREPARE_THRESHOLD runs, so the planner's work (0.2-0.6
    ms for each claim statement, 60 us for an insert) is paid a few times per
    connection, not once per batch. Django turns psycopg's preparing off
    (prepare_threshold None) for its own queries; only these cursors' named
    queries are prepared, unless DUETIME_DATABASE_POOLING is `transaction`
    (a pooler in transaction mode: then none is, see `transaction_pooling`).
    Like the ORM's cursors, it first replaces a connection that fails its
    health check (CONN_HEALTH_CHECKS): one kept across a database restart is dead.
    One cursor serves every query of a connection (each thread has its own):
    making one, with its own adapters, cost about as much as a take-over's
    statement. A new connection (after a restart, or CONN_MAX_AGE) gets a new one.
    """
    db.close_if_health_check_failed()
    db.ensure_connection()
    raw = db.connection
    hot = getattr(raw, "_duetime_hot_cursor", None)
    if hot is None or hot.closed:
        import psycopg

        # Django's ORM cursors bind client-side and never prepare; behind a transaction pooler neither does this.
        raw.prepare_threshold = None if transaction_pooling() else PREPARE_THRESHOLD
        hot = psycopg.Cursor(raw)
        hot.adapters.register_loader("timestamptz", _timestamptz_loader())
        raw._duetime_hot_cursor = hot
    return hot


@functools.cache
def _timestamptz_loader():
    """psycopg's own timestamptz loader (its C one with psycopg[binary]), not Django's.

    Django's wraps it in Python to set the connection's zone: 2.8 us a value
    against 0.8, and a claim and its completion read six times per run. The
    session's TimeZone is UTC (Django sets it), so both give aware UTC datetimes.
    """
    import psycopg

    return psycopg.adapters.get_loader(psycopg.adapters.types["timestamptz"].oid, psycopg.pq.Format.TEXT)


def sqlite_params(params):
    """SQLite's form of the parameters: lists as JSON arrays (read with json_each),
    datetimes as the backend stores them (UTC text), and `now` filled in when
    None: SQLite has no statement clock in that format, so the engine's clock
    stands in for it.
    """
    converted = {}
    for key, value in params.items():
        if key == "now" and value is None:
            value = timezone.now()
        if isinstance(value, list | tuple):
            value = json.dumps(value)
        converted[key] = db_time(value) if isinstance(value, dt.datetime) else value
    return converted


def db_time(value):
    """A datetime as the SQLite backend stores it (UTC text); None stays None."""
    if value is None:
        return None
    return connection.ops.adapt_datetimefield_value(value)


def aware(value):
    """A datetime read by a raw query (SQLite: text or naive UTC) as an aware UTC datetime."""
    if value is None or isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value
    if isinstance(value, str):
        value = parse_datetime(value)
    return value.replace(tzinfo=dt.UTC)
