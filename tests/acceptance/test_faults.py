"""Faults injected into real worker and scheduler processes: lost database connections, a dead child.

A lost connection is an everyday event (a failover, a restart, a pooler, an
operator's pg_terminate_backend): the processes must log it, reconnect and
carry on, and Duetime's own bookkeeping failing must never be recorded as a
handler's failure. Each test asserts from the database that the processes kept
working and that every attempt succeeded. A process that dies anyway is
started again by its supervisor (`run_all` here, systemd in deploy/).
"""

import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs import enqueue
from runs.models import Attempt, Run, ShardLease
from tests.acceptance.test_processes import Processes
from tests.conftest import engine_env
from tests.spawned import spawn, stop
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="faults are injected into PostgreSQL")


def named(application_name):
    """The test database's URL with an application_name, so the test can find that process's backends."""
    return engine_env()["DATABASE_URL"] + f"?application_name={application_name}"


def terminate_backends(*application_names):
    """pg_terminate_backend on every connection of these processes; returns how many were terminated."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = ANY(%s)",
            [list(application_names)],
        )
        return cursor.fetchone()[0]


def flowing_jobs(acme, make_job):
    """A quick job and a long one that heartbeats itself, both retried at once if an attempt fails."""
    retry = {"overlap_policy": "allow", "retry_base_seconds": 0, "retry_max_seconds": 0}
    quick = make_job(acme, "quick", **retry)
    long = make_job(acme, "long", target_ref="tests.handlers.beat", payload={"seconds": 3}, **retry)
    return quick, long


def flow(quick, long):
    """Enqueue a long run and 20 quick ones; return once the long one holds its lease and quick ones complete."""
    held = enqueue.enqueue(long)[0]
    batch = [enqueue.enqueue(quick)[0].pk for _ in range(20)]
    wait_until(
        lambda: (
            Run.objects.filter(pk=held.pk, state="leased").exists()
            and Run.objects.filter(pk__in=batch, state="succeeded").exists()
        ),
        message="runs to flow",
    )


@postgres_only
def test_it_keeps_working_when_its_backends_are_terminated(acme, make_job):
    quick, long = flowing_jobs(acme, make_job)
    with Processes() as fleet:
        worker = fleet.start("worker", "run_worker", "--worker-id", "w-faults", DATABASE_URL=named("faults-worker"))
        scheduler = fleet.start("scheduler", "run_scheduler", "--node", "s-faults", DATABASE_URL=named("faults-sched"))
        wait_until(lambda: ShardLease.objects.filter(owner="s-faults").exists(), message="the scheduler to start")
        for _ in range(3):
            flow(quick, long)
            assert terminate_backends("faults-worker", "faults-sched") > 0
        # After the last fault: the scheduler must materialise an `at` run, and the worker run it.
        due = timezone.now() + dt.timedelta(seconds=2)
        at = JobDefinition(
            tenant=acme, name="after", schedule_kind="at", run_at=due, target_kind="python", target_ref=quick.target_ref
        )
        save_definition(at, "test")
        after = [enqueue.enqueue(quick)[0].pk for _ in range(5)]
        wait_until(lambda: Run.objects.filter(job=at, state="succeeded").exists(), message="the `at` run to succeed")
        wait_until(lambda: not Run.objects.exclude(state="succeeded").exists(), message="every run to succeed")
        assert worker.poll() is None and scheduler.poll() is None
        assert Attempt.objects.filter(run_id__in=after, worker_id="w-faults").count() == 5
    failed = Attempt.objects.exclude(outcome="succeeded").values_list("run__job__name", "outcome", "error")
    assert list(failed) == [], "no attempt fails because Duetime's own connection was lost"
    assert Run.objects.filter(attempt__gt=1).count() == 0


def worker_child(supervisor, other_than=None):
    """The pid of `supervisor`'s live run_worker child (other than `other_than`), or None."""
    for pid in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()  # empty for a child that died
        except FileNotFoundError:
            continue
        if b"run_worker" in command and int(pid) != other_than:
            return int(pid)
    return None


GIVEN = set()


def free_port():
    """A free loopback port: the first free one of DUETIME_TEST_PORTS ("6400-6499") when set, else any.

    The range keeps the private clusters and poolers of tests that run side by side apart.
    """
    first, _, last = os.environ.get("DUETIME_TEST_PORTS", "").partition("-")
    for port in range(int(first), int(last or first) + 1) if first else [0] * 100:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = probe.getsockname()[1]
        if port not in GIVEN:  # a port given earlier may not be bound yet: never give it twice
            GIVEN.add(port)
            return port
    raise RuntimeError(f"no free port left (DUETIME_TEST_PORTS={os.environ.get('DUETIME_TEST_PORTS', '')!r})")


def run_by(job, pid):
    """Enqueue a run of `job` and wait until the worker process `pid` ran it."""
    run, _ = enqueue.enqueue(job)
    wait_until(
        lambda: Attempt.objects.filter(run=run, outcome="succeeded", worker_id__endswith=f":{pid}").exists(),
        message=f"worker {pid} to run it",
    )


