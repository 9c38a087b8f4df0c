"""`bench tasks-drain`: Django's Tasks framework on Duetime versus django-tasks-db, on one database.

Enqueue: one process makes `--runs` `.enqueue()` calls of the same no-op
task (bench.handlers.noop) on each side, one call per transaction as request
handlers make them, in alternating blocks of BLOCK calls (so a change in the
machine's load falls on both sides alike), after one warm-up call each; the
rate is calls over each side's own time. Drain: `--workers` worker processes
per side, one side after the other: Duetime's `run_worker` (`--concurrency`
slots, `--batch`) and the peer's `db_worker` (one task at a time, as it
works). A drain rate counts from the first start to the last finish recorded
in each side's own table, so neither side's process start-up is counted.
Targets (issue 14): enqueue >= 1x, drain >= 5x the peer's.

The peer needs `pip install -r requirements-bench.txt` (django-tasks-db);
its processes use bench.tasks_db_settings (Duetime's settings plus the peer).
"""

import importlib.util
import json
import subprocess
import sys
import time
import uuid

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection
from django.utils.dateparse import parse_datetime

from bench import report
from bench.processes import MANAGE, Fleet, engine_env
from bench.setup import settle
from jobs.models import Tenant

PEER_SETTINGS = "bench.tasks_db_settings"
PEER_TABLE = "django_tasks_database_dbtaskresult"
BLOCK = 500  # enqueue calls per side before the other side's turn
TARGETS = {"enqueue": 1.0, "drain": 5.0}
# The enqueuing process (peer settings, with Duetime's backend as "duetime"). Prints each side's seconds.
ENQUEUE = """
import json, sys, time
import django
django.setup()
from bench.handlers import noop
queues, count, block = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
tasks = {"duetime": noop.using(queue_name=queues["duetime"], backend="duetime"),
         "peer": noop.using(queue_name=queues["peer"], backend="default")}
seconds = {side: 0.0 for side in tasks}
for side, task in tasks.items():
    task.enqueue(i=-1)  # warm-up: the first call makes Duetime's job, and imports on both sides
for start in range(0, count, block):
    order = list(tasks) if start // block % 2 == 0 else list(reversed(tasks))
    for side in order:
        started = time.perf_counter()
        for i in range(start, min(start + block, count)):
            tasks[side].enqueue(i=i)
        seconds[side] += time.perf_counter() - started
print(json.dumps(seconds))
"""


def run(options):
    if importlib.util.find_spec("django_tasks_db") is None:
        raise CommandError(
            "bench tasks-drain compares with django-tasks-db, which is not installed: "
            "run `.venv/bin/pip install -r requirements-bench.txt` first"
        )
    count = options["runs"]
    env = engine_env(DJANGO_SETTINGS_MODULE=PEER_SETTINGS)
    subprocess.run(
        [sys.executable, MANAGE, "migrate", "django_tasks_database", "--skip-checks", "-v", "0"], env=env, check=True
    )
    tenant = _tenant()
    queues = {"duetime": tenant.name, "peer": f"peer-{uuid.uuid4().hex[:8]}"}
    settle()
    seconds = _enqueue(queues, count, {**env, "DUETIME_TASKS_TENANT": tenant.name})
    settle()
    duetime = {
        "tenant": tenant.name,
        "enqueue_per_s": round(count / seconds["duetime"], 1),
        "drain": _drain_duetime(tenant, count + 1, options),
    }
    settle()
    peer = {
        "queue": queues["peer"],
        "enqueue_per_s": round(count / seconds["peer"], 1),
        "drain": _drain_peer(queues["peer"], count + 1, env, options),
    }
    return {
        "workload": "tasks-drain",
        "runs": count,
        "workers": options["workers"],
        "duetime": duetime,
        "django_tasks_db": peer,
        "enqueue_ratio": _ratio(duetime["enqueue_per_s"], peer["enqueue_per_s"]),
        "drain_ratio": _ratio(duetime["drain"]["runs_per_s"], peer["drain"]["runs_per_s"]),
        "targets": TARGETS,
    }


def _tenant():
    return Tenant.objects.create(
        name=f"bench-tasks-{uuid.uuid4().hex[:8]}",
        max_pending_runs=100_000_000,
        max_concurrent_runs=100_000,
        enqueue_rate_per_minute=100_000_000,
        task_module_prefixes="bench.handlers",
    )


def _drain_duetime(tenant, expected, options):
    fleet = Fleet(
        tenant.name, options["workers"], options["concurrency"], options["batch"], options["pool"], scheduler=False
    )
    try:
        report.wait_until_done(tenant, options["timeout"], fleet)
    finally:
        fleet.stop()
    return report.figures(tenant, expected)


def _drain_peer(queue, expected, env, options):
    workers = [
        subprocess.Popen(
            [sys.executable, MANAGE, "db_worker", "--queue-name", queue, "--interval", "0.05"]
            + ["--no-startup-delay", "--no-reload", "--worker-id", f"peer-w{i}", "--skip-checks"],
            env=env,
            stderr=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        for i in range(options["workers"])
    ]
    try:
        drained = _wait_for_peer(queue, options["timeout"], workers)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=40)
            except subprocess.TimeoutExpired:
                worker.kill()
    return {**_peer_figures(queue, expected), "timed_out": not drained}


def _enqueue(queues, count, env):
    done = subprocess.run(
        [sys.executable, "-c", ENQUEUE, json.dumps(queues), str(count), str(BLOCK)],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"the enqueuing process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _wait_for_peer(queue, timeout, workers):
    """Poll until none of the queue's tasks waits or runs (one probe, not a count); False: timed out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {PEER_TABLE} WHERE queue_name = %s AND status IN ('READY', 'RUNNING') LIMIT 1",
                [queue],
            )
            if cursor.fetchone() is None:
                return True
        if any(worker.poll() is not None for worker in workers):
            raise RuntimeError("a db_worker process died")
        time.sleep(0.2)
    return False


def _peer_figures(queue, expected):
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FILTER (WHERE status = 'SUCCESSFUL'), min(started_at), max(finished_at) "
            f"FROM {PEER_TABLE} WHERE queue_name = %s",
            [queue],
        )
        succeeded, first, last = cursor.fetchone()
    first, last = (parse_datetime(v) if isinstance(v, str) else v for v in (first, last))  # SQLite: text
    elapsed = (last - first).total_seconds() if first and last else None
    return {
        "runs": expected,
        "succeeded": succeeded,
        "lost": expected - succeeded,  # or not reached before --timeout (timed_out)
        "runs_per_s": round(succeeded / elapsed, 1) if elapsed else None,
        "elapsed_s": round(elapsed, 3) if elapsed else None,
    }


def _ratio(ours, theirs):
    return round(ours / theirs, 2) if ours and theirs else None
