"""Scheduler failover (issue 10): kill the scheduler that owns the most shards, again and again.

`--schedulers` real `run_scheduler` processes share the 64 shards of a tenant
with many every-minute cron jobs (five-field cron has no seconds, so they all
fall due on the minute) and an `at` job falling due every half second, so
some occurrence is always about to be materialised. Every `KILL_EVERY`
seconds the process owning the most shards gets SIGKILL (no goodbye: its
leases must expire) and a new one is started in its place. The look-ahead is
the smallest that `manage.py check` allows (duetime.E005), so a slow takeover
shows up as an occurrence materialised after it was due.

Measured from the database: for each kill, how long each of the dead node's
shards stayed without a live owner (the shard-lease table is polled every
POLL_SECONDS, on the database clock: a takeover is seen at most that much
late), and, over every occurrence due during the drill, how many have no run
(missed), more than one (doubled), or a run created after its due time (late).
"""

import datetime as dt
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid

from django.db.models import Count
from django.db.models.functions import Now

from bench.processes import MANAGE, engine_env
from jobs import cron
from jobs.models import SHARDS, JobDefinition, Tenant, shard_for
from runs import shards
from runs.models import Run, ShardLease

KILL_EVERY = 30.0
POLL_SECONDS = 0.2
CRON_JOBS = 320  # five a shard on average
AT_SPACING = 0.5  # seconds between the `at` jobs' due times
SETTLE_TIMEOUT = 60.0


