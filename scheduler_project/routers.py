"""Which database a query goes to when a streaming replica is configured (DATABASE_REPLICA_URL).

Installed only when the replica is (settings.py); without it every query goes
to `default`, the primary, as before. With it:

- every write goes to the primary;
- a read goes to the replica only inside a `replica_reads()` scope, which the
  web opens for a safe request (GET, HEAD, OPTIONS) that is not pinned to the
  primary (scheduler_project/pinning.py). Management commands and the engine
  (claims, transitions, the scheduler, the worker) never open one, so they
  read the primary;
- even inside the scope, the primary serves a read made in a transaction
  (`transaction.atomic`, select_for_update), any read after the request wrote,
  and the models whose staleness would be wrong rather than late: sessions and
  users (a login must hold on the next page), API tokens (a revocation bites
  at once), idempotency records, content types and the admin log.

A replica lags its primary by a fraction of a second, or by more under load;
docs/operations.md says what a reader of the replica may see.
"""

import contextlib
import contextvars

from django.db import DEFAULT_DB_ALIAS, connections

REPLICA = "replica"

# Read from the primary even in a replica scope: see the module docstring.
PRIMARY_APPS = frozenset({"auth", "sessions", "contenttypes", "admin"})
PRIMARY_MODELS = frozenset({"jobs.apitoken", "jobs.idempotencyrecord"})


class _Scope:
    """One replica scope: may its reads go to the replica, and has it written (then: no more)."""

    def __init__(self):
        self.wrote = False


_scope = contextvars.ContextVar("duetime_replica_scope", default=None)


@contextlib.contextmanager
def replica_reads():
    """Let the reads of this block go to the replica, until the block writes. Nests; resets on exit.

    A context variable, so it follows a request into the thread or task that
    serves it (asgiref copies contexts) and never leaks into another request.
    """
    token = _scope.set(_Scope())
    try:
        yield
    finally:
        _scope.reset(token)


def reads_replica():
    """True if a read made here, outside a transaction, may go to the replica."""
    scope = _scope.get()
    return scope is not None and not scope.wrote


class ReplicaRouter:
    """Django's database router for the primary (`default`) and its streaming replica (`replica`)."""

    def db_for_read(self, model, **hints):
        if not reads_replica() or _in_transaction() or _primary_only(model):
            return DEFAULT_DB_ALIAS
        return REPLICA

    def db_for_write(self, model, **hints):
        # A model read from the replica is still saved to the primary; and the request, having
        # written, reads its own write from here on.
        scope = _scope.get()
        if scope is not None:
            scope.wrote = True
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        return True  # one database, two doors: a row read from either relates to a row from the other

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        # The replica is read-only; it receives the primary's schema by replication.
        return False if db == REPLICA else None


def _in_transaction():
    return connections[DEFAULT_DB_ALIAS].in_atomic_block


def _primary_only(model):
    return model._meta.app_label in PRIMARY_APPS or model._meta.label_lower in PRIMARY_MODELS
