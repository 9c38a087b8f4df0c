"""Materialisation at scale (issue 11): `--jobs` cron definitions, a burst of them due in the same minute.

`--jobs` definitions over tenants of 100 (the design's shape), spread over the
64 shards: half hourly at one minute M (the "everything at :00" burst), a
fifth hourly at M+1 or M+2, a fifth daily at H:M or H:M+1, a tenth every
minute. M is chosen so the burst falls due 75 s after the definitions are in,
so a scheduler meets it with the production look-ahead (DUETIME_LOOKAHEAD_SECONDS); the
every-minute ones start at the burst too.
`--schedulers` real run_scheduler processes then run until M+2 has passed.

Measured from the database: how far ahead of its due time each run was
inserted (due_at - created_at: the median, the 1st percentile -- the lead 99 %
of runs beat -- and the worst; a negative lead is a late occurrence); from the
operating system: the schedulers' CPU time (user + system, every pass of the
drill, idle ones included) per 1,000 definitions materialised.
"""

import datetime as dt
import functools
import os
import signal
import subprocess
import sys
import time
import uuid

from django.conf import settings

from bench.processes import MANAGE, engine_env
from bench.report import percentile
from jobs import cron
from jobs.models import JobDefinition, Tenant, shard_for
from runs import shards
from runs.models import Run

JOBS_PER_TENANT = 100
BURST_AFTER = 75  # seconds from the last definition inserted to the burst
CHUNK = 10_000


def run(options):
    """`manage.py bench materialize --jobs N [--schedulers 3]`."""
    prefix = f"bench-materialize-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    burst = create_definitions(prefix, options["jobs"])
    filled = time.monotonic() - started
    end = burst + dt.timedelta(seconds=150)  # M+2 has passed
    cpu = run_schedulers(options["schedulers"], until=end)
    runs = Run.objects.filter(tenant__name__startswith=prefix)
    leads = sorted((due - created).total_seconds() for due, created in runs.values_list("due_at", "created_at"))
    materialised = len(leads)
    return {
        "workload": "materialize",
        "tenant": f"{prefix}-*",
        "jobs": options["jobs"],
        "schedulers": options["schedulers"],
        "lookahead_seconds": settings.DUETIME_LOOKAHEAD_SECONDS,
        "fill_seconds": round(filled, 1),
        "burst_at": burst.isoformat(),
        "runs_materialised": materialised,
        "late": sum(1 for lead in leads if lead < 0),
        "lead_s": {
            "p50": round(percentile(leads, 50), 2) if leads else None,
            "p1": round(percentile(leads, 1), 2) if leads else None,
            "worst": round(leads[0], 2) if leads else None,
        },
        "scheduler_cpu_s": round(cpu, 2),
        "cpu_s_per_1000_definitions": round(1000 * cpu / materialised, 3) if materialised else None,
    }


def create_definitions(prefix, count):
    """`count` cron definitions in tenants `<prefix>-<i>` of JOBS_PER_TENANT; returns the burst instant."""
    guess = count / 4000  # seconds to insert them, roughly: the burst must not come before they are in
    burst = (shards.database_now() + dt.timedelta(seconds=guess + BURST_AFTER + 60)).replace(second=0, microsecond=0)
    m, h = burst.minute, burst.hour
    mix = [  # (share out of 20, expression)
        (10, f"{m} * * * *"),
        (2, f"{(m + 1) % 60} * * * *"),
        (2, f"{(m + 2) % 60} * * * *"),
        (2, f"{m} {h} * * *"),
        (2, f"{(m + 1) % 60} {(h + (m + 1) // 60) % 24} * * *"),
        (2, "* * * * *"),
    ]
    expressions = [expr for share, expr in mix for _ in range(share)]
    # Every definition's first occurrence is the burst or later (the every-minute ones too): none is
    # due before the schedulers are up.
    anchor = burst - dt.timedelta(minutes=1)
    first = functools.cache(lambda expr: cron.occurrences(expr, "UTC", anchor, 1)[0])
    tenants = Tenant.objects.bulk_create(
        Tenant(
            name=f"{prefix}-{i}",
            max_pending_runs=1_000_000,
            max_definitions=JOBS_PER_TENANT,
            task_module_prefixes="bench.handlers",
        )
        for i in range((count + JOBS_PER_TENANT - 1) // JOBS_PER_TENANT)
    )
    for start in range(0, count, CHUNK):
        jobs = []
        for i in range(start, min(count, start + CHUNK)):
            tenant, expr = tenants[i // JOBS_PER_TENANT], expressions[i % len(expressions)]
            name = f"job-{i % JOBS_PER_TENANT:03d}"
            jobs.append(
                JobDefinition(
                    tenant=tenant,
                    name=name,
                    schedule_kind="cron",
                    cron_expr=expr,
                    target_kind="python",
                    target_ref="bench.handlers.noop",
                    overlap_policy="allow",
                    next_due_at=first(expr),
                    shard=shard_for(tenant.name, name),
                )
            )
        JobDefinition.objects.bulk_create(jobs)
    if shards.database_now() > burst - dt.timedelta(seconds=BURST_AFTER):
        raise RuntimeError("inserting the definitions took longer than planned: the burst is too close")
    return burst


def run_schedulers(count, until):
    """Run `count` schedulers until `until` (database clock); returns their CPU seconds (user + system)."""
    env = engine_env()
    procs = [
        subprocess.Popen(
            [sys.executable, MANAGE, "run_scheduler", "--node", f"bench-m{i}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(count)
    ]
    cpu = 0.0
    try:
        while shards.database_now() < until:
            if any(proc.poll() is not None for proc in procs):
                raise RuntimeError("a scheduler exited during the bench")
            time.sleep(1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                _, _, usage = os.wait4(proc.pid, 0)
                cpu += usage.ru_utime + usage.ru_stime
            except ChildProcessError:  # reaped by poll() already (it exited early)
                pass
    return cpu