def run(options):
    """`manage.py bench failover [--minutes 5] [--schedulers 3]`."""
    kills = max(1, int(options["minutes"] * 60 // KILL_EVERY))
    return {"workload": "failover", **drill(kills=kills, schedulers=options["schedulers"], env=engine_env())}


def drill(*, kills, schedulers, env, kill_every=KILL_EVERY, log_dir=None):
    """Start `schedulers`, kill the busiest `kills` times `kill_every` s apart; returns the figures."""
    lookahead = math.ceil(2 * shards.failover_seconds())
    env = {**env, "PYTHONUNBUFFERED": "1", "DUETIME_LOOKAHEAD_SECONDS": str(lookahead)}
    span = (kills + 1) * kill_every
    tenant = failover_tenant(span)
    fleet = Schedulers(schedulers, env, log_dir)
    try:
        fleet.wait_until_sharing()
        start = database_now()
        takeovers = []
        for _ in range(kills):
            watch(fleet, until=start + dt.timedelta(seconds=kill_every * (len(takeovers) + 1)), pending=takeovers)
            takeovers.append(fleet.kill_busiest())
        watch(fleet, until=start + dt.timedelta(seconds=span), pending=takeovers)
        end = database_now()
        deadline = time.monotonic() + 30
        while any(kill.open for kill in takeovers) and time.monotonic() < deadline:
            watch(fleet, until=database_now() + dt.timedelta(seconds=1), pending=takeovers)
    finally:
        fleet.stop()
    return {
        "tenant": tenant.name,
        "schedulers": schedulers,
        "lease_seconds": shards.lease_ttl().total_seconds(),
        "lookahead_seconds": lookahead,
        "drill_seconds": round((end - start).total_seconds(), 1),
        **takeover_figures(takeovers),
        **occurrence_figures(tenant, start, end),
    }


def failover_tenant(span):
    """A fresh tenant with CRON_JOBS every-minute jobs and an `at` job every AT_SPACING s over the drill."""
    name = f"bench-failover-{uuid.uuid4().hex[:8]}"
    tenant = Tenant.objects.create(
        name=name,
        max_definitions=100_000,
        max_pending_runs=100_000_000,
        enqueue_rate_per_minute=100_000_000,
        task_module_prefixes="bench.handlers",
    )
    now = database_now()
    common = dict(tenant=tenant, target_kind="python", target_ref="bench.handlers.noop", overlap_policy="allow")
    jobs = []
    for i in range(CRON_JOBS):
        job = JobDefinition(name=f"cron-{i:04d}", schedule_kind="cron", cron_expr="* * * * *", **common)
        job.next_due_at = cron.occurrences(job.cron_expr, job.time_zone, now, 1)[0]
        jobs.append(job)
    # The first `at` job falls due after the schedulers are up (SETTLE_TIMEOUT at worst), the last after the drill.
    for i in range(int((SETTLE_TIMEOUT + span + 30) / AT_SPACING)):
        due = now + dt.timedelta(seconds=10 + i * AT_SPACING)
        jobs.append(JobDefinition(name=f"at-{i:05d}", schedule_kind="at", run_at=due, next_due_at=due, **common))
    for job in jobs:
        job.shard = shard_for(name, job.name)
    JobDefinition.objects.bulk_create(jobs, batch_size=1000)
    return tenant


class Kill:
    """One SIGKILL: when, whose, and for each of its shards how long until another node held it."""

    def __init__(self, victim, at, owned):
        self.victim, self.at = victim, at
        self.waits = dict.fromkeys(owned)  # shard name -> seconds until owned again (None: not yet)

    @property
    def open(self):
        return any(wait is None for wait in self.waits.values())

    def see(self, leases, now):
        for name, owner, expires_at in leases:
            if name in self.waits and self.waits[name] is None and owner != self.victim and expires_at > now:
                self.waits[name] = (now - self.at).total_seconds()


class Schedulers:
    """`count` run_scheduler processes named fo-<slot>.<generation>; a killed one is replaced at once."""

    def __init__(self, count, env, log_dir):
        self.env, self.log_dir = env, log_dir
        self.procs = {}  # node name -> Popen
        self.generation = 0
        for slot in range(count):
            self.start(slot)

    def start(self, slot):
        self.generation += 1
        node = f"fo-{slot}.{self.generation}"
        out = open(os.path.join(self.log_dir, f"{node}.log"), "w") if self.log_dir else subprocess.DEVNULL  # noqa: SIM115
        command = [sys.executable, MANAGE, "run_scheduler", "--node", node]
        self.procs[node] = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        if out is not subprocess.DEVNULL:
            out.close()  # the child has its own copy

    def owned(self, now):
        """{node: [shard names]} of the live shard leases of this fleet's nodes."""
        leases = ShardLease.objects.filter(name__startswith="shard-", owner__in=list(self.procs), expires_at__gt=now)
        found = {node: [] for node in self.procs}
        for name, owner in leases.values_list("name", "owner"):
            found[owner].append(name)
        return found

    def wait_until_sharing(self):
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            owned = self.owned(database_now())
            if all(owned.values()) and sum(map(len, owned.values())) == SHARDS:
                return
            self.check_alive()
            time.sleep(POLL_SECONDS)
        raise TimeoutError(f"the schedulers did not share the shards within {SETTLE_TIMEOUT} s")

    def kill_busiest(self):
        now = database_now()
        owned = self.owned(now)
        victim = max(owned, key=lambda node: len(owned[node]))
        self.procs[victim].send_signal(signal.SIGKILL)
        self.procs.pop(victim).wait()
        self.start(int(victim.split("-")[1].split(".")[0]))
        return Kill(victim, now, owned[victim])

    def check_alive(self):
        for node, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"scheduler {node} exited with code {proc.returncode}")

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def watch(fleet, *, until, pending):
    """Poll the shard leases every POLL_SECONDS until `until` (database clock), noting takeovers."""
    while True:
        rows = list(
            ShardLease.objects.filter(name__startswith="shard-")
            .annotate(db_now=Now())
            .values_list("name", "owner", "expires_at", "db_now")
        )
        now = rows[0][3]
        for kill in pending:
            kill.see([row[:3] for row in rows], now)
        fleet.check_alive()
        if now >= until:
            return
        time.sleep(POLL_SECONDS)


def database_now():
    return shards.database_now()


def takeover_figures(kills):
    waits = [wait for kill in kills for wait in kill.waits.values()]
    known = [w for w in waits if w is not None]
    return {
        "kills": len(kills),
        "shards_taken_over": len(known),
        "shards_never_taken_over": len(waits) - len(known),
        "takeover_s": {
            "p50": round(statistics.median(known), 2) if known else None,
            "max": round(max(known), 2) if known else None,
            "per_kill_max": [round(max(w for w in k.waits.values() if w is not None), 2) for k in kills if k.waits],
        },
    }


def occurrence_figures(tenant, start, end):
    """Every occurrence due in (start, end]: with no run, with two, created after its due time."""
    count = math.ceil((end - start).total_seconds() / 60) + 1  # every-minute occurrences in the window, at most
    expected = set()
    for job in JobDefinition.objects.filter(tenant=tenant):
        if job.schedule_kind == JobDefinition.ScheduleKind.AT:
            times = [job.run_at] if start < job.run_at <= end else []
        else:
            times = [t for t in cron.occurrences(job.cron_expr, job.time_zone, start, count) if t <= end]
        expected.update((job.pk, t) for t in times)
    runs = Run.objects.filter(tenant=tenant, due_at__gt=start, due_at__lte=end)
    present = set(runs.exclude(state="skipped").values_list("job_id", "due_at"))
    doubled = runs.values("job_id", "due_at").annotate(n=Count("id")).filter(n__gt=1).count()
    leads = [(due - created).total_seconds() for due, created in runs.values_list("due_at", "created_at")]
    return {
        "occurrences_due": len(expected),
        "missed": len(expected - present),
        "doubled": doubled,
        "late": sum(1 for lead in leads if lead < 0),
        "skipped": runs.filter(state="skipped").count(),
        "least_lead_s": round(min(leads), 2) if leads else None,
    }
