"""Named queries for the hot paths, one file per dialect with the same names.

Each query in postgres.sql / sqlite.sql starts with `-- name: <name>` and a
purpose line; the name equals the Python function that runs it.
"""

import datetime as dt
import functools
import re
from pathlib import Path

from django.db import connection
from django.utils.dateparse import parse_datetime

HERE = Path(__file__).parent
HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def load(dialect):
    text = (HERE / f"{dialect}.sql").read_text()
    parts = HEADER.split(text)[1:]
    return {name: body.strip() for name, body in zip(parts[::2], parts[1::2])}


def query(name):
    """The SQL text of `name` for the current connection's dialect."""
    dialect = "postgres" if connection.vendor == "postgresql" else "sqlite"
    return load(dialect)[name]


def cursor():
    """A cursor for the hot paths.

    On PostgreSQL it binds parameters server-side, so psycopg prepares each
    named query after a few runs and the planner's work (a millisecond or two
    for the claim) is paid once per connection, not once per batch.
    """
    if connection.vendor != "postgresql":
        return connection.cursor()
    import psycopg

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


def db_time(value):
    """A datetime as the SQLite backend stores it (UTC text); None stays None."""
    if value is None:
        return None
    return connection.ops.adapt_datetimefield_value(value)


def aware(value):
    """A datetime read by a raw SQLite query (text or naive UTC) as an aware UTC datetime."""
    if value is None or isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value
    if isinstance(value, str):
        value = parse_datetime(value)
    return value.replace(tzinfo=dt.UTC)
