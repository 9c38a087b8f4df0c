"""Unique enqueues, as a caller asks for them: a second `.enqueue()` under the same key, within its TTL,
returns the first result.

Two ways to ask (docs/django-tasks.md, "Unique enqueues"):

    @task(backend="duetime", unique_for=3600)     # unique by its arguments for an hour
    def refresh_prices(shop_id): ...

    with tasks_backend.unique.unique_key("invoice-42", ttl=600):   # one explicit key for the block
        send_invoice.enqueue(42, copy=True)

A key belongs to one tenant and one task (its module path); tasks_backend.holds
keeps which run holds it. This module reads no table: DuetimeTask is the
backend's `task_class`, imported with the settings.
"""

import contextlib
import contextvars
import dataclasses
import datetime as dt
import hashlib
import json

from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask

MAX_TTL = dt.timedelta(days=366)
MAX_KEY_LENGTH = 200

_requested = contextvars.ContextVar("duetime_unique_key", default=None)


def ttl_of(value, what):
    """`value` (seconds or a timedelta) as a timedelta in (0, MAX_TTL]; InvalidTask otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, dt.timedelta)):
        raise InvalidTask(f"{what} must be a number of seconds or a timedelta, not {value!r}")
    ttl = value if isinstance(value, dt.timedelta) else dt.timedelta(seconds=value)
    if not dt.timedelta(0) < ttl <= MAX_TTL:
        raise InvalidTask(f"{what} must be more than 0 and at most 366 days, not {ttl}")
    return ttl


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DuetimeTask(Task):
    """Django's Task with Duetime's option: `unique_for` (seconds or a timedelta; None: not unique)."""

    unique_for: int | float | dt.timedelta | None = None

    def __post_init__(self):
        Task.__post_init__(self)
        if self.unique_for is not None:
            ttl_of(self.unique_for, "unique_for")


@contextlib.contextmanager
def unique_key(key, *, ttl):
    """Enqueues in this block (this thread or task) use `key`, held for `ttl` (seconds or a timedelta)."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise ValueError(f"a unique key is a string of 1-{MAX_KEY_LENGTH} characters, not {key!r:.80}")
    token = _requested.set((key, ttl_of(ttl, "ttl")))
    try:
        yield
    finally:
        _requested.reset(token)


def requested(task, args, kwargs):
    """(key, ttl) this enqueue of `task` asks for, or None. The block's key comes first, then `unique_for`.

    The stored key names the task: the same key given for two tasks makes two holds.
    """
    block = _requested.get()
    if block is not None:
        key, ttl = block
        return f"{task.module_path}:key:{key}", ttl
    unique_for = getattr(task, "unique_for", None)
    if unique_for is None:
        return None
    arguments = json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"))
    return f"{task.module_path}:args:{hashlib.sha256(arguments.encode()).hexdigest()}", ttl_of(unique_for, "unique_for")