def test_run_all_replaces_a_worker_that_died(acme, make_job):
    ping = make_job(acme, "ping", overlap_policy="allow")
    command = [sys.executable, "manage.py", "run_all", "--port", str(free_port()), "--skip-checks"]
    env = engine_env(DUETIME_POLL_SECONDS=0.05)
    supervisor = spawn(command, env=env)
    try:
        first = wait_until(lambda: worker_child(supervisor.pid), message="the worker child")
        run_by(ping, first)
        os.kill(first, signal.SIGKILL)
        second = wait_until(lambda: worker_child(supervisor.pid, other_than=first), message="a new worker child")
        run_by(ping, second)
        assert supervisor.poll() is None, "the others were not stopped"
    finally:
        code, output = stop(supervisor, timeout=40)
        print(output[-3000:])  # shown if the test failed
    assert "worker exited with code -9; restarting in 1 s" in output
    assert code == 0, output


PG_BIN = Path("/usr/lib/postgresql/15/bin")


def as_postgres(*command, check=True):
    """Run a PostgreSQL server program as the postgres user (initdb and postgres refuse root)."""
    user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*user, *map(str, command)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 or not check, f"{Path(command[0]).name} failed: {done.stdout}{done.stderr}"
    return done


class PrivatePostgres:
    """A PostgreSQL cluster of a test's own on a free port, under a temporary directory.

    Restarting it disturbs no other test: the shared server on 5432 is never touched.
    """

    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="duetime-faults-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        self.server = f"postgres://postgres@127.0.0.1:{self.port}"
        self.url = f"{self.server}/duetime"
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")

    def start(self):
        as_postgres(PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync")
        self.pg_ctl("start", "-w", "-l", self.base / "log", "-o", f"-p {self.port} -k {self.base} -c fsync=off")
        with psycopg.connect(f"{self.server}/postgres", autocommit=True) as admin:
            admin.execute("CREATE DATABASE duetime")
        migrate = [sys.executable, "manage.py", "migrate", "--skip-checks", "-v0"]
        subprocess.run(migrate, env=engine_env(DATABASE_URL=self.url), check=True, timeout=120)

    def pg_ctl(self, *args, check=True):
        return as_postgres(PG_BIN / "pg_ctl", "-D", self.data, *args, check=check)

    def restart(self):
        """A fast restart (every connection dropped), as after a failover or a minor upgrade."""
        # The server's output goes to its log: on our pipes, pg_ctl would never seem to finish.
        self.pg_ctl("restart", "-m", "fast", "-w", "-l", self.base / "log")

    def query(self, sql, params=()):
        with psycopg.connect(self.url, autocommit=True) as db:
            return db.execute(sql, params).fetchall()

    def django(self, code):
        """Run `code` in a Django shell on this cluster's database (the test's own ORM uses the shared server)."""
        shell = [sys.executable, "manage.py", "shell", "-c", code]
        subprocess.run(shell, env=engine_env(DATABASE_URL=self.url), check=True, timeout=60)

    def remove(self):
        self.pg_ctl("stop", "-m", "immediate", check=False)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def private_postgres():
    cluster = PrivatePostgres()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


FLOW = """
import datetime as dt
from django.utils import timezone
from jobs.models import JobDefinition, Tenant, shard_for
from runs import enqueue

acme = Tenant.objects.create(name="acme", task_module_prefixes="tests.handlers")
def job(name, **fields):
    return JobDefinition.objects.create(tenant=acme, name=name, schedule_kind="none", target_kind="python",
        overlap_policy="allow", retry_base_seconds=0, retry_max_seconds=0, shard=shard_for("acme", name), **fields)
quick = job("quick", target_ref="tests.handlers.noop")
long = job("long", target_ref="tests.handlers.beat", payload={"seconds": 3})
now = timezone.now()
for i in range(150):  # due over 15 s from now, a long one every 2 s
    enqueue.enqueue(quick, run_at=now + dt.timedelta(seconds=i / 10))
for i in range(8):
    enqueue.enqueue(long, run_at=now + dt.timedelta(seconds=i * 2))
"""

AT_RUN = """
import datetime as dt
from django.utils import timezone
from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant

due = timezone.now() + dt.timedelta(seconds=2)
save_definition(JobDefinition(tenant=Tenant.objects.get(name="acme"), name="after", schedule_kind="at", run_at=due,
    target_kind="python", target_ref="tests.handlers.noop"), "test")
"""


@postgres_only
def test_it_rides_out_a_database_restart_under_load(private_postgres):
    db = private_postgres
    with Processes() as fleet:
        worker = fleet.start("worker", "run_worker", "--worker-id", "w-private", DATABASE_URL=db.url)
        scheduler = fleet.start("scheduler", "run_scheduler", "--node", "s-private", DATABASE_URL=db.url)
        db.django(FLOW)
        wait_until(
            lambda: db.query("SELECT count(*) FROM runs_run WHERE state = 'succeeded'")[0][0] >= 30,
            message="runs to flow",
        )
        db.restart()  # mid-flow: runs leased, long ones heartbeating
        db.django(AT_RUN)  # after the restart: the scheduler must materialise it, the worker run it
        wait_until(
            lambda: (
                db.query("SELECT count(*) FROM runs_run WHERE state <> 'succeeded'") == [(0,)]
                and db.query("SELECT count(*) FROM runs_run") == [(159,)]
            ),
            message="every run, the `at` one too, to succeed",
        )
        assert worker.poll() is None and scheduler.poll() is None
    assert db.query("SELECT outcome, error FROM runs_attempt WHERE outcome <> 'succeeded'") == []
    assert db.query("SELECT count(*) FROM runs_run WHERE attempt > 1") == [(0,)]
