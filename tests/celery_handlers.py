"""Tasks the Celery tests' jobs name (registered through DUETIME_TASK_MODULES, like tests.handlers).

Each execution appends one JSON line to `<report>/<run id>.jsonl`: what it
saw (key, token, attempt) and which process ran it, so a test can tell how
often and where a run executed, and kill or pause that process.
"""

import json
import os
import time
from pathlib import Path

from django.tasks import task


def _record(report, context, event):
    line = {
        "event": event,
        "run_id": context.run_id,
        "attempt": context.attempt,
        "key": context.idempotency_key,
        "token": context.fencing_token,
        "pid": os.getpid(),
        "lease_lost": context.lease_lost,
    }
    with open(Path(report) / f"{context.run_id}.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


@task(takes_context=True)
def record(context, report):
    """Records one execution, at once."""
    _record(report, context, "ran")


@task(takes_context=True)
def hold(context, report, seconds):
    """Attempt 1 records its start, holds `seconds` (its process may be killed or paused meanwhile), then
    records its end; later attempts record and return at once."""
    _record(report, context, "started")
    if context.attempt == 1:
        time.sleep(seconds)
    _record(report, context, "ended")


@task
def exits():
    """Tenant code that ends "its" process: the attempt fails as SystemExit; the Celery child carries on."""
    raise SystemExit(3)


@task
def returns_a_set():
    """Returns what JSON cannot hold: the attempt fails as TypeError."""
    return {1, 2}
