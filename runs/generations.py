"""The restore generation: the high bits of every fencing token, so that tokens never repeat across a restore.

A fencing token comes from one global sequence (runs/migrations/0002). A
restore of a backup, or a promoted standby that missed the last commits,
rewinds that sequence: without more, the next leases would be given token
numbers that workers still running from before hold, and a stale worker's
heartbeat and completion would be accepted while the new holder's were
refused. So the schema keeps a generation number (runs_generation, one row)
and every token is `generation << SHIFT | n`: bumping the generation moves
the sequence to `generation << SHIFT`, above any token an earlier generation
issued, whatever the restore lost. A token below the current generation's
first token is stale (heartbeat, completion, take-over and release refuse
it in SQL), like a token the run no longer holds.

Who bumps it:
- `manage.py after_restore` (`bump_generation`), the restore runbook's step
  and the Patroni role-change hook's (deploy/patroni/);
- on PostgreSQL, every process at each new connection (`follow_server`,
  connected to connection_created): when the server is not the one the row
  names (system identifier, timeline, database oid), the first connection to
  see it bumps, in the same statement that compares, before any other query
  of that connection. A promotion (new timeline), a point-in-time restore
  (new timeline) and a dump loaded into a new database or cluster are caught
  without the command; a dump loaded back into the same database is not, so
  the runbook always runs the command.

A generation has room for 2**40 tokens (a thousand years at 30 a second,
35 years at 1,000): the sequence's own order still holds past that, only a
generation's bounds would blur.
"""

import logging

from django.db import DEFAULT_DB_ALIAS

from runs import sql

log = logging.getLogger("duetime.generations")

SHIFT = 40
SERVER_CHANGED = "the server changed (restore, promotion or a dump loaded elsewhere)"
# What follow_server lets pass: the schema is not migrated yet (42P01: no table or sequence), or the
# server is a standby (55000, no WAL position: it takes no writes, so it issues no token).
NOT_YET = {"42P01", "55000"}


def first_token(number):
    """The first fencing token of generation `number`; every token of an earlier one is below it."""
    return number << SHIFT


def generation_of(token):
    """The generation a fencing token was issued in."""
    return token >> SHIFT


def bump_generation(reason, *, force=True):
    """A new generation now (manage.py after_restore); returns (number, reason).

    With force=False (PostgreSQL only), only if the server is not the one
    recorded; then None when nothing changed.
    """
    rows = sql.execute("bump_generation", {"force": force, "reason": reason, "now": None})
    return tuple(rows[0])[:2] if rows else None


def current():
    """The current generation number (0 before any bump)."""
    from runs.models import Generation

    row = Generation.objects.filter(pk=1).values_list("number", flat=True).first()
    return row or 0


def follow_server(sender, connection, **kwargs):
    """connection_created: bump the generation if this server is not the one recorded (see the module docstring).

    Runs on the new connection (autocommit) before anything else does, in one
    statement. On an error other than NOT_YET the connection is closed and
    the error raised: a process must not issue tokens it has not checked.
    """
    if connection.vendor != "postgresql" or connection.alias != DEFAULT_DB_ALIAS:
        return
    import psycopg

    statement = sql.load("postgres")["bump_generation"][0]
    try:
        with connection.connection.cursor() as c:
            row = c.execute(statement, {"force": False, "reason": SERVER_CHANGED}).fetchone()
    except psycopg.Error as error:
        if error.sqlstate in NOT_YET:
            return
        connection.close()
        raise
    if row is not None and row[1] != "recorded the server":
        log.warning("restore generation %s: %s; fencing tokens from %s on", row[0], row[1], first_token(row[0]))
