"""The Patroni failover drill: the primary's postmaster killed under load, twice, and nothing lost or run early.

etcd (one member) and two PostgreSQL nodes under Patroni with synchronous
replication, the settings of deploy/patroni/duetime.yml (this test's own ports
and paths; its role-change hook is deploy/patroni/duetime-role-change), all
on loopback in a temporary directory. Two workers and a scheduler connect
through a multi-host DATABASE_URL with target_session_attrs=read-write.
Runs fall due all along (and a burst falls due at once just before each
kill); the primary's postmaster is killed with SIGKILL, Patroni promotes the
standby, the old primary rejoins as a standby, and a second kill fails over
back. Judged from the last primary's rows and from the executions the handler
wrote to a file: no run lost, none started early, one accepted completion per
run, every re-execution with the same key and a higher token, every engine
process alive, and leases again after each kill. How soon is printed, not
asserted: a bound on elapsed time fails on a busy machine (it did under
stress-ng), and `manage.py bench failover` measures the gap.
"""

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest
import requests
from django.db import connection

from tests.acceptance.test_faults import PG_BIN
from tests.acceptance.test_faults import free_port as free
from tests.acceptance.test_processes import Processes
from tests.conftest import engine_env
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PATRONI, ETCD = shutil.which("patroni"), shutil.which("etcd")
pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="Patroni manages PostgreSQL"),
    pytest.mark.skipif(
        PATRONI is None or ETCD is None,
        reason="Patroni or etcd is not installed (Debian: apt-get install patroni etcd-server)",
    ),
]

TTL = 20  # Patroni's leader key TTL (deploy/patroni/duetime.yml; Patroni's minimum)
# How long the test waits for leases after a promotion before calling the engine stuck: generous, as a
# promoted standby of a machine kept busy took more than TTL + 10 s to accept writes.
LEASES_AGAIN = 120
ENGINE = {"DUETIME_LEASE_SECONDS": 6, "DUETIME_HEARTBEAT_SECONDS": 1, "DUETIME_POLL_SECONDS": 0.05}


def as_postgres():
    """Popen arguments that run a server program as postgres (Patroni and etcd refuse nothing, PostgreSQL refuses root)."""
    return {"user": "postgres"} if os.geteuid() == 0 else {}


