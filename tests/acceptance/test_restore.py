"""A dump restored under running workers: no fencing token is issued twice, and leases from before are stale.

The test database is dumped (pg_dump) with two runs leased; two more are
leased after the dump (tokens the restore will lose). The dump is restored
into a new database on the same server, and a Django process on it (what a
worker restarted on the restored database is) leases the runs the restore
put back: their tokens must exceed every token issued before the restore,
the one the restore lost included, and a worker still holding a token from
before (lost or restored) is refused. Before the restore generation, the
restored sequence gave the lost tokens out again, to the same runs.
"""

import json
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from jobs.models import JobDefinition
from runs import claims, enqueue
from tests.conftest import engine_env

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_dump and pg_restore are PostgreSQL's"),
]

PG_BIN = "/usr/lib/postgresql/15/bin"

# On the restored database: lease what is claimable, then try the old tokens as their holders would.
AFTER = """
import json
from runs import claims, transitions
from runs.transitions import StaleLease
held = {held}
leases = claims.claim(["default"], 10, "w-after-restore")
refused = []
for run_id, token in held:
    try:
        transitions.heartbeat(run_id, token, 30)
    except StaleLease:
        refused.append(token)
print(json.dumps({{"tokens": {{l.run_id: l.fencing_token for l in leases}}, "refused": refused}}))
"""


def server(name):
    s = connection.settings_dict
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{name}"


@pytest.fixture
def restored():
    name = f"{connection.settings_dict['NAME']}_restored"
    with psycopg.connect(server("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(server("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_no_token_is_issued_twice_across_a_dump_and_restore(acme, make_job, restored, tmp_path):
    job = make_job(acme, "billing.export", overlap_policy="allow")
    for _ in range(4):
        enqueue.enqueue(job)  # due now
    before_dump = claims.claim(["default"], 2, "w-before-dump")
    dump = tmp_path / "duetime.dump"
    subprocess.run([f"{PG_BIN}/pg_dump", "-Fc", "-f", dump, server(connection.settings_dict["NAME"])], check=True)
    lost = claims.claim(["default"], 2, "w-after-dump")  # what the restore will not know of
    subprocess.run([f"{PG_BIN}/pg_restore", "--no-owner", "-d", server(restored), dump], check=True, timeout=120)

    issued_before = [lease.fencing_token for lease in before_dump + lost]
    held = [(lease.run_id, lease.fencing_token) for lease in before_dump + lost]
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", AFTER.format(held=held)],
        env=engine_env(DATABASE_URL=server(restored)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    after = json.loads(done.stdout.strip().splitlines()[-1])
    reissued = {int(run): token for run, token in after["tokens"].items()}
    # The restore put back the runs leased after the dump; they run again with higher tokens.
    assert sorted(reissued) == sorted(lease.run_id for lease in lost)
    assert min(reissued.values()) > max(issued_before), (
        f"tokens {sorted(reissued.values())} issued after the restore, {issued_before} before"
    )
    assert sorted(after["refused"]) == sorted(issued_before)  # nobody from before the restore is current
    assert JobDefinition.objects.filter(pk=job.pk).exists()
