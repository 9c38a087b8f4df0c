"""The pgBackRest drill: a full backup, more work, a point-in-time restore to an instant between, the engine resumes.

Follows docs/operations.md, "Backups and restore", step by step, on a private
cluster (never the shared server) whose WAL pgBackRest archives. A worker and
a scheduler run throughout, the restore included (they are fenced, not
stopped). Runs fall due all along; at an instant T between the backup and
the disaster the database is restored to, runs have finished that the restore
takes back. Judged from what the restore cannot rewind, the move log and the
executions the handler wrote to a file:
- every fencing token leased after the restore exceeds every token leased
  before it (on today's code without generations, the restored sequence
  issued the lost tokens again);
- every run that finished after T runs again after the restore, with its
  idempotency key and a higher token;
- no execution started before its run was due;
- the restored database ends with every run succeeded once.
"""

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.acceptance.test_faults import PG_BIN, PrivatePostgres, as_postgres
from tests.acceptance.test_processes import Processes
from tests.conftest import engine_env
from tests.waiting import wait_until

PGBACKREST = shutil.which("pgbackrest")
pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="pgBackRest backs up PostgreSQL"),
    pytest.mark.skipif(PGBACKREST is None, reason="pgBackRest is not installed (Debian: apt-get install pgbackrest)"),
]

STANZA = "duetime"
FAST = {"DUETIME_LEASE_SECONDS": 4, "DUETIME_HEARTBEAT_SECONDS": 1}

WORK = """
import datetime as dt
from django.utils import timezone
from jobs.models import JobDefinition, Tenant, shard_for
from runs import enqueue

acme, _ = Tenant.objects.get_or_create(name="acme", defaults={{"task_module_prefixes": "tests.handlers"}})
job, _ = JobDefinition.objects.get_or_create(tenant=acme, name="drill", defaults=dict(schedule_kind="none",
    target_kind="python", target_ref="tests.handlers.record", overlap_policy="allow", retry_base_seconds=0,
    retry_max_seconds=0, shard=shard_for("acme", "drill"), payload={{"report": {report!r}, "seconds": 0.2}}))
now = timezone.now()
for i in range({count}):
    enqueue.enqueue(job, run_at=now + dt.timedelta(seconds=1 + i * {spacing}), idempotency_key="{batch}-%d" % i)
"""