class Patroni:
    """etcd and two Patroni nodes (pg1, pg2) under one temporary directory; `url` reaches whichever is primary."""

    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="duetime-ha-"))
        self.etcd_port, self.etcd_peer = free(), free()
        self.nodes = {name: {"rest": free(), "port": free()} for name in ("pg1", "pg2")}
        self.procs = {}
        hosts = ",".join(f"127.0.0.1:{node['port']}" for node in self.nodes.values())
        self.url = f"postgres://postgres@{hosts}/duetime?target_session_attrs=read-write"
        (self.base / "duetime.env").write_text(f"DATABASE_URL={self.url}\nDEBUG=1\n")
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")

    def node_config(self, name):
        node, base = self.nodes[name], self.base
        hook = str(base / "relay-role-change")  # see HookRelay
        return {
            "scope": "duetime",
            "name": name,
            "log": {"level": "INFO", "dir": str(base / f"{name}-log")},
            "restapi": {"listen": f"127.0.0.1:{node['rest']}", "connect_address": f"127.0.0.1:{node['rest']}"},
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": 1,
                    "retry_timeout": 5,
                    "master_start_timeout": 0,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {"wal_log_hints": "on", "max_wal_senders": 10, "max_replication_slots": 10},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                "pg_hba": [
                    "host replication postgres 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                    "local all all trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node['port']}",
                "connect_address": f"127.0.0.1:{node['port']}",
                "data_dir": str(base / f"{name}-data"),
                "bin_dir": str(PG_BIN),
                "pgpass": str(base / f"{name}-pgpass"),
                "authentication": {k: {"username": "postgres"} for k in ("replication", "superuser", "rewind")},
                "parameters": {"unix_socket_directories": str(base), "fsync": "off"},
                "callbacks": {"on_role_change": hook},
            },
        }

    def start(self):
        self.relay = HookRelay(self.base)
        (self.base / "etcd").mkdir()
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        etcd = [ETCD, "--name", "e1", "--data-dir", self.base / "etcd/data", "--listen-client-urls", client]
        etcd += ["--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
        self.spawn("etcd", [*etcd, "--initial-cluster", f"e1={peer}"])
        for name in self.nodes:
            (self.base / f"{name}-log").mkdir()
            (self.base / f"{name}.yml").write_text(json.dumps(self.node_config(name)))  # JSON is YAML
            if os.geteuid() == 0:
                for path in self.base.rglob("*"):
                    shutil.chown(path, "postgres")
            self.spawn(name, [PATRONI, self.base / f"{name}.yml"])
        wait_until(lambda: self.roles() == {"leader", "sync_standby"}, timeout=90, message="Patroni to bootstrap")
        with psycopg.connect(self.url.replace("/duetime?", "/postgres?"), autocommit=True) as admin:
            admin.execute("CREATE DATABASE duetime")
        migrate = [sys.executable, "manage.py", "migrate", "--skip-checks", "-v0"]
        subprocess.run(migrate, env=engine_env(DATABASE_URL=self.url), check=True, timeout=120)

    def spawn(self, name, command):
        log = open(self.base / f"{name}.out", "w")  # noqa: SIM115 (closed with the process, in remove)
        self.procs[name] = (
            subprocess.Popen(list(map(str, command)), stdout=log, stderr=subprocess.STDOUT, **as_postgres()),
            log,
        )

    def cluster(self):
        try:
            rest = next(iter(self.nodes.values()))["rest"]
            return requests.get(f"http://127.0.0.1:{rest}/cluster", timeout=2).json()["members"]
        except (requests.RequestException, ValueError, KeyError):
            rest = list(self.nodes.values())[1]["rest"]
            return requests.get(f"http://127.0.0.1:{rest}/cluster", timeout=2).json()["members"]

    def roles(self):
        try:
            return {m["role"] for m in self.cluster() if m["state"] in ("running", "streaming")}
        except (requests.RequestException, ValueError, KeyError):
            return set()

    def primary(self):
        """The leader's name, or None while there is none (or Patroni's API does not answer)."""
        try:
            leaders = [m["name"] for m in self.cluster() if m["role"] == "leader" and m["state"] == "running"]
        except (requests.RequestException, ValueError, KeyError):
            return None
        return leaders[0] if len(leaders) == 1 else None

    def kill_primary_postmaster(self):
        """SIGKILL the primary's postmaster; returns (the node killed, when)."""
        name = self.primary()
        pid = int((self.base / f"{name}-data/postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        return name, time.time()

    def query(self, sql):
        with psycopg.connect(self.url, autocommit=True) as db:
            return db.execute(sql).fetchall()

    def django(self, code):
        shell = [sys.executable, "manage.py", "shell", "-c", code]
        subprocess.run(shell, env=engine_env(DATABASE_URL=self.url), check=True, timeout=60)

    def remove(self):
        """Tear it all down at once: Patroni killed (a clean stop waits on its standby), then the postmasters, etcd."""
        if getattr(self, "relay", None):
            self.relay.stop()
        for name in ("pg1", "pg2", "etcd"):
            proc, log = self.procs.get(name, (None, None))
            if proc is not None:
                if name == "etcd":
                    self.stop_postmasters()
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                log.close()
        self.stop_postmasters()
        shutil.rmtree(self.base, ignore_errors=True)

    def stop_postmasters(self):
        for name in self.nodes:
            data = self.base / f"{name}-data"
            if (data / "postmaster.pid").exists():
                user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
                subprocess.run([*user, PG_BIN / "pg_ctl", "-D", data, "stop", "-m", "immediate"], capture_output=True)


class HookRelay:
    """Runs deploy/patroni/duetime-role-change, as this test's user, each time Patroni calls its callback.

    Patroni runs callbacks as its own user (postgres), which cannot run this
    checkout's Python when that lives in root's home (as on the CI machine):
    so the callback Patroni calls appends its arguments to a file, and this
    relay runs the real hook with them, at once, with the drill's settings.
    """

    def __init__(self, base):
        self.calls = base / "role-changes"
        self.calls.touch()
        script = base / "relay-role-change"
        script.write_text(f'#!/bin/sh\necho "$@" >> {self.calls}\n')
        script.chmod(0o755)
        self.env = {**engine_env(), "DUETIME_ENV_FILE": str(base / "duetime.env"), "DUETIME_HOME": str(ROOT)}
        self.env["DUETIME_PYTHON"] = sys.executable
        self.ran = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.relay, daemon=True)
        self.thread.start()

    def relay(self):
        seen = 0
        while not self.done.wait(0.1):
            lines = self.calls.read_text().splitlines()
            for line in lines[seen:]:
                hook = [str(ROOT / "deploy/patroni/duetime-role-change"), *line.split()]
                done = subprocess.run(hook, env=self.env, capture_output=True, text=True, timeout=60)
                self.ran.append((line, done.returncode, done.stdout + done.stderr))
            seen = len(lines)

    def stop(self):
        self.done.set()
        self.thread.join(timeout=70)


@pytest.fixture
def patroni():
    cluster = Patroni()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


LOAD = """
import datetime as dt
from django.utils import timezone
from jobs.models import JobDefinition, Tenant, shard_for
from runs import enqueue

acme, _ = Tenant.objects.get_or_create(name="acme", defaults={{"task_module_prefixes": "tests.handlers"}})
job, _ = JobDefinition.objects.get_or_create(tenant=acme, name="ha", defaults=dict(schedule_kind="none",
    target_kind="python", target_ref="tests.handlers.record", overlap_policy="allow", retry_base_seconds=0,
    retry_max_seconds=0, shard=shard_for("acme", "ha"), payload={{"report": {report!r}, "seconds": 0.2}}))
now = timezone.now()
for i in range({count}):
    enqueue.enqueue(job, run_at=now + dt.timedelta(seconds={start} + i * {spacing}), idempotency_key="{batch}-%d" % i)
"""


def leases_after(moves, instant):
    """When the first lease after `instant` was logged (the move log's `leased` lines), or None."""
    for line in Path(moves).read_text().splitlines() if Path(moves).exists() else []:
        if line.startswith("{") and '"event":"leased"' in line:
            at = dt.datetime.fromisoformat(json.loads(line)["ts"].replace("Z", "+00:00")).timestamp()
            if at > instant:
                return at
    return None


def test_two_failovers_under_load_lose_nothing_run_nothing_early_and_fence_every_reexecution(patroni, tmp_path):
    report, moves = tmp_path / "executions.jsonl", tmp_path / "moves.jsonl"
    env = {**ENGINE, "DATABASE_URL": patroni.url, "DUETIME_MOVE_LOG": str(moves)}
    gaps = []
    with Processes() as fleet:
        engine = [
            fleet.start("worker-1", "run_worker", "--worker-id", "w-1", "--concurrency", "4", **env),
            fleet.start("worker-2", "run_worker", "--worker-id", "w-2", "--concurrency", "4", **env),
            fleet.start("scheduler", "run_scheduler", "--node", "s-1", **env),
        ]
        # A steady load: 3 runs a second for 35 s.
        patroni.django(LOAD.format(report=str(report), count=105, start=1, spacing=1 / 3, batch="steady"))
        for failover in (1, 2):
            wait_until(lambda: patroni.roles() == {"leader", "sync_standby"}, timeout=120, message="a sync standby")
            wait_until(lambda: leases_after(moves, time.time() - 1), message="leases on the primary")
            batch = f"burst-{failover}"  # and a drain: 40 runs due at once
            patroni.django(LOAD.format(report=str(report), count=40, start=0, spacing=0, batch=batch))
            killed, at = patroni.kill_primary_postmaster()
            wait_until(lambda k=killed: patroni.primary() not in (None, k), timeout=TTL + 10, message="a promotion")
            first = wait_until(lambda a=at: leases_after(moves, a), timeout=LEASES_AGAIN, message="leases again")
            gaps.append(first - at)
            print(
                f"failover {failover}: {killed} killed, {patroni.primary()} promoted, first lease {first - at:.2f} s later"
            )
        wait_until(
            lambda: patroni.query("SELECT count(*) FROM runs_run WHERE state <> 'succeeded'") == [(0,)],
            timeout=90,
            message="every run to succeed",
        )
        assert [proc.poll() for proc in engine] == [None, None, None], "an engine process died"
    print(f"failover gaps (kill to the first lease): {[round(g, 2) for g in gaps]} s")

    # From the last primary's rows: nothing lost, one accepted completion each, none early.
    assert patroni.query("SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM runs_run") == [(185, 185)]
    assert patroni.query(
        "SELECT count(*) FROM (SELECT run_id FROM runs_attempt WHERE outcome = 'succeeded'"
        " GROUP BY run_id HAVING count(*) <> 1) t"
    ) == [(0,)]
    assert patroni.query("SELECT count(*) FROM runs_attempt WHERE started_at < available_at") == [(0,)]
    # From the executions (the handler's file): none early; re-executions same key, higher token.
    executions = [json.loads(line) for line in report.read_text().splitlines()]
    assert [e for e in executions if e["started"] < e["due"]] == []
    by_key = {}
    for e in sorted(executions, key=lambda e: e["started"]):
        by_key.setdefault(e["key"], []).append(e["token"])
    assert len(by_key) == 185
    assert {key: tokens for key, tokens in by_key.items() if tokens != sorted(set(tokens))} == {}
    reexecuted = sum(len(tokens) - 1 for tokens in by_key.values())
    print(f"re-executed: {reexecuted} of {len(executions)} executions")
    # The role-change hook ran on each new primary: its after_restore started the last generation.
    ((number, reason),) = patroni.query("SELECT number, reason FROM runs_generation")
    print(f"restore generation {number}: {reason}")
    print("role changes:", [(line, code, out.strip().splitlines()[-1:]) for line, code, out in patroni.relay.ran])
    assert number >= 2 and reason.startswith("Patroni made")
