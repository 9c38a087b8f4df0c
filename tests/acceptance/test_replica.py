"""Reads on a real streaming replica: a private primary, a hot standby made from it by
`pg_basebackup -R`, and the web server (daphne) between them with DATABASE_REPLICA_URL.

Replay on the standby is paused, then a job is written on the primary: the
replica cannot have it. A reader that never wrote lists jobs without it (its
read went to the replica); the writer, and anyone right after a write of their
own, lists it (their reads went to the primary). Resuming replay, the reader
sees it too. Neither cluster is the shared server on 5432.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
import requests
from django.db import connection

from tests.acceptance.test_faults import PG_BIN, PrivatePostgres, as_postgres, free_port
from tests.conftest import engine_env
from tests.fixtures.api import on_demand
from tests.spawned import output_of, spawn, stop
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="streaming replication is PostgreSQL's"),
]

CHANGELIST = "/admin/jobs/jobdefinition/"


class StreamingReplica:
    """A hot standby of `primary` (pg_basebackup -R: it streams from the primary), on a free port."""

    def __init__(self, primary):
        self.primary = primary
        self.base = Path(tempfile.mkdtemp(prefix="duetime-replica-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/duetime"
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")

    def start(self):
        source = ["-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres"]
        # A fast checkpoint: the default spread one would make the copy wait minutes for it.
        as_postgres(PG_BIN / "pg_basebackup", "-D", self.data, *source, "-R", "-X", "stream", "-c", "fast", "-N")
        options = f"-p {self.port} -k {self.base} -c fsync=off"
        as_postgres(PG_BIN / "pg_ctl", "-D", self.data, "start", "-w", "-l", self.base / "log", "-o", options)

    def query(self, sql):
        with psycopg.connect(self.url, autocommit=True) as db:
            return db.execute(sql).fetchall()

    def pause_replay(self):
        self.query("SELECT pg_wal_replay_pause()")
        wait_until(lambda: self.query("SELECT pg_get_wal_replay_pause_state()") == [("paused",)], message="a pause")

    def resume_replay(self):
        self.query("SELECT pg_wal_replay_resume()")

    def remove(self):
        as_postgres(PG_BIN / "pg_ctl", "-D", self.data, "stop", "-m", "immediate", check=False)
        shutil.rmtree(self.base, ignore_errors=True)


SETUP = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from jobs.models import ApiToken, Tenant

acme = Tenant.objects.create(name="acme")
alice = get_user_model().objects.create_user("alice", password="alice-pass-123", is_staff=True)
acme.members.add(alice, through_defaults={"role": "owner"})
portal = Client()
portal.force_login(alice)
_, writer = ApiToken.issue(acme, "team", name="writer", role="owner")
_, reader = ApiToken.issue(acme, "team", name="reader", role="viewer")
print(json.dumps({"session": portal.cookies["sessionid"].value, "writer": writer, "reader": reader}))
"""

# A management command with the replica configured reads the primary (the job written while replay is paused).
COMMAND_READS = "from jobs.models import JobDefinition; print(JobDefinition.objects.filter(name='weekly').count())"


def shell(code, **env):
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        env=engine_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


class Site:
    """Duetime's web server on the primary and its replica: the ASGI server of `run_all`, as deployed."""

    def __init__(self, primary, replica):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {
            "DATABASE_URL": primary.url,
            "DATABASE_REPLICA_URL": replica.url,
            # Plain HTTP here: cookies without the Secure flag, or the client would never send them back.
            "SESSION_COOKIE_SECURE": 0,
            "CSRF_COOKIE_SECURE": 0,
            # Longer than this test: a pin must not expire between a write and the read that follows it.
            "DUETIME_REPLICA_PIN_SECONDS": 600,
        }
        command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
        self.server = spawn([*command, "scheduler_project.asgi:application"], env=engine_env(**self.env))
        wait_until(self.up, message="the web server")

    def up(self):
        assert self.server.poll() is None, output_of(self.server)
        try:
            return requests.get(self.base_url + "/admin/login/", timeout=5).status_code == 200
        except requests.ConnectionError:
            return False

    def client(self, token=None, session=None):
        client = requests.Session()
        if token:
            client.headers["Authorization"] = f"Bearer {token}"
        if session:
            client.cookies.set("sessionid", session)
        return client

    def stop(self):
        code, output = stop(self.server)
        print(output[-3000:])  # shown if the test failed


@pytest.fixture(scope="module")
def replicated():
    """(primary, replica, site, secrets): a primary with acme, Alice and two team tokens, its replica, the web."""
    primary = PrivatePostgres()
    replica = StreamingReplica(primary)
    site = None
    try:
        primary.start()
        secrets = json.loads(shell(SETUP, DATABASE_URL=primary.url))
        replica.start()
        site = Site(primary, replica)
        yield primary, replica, site, secrets
    finally:
        if site is not None:
            site.stop()
        replica.remove()
        primary.remove()


def job_names(response):
    assert response.status_code == 200, response.text
    return {job["name"] for job in response.json()["results"]}


def test_reads_go_to_the_replica_and_own_writes_to_the_primary(replicated):
    primary, replica, site, secrets = replicated
    writer, reader = site.client(token=secrets["writer"]), site.client(token=secrets["reader"])
    alice = site.client(session=secrets["session"])
    url = site.base_url
    assert writer.put(f"{url}/v1/jobs/nightly", json=on_demand()).status_code == 201
    wait_until(lambda: replica.query("SELECT name FROM jobs_jobdefinition") == [("nightly",)], message="replication")
    # The reader's first call stamps its token's last use (a write, at most once a minute): that request
    # reads the primary after it. Its next calls only read.
    assert job_names(reader.get(f"{url}/v1/jobs")) == {"nightly"}

    replica.pause_replay()
    try:
        assert writer.put(f"{url}/v1/jobs/weekly", json=on_demand()).status_code == 201
        assert primary.query("SELECT count(*) FROM jobs_jobdefinition") == [(2,)]

        assert job_names(writer.get(f"{url}/v1/jobs")) == {"nightly", "weekly"}, "its own write, from the primary"
        assert job_names(reader.get(f"{url}/v1/jobs")) == {"nightly"}, "the replica, where replay is paused"
        page = alice.get(url + CHANGELIST)
        assert page.status_code == 200 and "nightly" in page.text
        assert "weekly" not in page.text, "the portal list came from the replica"
        assert shell(COMMAND_READS, DATABASE_URL=primary.url, DATABASE_REPLICA_URL=replica.url) == "1"

        # Alice pauses nightly in the portal: the list after her action reads the primary.
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        nightly = primary.query("SELECT id FROM jobs_jobdefinition WHERE name = 'nightly'")[0][0]
        action = {"action": "pause_jobs", "_selected_action": [nightly], "post": "yes", "note": "maintenance"}
        done = alice.post(url + CHANGELIST, data={**action, "csrfmiddlewaretoken": csrf}, allow_redirects=False)
        assert done.status_code == 302, done.text
        assert "duetime_primary" in done.cookies
        after = alice.get(url + CHANGELIST)
        assert "weekly" in after.text and "Paused 1 job(s)." in after.text
        assert primary.query("SELECT status FROM jobs_jobdefinition WHERE id = %s", (nightly,)) == [("paused",)]
    finally:
        replica.resume_replay()

    wait_until(lambda: job_names(reader.get(f"{url}/v1/jobs")) == {"nightly", "weekly"}, message="the replica")