class BackedUpPostgres(PrivatePostgres):
    """A private cluster whose WAL pgBackRest archives, and its repository, under the same temporary directory."""

    def __init__(self):
        super().__init__()
        self.config = self.base / "pgbackrest.conf"
        for part in ("repo", "pgbackrest-log", "lock"):
            (self.base / part).mkdir()
        self.config.write_text(
            f"[global]\nrepo1-path={self.base / 'repo'}\nlog-path={self.base / 'pgbackrest-log'}\n"
            f"lock-path={self.base / 'lock'}\nstart-fast=y\nlog-level-console=warn\n\n"
            f"[{STANZA}]\npg1-path={self.data}\npg1-port={self.port}\npg1-socket-path={self.base}\npg1-user=postgres\n"
        )
        if os.geteuid() == 0:
            for path in self.base.rglob("*"):
                shutil.chown(path, "postgres")

    def start(self):
        archive = f"{PGBACKREST} --config={self.config} --stanza={STANZA} archive-push %p"
        self.options = f"-c archive_mode=on -c wal_level=replica -c archive_command='{archive}'"
        as_postgres(PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync")
        self.pg_ctl("start", "-w", "-l", self.base / "log", "-o", f"-p {self.port} -k {self.base} {self.options}")
        with psycopg.connect(f"{self.server}/postgres", autocommit=True) as admin:
            admin.execute("CREATE DATABASE duetime")
        migrate = [sys.executable, "manage.py", "migrate", "--skip-checks", "-v0"]
        subprocess.run(migrate, env=engine_env(DATABASE_URL=self.url), check=True, timeout=120)
        self.pgbackrest("stanza-create")

    def pgbackrest(self, *command):
        return as_postgres(PGBACKREST, f"--config={self.config}", f"--stanza={STANZA}", *command)

    def restore_to(self, instant):
        """The runbook's restore: stop the server, restore the last backup, replay WAL to `instant`, promote."""
        self.pg_ctl("stop", "-m", "immediate")
        target = instant.isoformat(sep=" ")
        self.pgbackrest("--delta", "--type=time", f"--target={target}", "--target-action=promote", "restore")
        self.pg_ctl(
            "start", "-w", "-t", "120", "-l", self.base / "log", "-o", f"-p {self.port} -k {self.base} {self.options}"
        )
        wait_until(lambda: self.query("SELECT pg_is_in_recovery()") == [(False,)], message="the promotion")


@pytest.fixture
def backed_up():
    cluster = BackedUpPostgres()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


def move_log(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]


def stamp(line):
    return dt.datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp()


def test_a_point_in_time_restore_reissues_no_token_and_runs_every_rewound_run_again(backed_up, tmp_path):
    db, report, moves = backed_up, tmp_path / "executions.jsonl", tmp_path / "moves.jsonl"
    env = {**FAST, "DATABASE_URL": db.url, "DUETIME_MOVE_LOG": str(moves)}
    with Processes() as fleet:
        worker = fleet.start("worker", "run_worker", "--worker-id", "w-drill", "--concurrency", "4", **env)
        scheduler = fleet.start("scheduler", "run_scheduler", "--node", "s-drill", **env)
        db.django(WORK.format(report=str(report), count=40, spacing=0.2, batch="a"))
        db.pgbackrest("--type=full", "backup")  # 1. a full backup while runs flow
        db.django(WORK.format(report=str(report), count=40, spacing=0.2, batch="b"))  # 2. more work
        wait_until(lambda: succeeded(db) >= 30, message="runs to finish before the restore point")
        (target,) = db.query("SELECT clock_timestamp()")[0]  # 3. the instant to restore to
        finished_at_target = succeeded(db)
        wait_until(lambda: succeeded(db) >= finished_at_target + 10, message="runs to finish after it")
        db.pgbackrest("check")  # the WAL past the target is archived (the runbook's check before a restore)
        restore_began = time.time()
        db.restore_to(target)  # 4. the disaster, and the restore to the instant between
        restore_ended = time.time()
        after = subprocess.run(  # 5. the runbook's after_restore
            [sys.executable, "manage.py", "after_restore", "--reason", f"pgBackRest restore to {target}"],
            env=engine_env(**env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert after.returncode == 0, after.stderr
        wait_until(
            lambda: db.query("SELECT count(*) FROM runs_run WHERE state <> 'succeeded'") == [(0,)],
            timeout=60,
            message="the engine to finish every run after the restore",
        )
        assert worker.poll() is None and scheduler.poll() is None, "an engine process died"
    print(after.stdout, f"restored to {target}: {finished_at_target} runs had succeeded then")

    lines = move_log(moves)
    before = [line for line in lines if stamp(line) < restore_began]
    later = [line for line in lines if stamp(line) > restore_ended]
    tokens_before = [line["fencing_token"] for line in before if line["event"] == "leased"]
    tokens_after = [line["fencing_token"] for line in later if line["event"] == "leased"]
    assert tokens_before and tokens_after
    assert min(tokens_after) > max(tokens_before), "a token issued after the restore was issued before it"

    # Finished after the target (with a margin for the log line's lag behind the commit): rewound.
    margin = 0.25
    rewound = {
        line["idempotency_key"]: line["fencing_token"]
        for line in before
        if line["event"] == "completed" and line["to"] == "succeeded" and stamp(line) > target.timestamp() + margin
    }
    assert rewound, "no run finished between the restore point and the restore"
    again = {line["idempotency_key"]: line["fencing_token"] for line in later if line["event"] == "completed"}
    assert {key: again.get(key, 0) > token for key, token in rewound.items()} == dict.fromkeys(rewound, True)

    executions = [json.loads(line) for line in report.read_text().splitlines()]
    assert [e for e in executions if e["started"] < e["due"]] == [], "an execution started before its run was due"
    assert {e["key"] for e in executions} >= set(rewound)
    assert db.query("SELECT count(*), count(DISTINCT idempotency_key) FROM runs_run") == [(80, 80)]
    assert db.query(
        "SELECT count(*) FROM (SELECT run_id FROM runs_attempt WHERE outcome = 'succeeded'"
        " GROUP BY run_id HAVING count(*) > 1) twice"
    ) == [(0,)]


def succeeded(db):
    return db.query("SELECT count(*) FROM runs_run WHERE state = 'succeeded'")[0][0]
