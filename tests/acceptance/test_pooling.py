"""The engine behind PgBouncer in transaction mode: the engine acceptance tests again, every process through it.

A PgBouncer of the test's own (pool_mode = transaction, a pool smaller than
the clients, so server connections change hands between transactions) runs
in front of the test database, with the pgbouncer.ini lines docs/operations.md
gives. Every engine process the imported tests start connects through it with
DUETIME_DATABASE_POOLING=transaction: the SIGTERM drain, the fencing refusal
of a paused worker and the reaper's retry of a killed one must hold as they
do on a direct connection. And no session state of Duetime's is left on a
server connection for the next client.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests import conftest
from tests.acceptance.test_faults import free_port

# The engine acceptance tests, collected here again: each runs with every process behind the pooler.
from tests.acceptance.test_processes import (  # noqa: F401
    test_a_processes_worker_drains_on_sigterm_and_releases_what_still_runs,
    test_it_fences_off_a_paused_worker_and_lets_the_rerun_win,
    test_it_retries_a_run_whose_worker_was_killed_and_finishes_it,
)
from tests.conftest import engine_env

PGBOUNCER = shutil.which("pgbouncer") or (os.path.exists("/usr/sbin/pgbouncer") and "/usr/sbin/pgbouncer") or None
pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PgBouncer pools PostgreSQL connections"),
    pytest.mark.skipif(PGBOUNCER is None, reason="PgBouncer is not installed (Debian: apt-get install pgbouncer)"),
]

# The lines docs/operations.md ("PgBouncer") gives, with this test's paths and ports.
INI = """\
[databases]
* = host={host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {base}/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = {pool_size}
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {base}/pgbouncer.log
pidfile = {base}/pgbouncer.pid
"""


class PgBouncer:
    """A PgBouncer in transaction mode in front of `server` (host, port), on a free port, under a temporary directory."""

    def __init__(self, host, server_port, pool_size=4):
        self.base = Path(tempfile.mkdtemp(prefix="duetime-pgbouncer-"))
        self.port = free_port()
        (self.base / "userlist.txt").write_text('"postgres" ""\n')
        self.ini = self.base / "pgbouncer.ini"
        self.ini.write_text(
            INI.format(host=host, server_port=server_port, port=self.port, base=self.base, pool_size=pool_size)
        )
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            for path in (self.base, *self.base.iterdir()):
                shutil.chown(path, "postgres")

    def url(self, database):
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self):
        user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*user, PGBOUNCER, "-d", str(self.ini)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"pgbouncer failed: {done.stdout}{done.stderr}"

    def stop(self):
        pidfile = self.base / "pgbouncer.pid"
        if pidfile.exists():
            subprocess.run(["kill", pidfile.read_text().strip()], check=False)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(autouse=True)
def through_pgbouncer(monkeypatch):
    """Every engine process the test starts connects through a PgBouncer in transaction mode."""
    settings = connection.settings_dict
    bouncer = PgBouncer(settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432)
    try:
        bouncer.start()
        url = bouncer.url(settings["NAME"])
        monkeypatch.setitem(conftest.ENGINE_ENV, "DATABASE_URL", url)
        monkeypatch.setitem(conftest.ENGINE_ENV, "DUETIME_DATABASE_POOLING", "transaction")
        yield bouncer
    finally:
        bouncer.stop()


def test_a_pooled_process_leaves_no_session_state_on_the_server_connection(acme, make_job):
    settings = connection.settings_dict
    host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
    direct = f"postgres://postgres@{host}:{port}/{settings['NAME']}"
    bouncer = PgBouncer(host, port, pool_size=1)  # one server connection
    try:
        bouncer.start()
        make_job(acme, "billing.export")
        code = "from runs import claims; [claims.claim(['default'], 1, 'w') for _ in range(10)]"
        env = engine_env(DATABASE_URL=bouncer.url(settings["NAME"]))
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        # The pool's one server connection, as the next client gets it: as a fresh session has it, nothing prepared.
        with psycopg.connect(bouncer.url(settings["NAME"]), autocommit=True, prepare_threshold=None) as pooled:
            seen = pooled.execute(STATE).fetchone()
        with psycopg.connect(direct, autocommit=True) as fresh:
            defaults = fresh.execute(STATE).fetchone()
    finally:
        bouncer.stop()
    assert seen == defaults and seen[2] == 0


STATE = (
    "SELECT current_setting('plan_cache_mode'), current_setting('jit'), (SELECT count(*) FROM pg_prepared_statements)"
)
