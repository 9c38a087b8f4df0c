"""The tasks of the backend's contract tests: Django's own tests/tasks/tasks.py, rewritten for Duetime.

Declared for the "duetime" backend (settings.TASKS, tenant DUETIME_TASKS_TENANT: initech in tests), and
registered through DUETIME_TASK_MODULES (tests/environment.py), so `run_worker` may call them.
"""

import asyncio
import sys
import time
from pathlib import Path

from django.tasks import TaskContext, task

from runs.targets import PermanentError


@task(backend="duetime")
def noop_task(*args, **kwargs):
    return None


@task(backend="duetime")
async def noop_task_async(*args, **kwargs):
    await asyncio.sleep(0)


@task(backend="duetime")
def echo(*args, **kwargs):
    """What it was called with, as the worker called it: `task.func(*args, **kwargs)`."""
    return {"args": list(args), "kwargs": kwargs}


@task(backend="duetime")
def divide(numerator, denominator, /, *, places=2):
    """Positional-only and keyword-only parameters."""
    return round(numerator / denominator, places)


@task(backend="duetime", unique_for=3600)
def refresh_prices(shop_id, *, currency):
    """Unique by its arguments for an hour: a repeat within the hour answers with the first run."""
    return {"shop": shop_id, "currency": currency}


@task(backend="duetime")
def calculate_meaning_of_life():
    return 42


@task(backend="duetime")
def add(a, b=0):
    return a + b


@task(backend="duetime")
async def async_add(a, b):
    await asyncio.sleep(0)
    return a + b


@task(backend="duetime", queue_name="emails", priority=50)
def send_email(to):
    return f"sent to {to}"


@task(backend="duetime")
def complex_return_value():
    return {"a": [1, 2, {"b": 3}], "c": None, "d": 1.5}


@task(backend="duetime")
def failing_task_value_error():
    raise ValueError("This task failed due to ValueError")


@task(backend="duetime")
def complex_exception():
    raise ValueError(ValueError("This task failed"))


class BillingError(Exception):
    """An exception class of the project's own: its dotted path must come back in the result."""


@task(backend="duetime")
def failing_task_own_error():
    try:
        raise KeyError("the cause")
    except KeyError as exc:
        raise BillingError("This task failed due to BillingError") from exc


@task(backend="duetime")
def failing_task_permanent():
    raise PermanentError("no such account")


@task(backend="duetime", takes_context=True)
def get_task_id(context):
    return context.task_result.id


@task(backend="duetime", takes_context=True)
def test_context(context, attempt):
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
    return {"attempt": context.attempt, "run_id": context.run_id, "fencing_token": context.fencing_token}


@task(backend="duetime")
def exits():
    """Tenant code that ends "its" process: Django's own backends record builtins.SystemExit."""
    sys.exit(3)


@task(backend="duetime")
def interrupted():
    raise KeyboardInterrupt("raised by the handler, not typed by anyone")


@task(backend="duetime")
def generator_exit():
    raise GeneratorExit


@task(backend="duetime")
def returns_a_set():
    return {1, 2}


@task(backend="duetime", takes_context=True)
def meet(context, directory, count):
    """Arrive in `directory`, then wait (30 s at most) until `count` tasks have: they ran at the same time."""
    Path(directory, context.task_result.id).touch()
    deadline = time.monotonic() + 30
    while len(list(Path(directory).iterdir())) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(list(Path(directory).iterdir()))} of {count} tasks ran at once")
        time.sleep(0.05)
    return count


def not_a_task():
    """A plain function, to name an unregistered target."""
