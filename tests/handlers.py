"""Tasks used by tests (run inside real worker processes); registered through DUETIME_TASK_MODULES.

The test tenants (tests/conftest.py) are allowed the `tests.handlers` prefix.
"""

import asyncio
import builtins
import json
import os
import time
from pathlib import Path

from django.tasks import task
from django.tasks.base import TaskContext


@task
def noop(**payload):
    return None


@task
def fail(**payload):
    raise RuntimeError("always fails")


def plain_function(context):
    """Not a Django task: a job naming it is refused."""


@task(takes_context=True)
def echo(context, report, **payload):
    """Writes the payload and the Duetime context it received to `report` (a file path)."""
    seen = {
        "payload": payload,
        "run_id": context.run_id,
        "attempt": context.attempt,
        "idempotency_key": context.idempotency_key,
        "fencing_token": context.fencing_token,
        "due_at": context.due_at.isoformat(),
        "lease_lost": context.lease_lost,
        "task_name": context.task_result.task.name,
        "django_context": isinstance(context, TaskContext),
        "result_id": context.task_result.id,
    }
    context.heartbeat()
    Path(report).write_text(json.dumps(seen))


@task(takes_context=True)
def hold_then_report(context, report, hold=20):
    """Attempt 1 works until its lease is lost (or `hold` seconds pass); later attempts succeed at once.

    Writes what each attempt saw to `<report>/<attempt>.json`.
    """
    report = Path(report)
    (report / f"{context.attempt}.started").write_text(str(context.fencing_token))
    if context.attempt == 1:
        deadline = time.monotonic() + hold
        while time.monotonic() < deadline and not context.lease_lost:
            time.sleep(0.05)  # the handler's work, in steps, checking its lease between them as a real one would
    (report / f"{context.attempt}.json").write_text(
        json.dumps(
            {
                "attempt": context.attempt,
                "token": context.fencing_token,
                "lease_lost": context.lease_lost,
                "key": context.idempotency_key,
            }
        )
    )


@task(takes_context=True)
def beat(context, seconds=3):
    """Work for `seconds`, heartbeating every 0.2 s as a long handler would; fails if the lease is lost."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        context.heartbeat()  # raises LeaseLost: the attempt fails, which a fault test then sees
        time.sleep(0.2)


@task(takes_context=True)
def record(context, report, seconds=0.0):
    """Appends one JSON line per execution to `report`: key, token, due time and start (wall clock), then works.

    The file is outside the database, so it keeps what a restore rewinds (the drills judge from it).
    """
    line = {
        "key": context.idempotency_key,
        "token": context.fencing_token,
        "due": context.due_at.timestamp(),
        "started": time.time(),
    }
    with open(report, "a") as out:  # one write per line, appended: lines of concurrent executions never mix
        out.write(json.dumps(line) + "\n")
    time.sleep(seconds)


@task
def sleep(seconds):
    """Sleeps: a long run (or one past its timeout)."""
    time.sleep(seconds)


@task
def exit_now(code=1):
    """Ends its process at once, as a crash in native code would: no exception, no cleanup."""
    os._exit(code)


@task
def add(a, b):
    """Returns a JSON object: it is stored on the attempt."""
    return {"sum": a + b}


@task
async def add_later(a, b):
    """An `async def` task: Django's Task.call runs it to completion."""
    await asyncio.sleep(0)
    return {"sum": a + b}


@task
def returns_a_set():
    """Returns what JSON cannot hold."""
    return {1, 2}


@task
def returns(value):
    """Returns `value` (a return value the size of the payload)."""
    return value


@task
def raises(what, message=""):
    """Raises the built-in exception named `what` (SystemExit, KeyboardInterrupt, GeneratorExit, ...)."""
    raise getattr(builtins, what)(message)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("tenant code's __str__ failed")


@task
def raises_unprintable():
    raise Unprintable()


@task
def returns_nul():
    """Returns text PostgreSQL's jsonb cannot hold."""
    return {"text": "a\x00b"}
