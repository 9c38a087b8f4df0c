"""The OpenAPI schema is valid, warning-free, and the live API keeps to it under generated requests."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from jobs.models import ApiToken
from tests.fixtures.api import on_demand

HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
WORKER_PATHS = r"/v1/lease|/heartbeat|/complete"
# positive_data_acceptance is left out: the schema cannot express every rule of a
# definition (a cron job needs a valid cron expression, a python target a dotted
# path), so schema-valid bodies are rightly refused with 400 invalid-schedule.
CHECKS = [
    "--checks", "all",
    "--exclude-checks", "positive_data_acceptance",
    "--max-examples", "5",
    "--seed", "20261130",
    "--workers", "2",
    "--request-timeout", "15",
    "--suppress-health-check", "all",
]  # fmt: skip


def test_it_generates_a_schema_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))

    text = out.read_text()
    assert "/v1/jobs/{name}:pause:" in text
    assert "application/problem+json" in text


def test_it_serves_the_schema_and_a_docs_page(api):
    schema = api.get("/v1/schema?format=json")
    docs = api.get("/v1/docs")

    assert schema.status_code == 200
    assert schema.json()["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert docs.status_code == 200
    # Swagger UI's start-up script is a file of its own (no inline script under the CSP); it names the schema.
    assert '<script src="/v1/docs?script=">' in docs.text
    assert "/v1/schema" in api.get("/v1/docs?script=").text


@pytest.fixture
def fixtures_for_schemathesis(api, acme, acme_team, make_job, make_run, make_dead_letter, wall_clock):
    """Real objects for the generated requests to find: a job, leased runs, dead letters.

    The leases last an hour by the real clock, which the live server reads.
    """
    api.put("/v1/jobs/billing.export-invoices", token=acme_team, json=on_demand(queue="default"))
    job = make_job(acme, "billing.nightly", cron_expr="0 2 * * *")
    runs = [make_run(job, state="leased", lease_expires_at=wall_clock.ahead(hours=1)) for _ in range(3)]
    letters = [make_dead_letter(job) for _ in range(3)]
    return {"run_id": [r.pk for r in runs], "letter_id": [d.pk for d in letters]}


def schemathesis(live_server, token, scope, ids, tmp_path):
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "DUETIME_ST_IDS": json.dumps(ids), "NO_COLOR": "1"}
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "run", f"{live_server.url}/v1/schema?format=json",
        "--header", f"Authorization: Bearer {token}", *scope, *CHECKS,
    ]  # fmt: skip
    # Generous: a busy machine runs it several times slower; the "no 5xx" fuzzing is test_fuzz.py's, in process.
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the schema is the same on both databases: checked once, on PostgreSQL"
)
def test_it_keeps_to_its_schema_under_generated_requests(
    live_server, acme, acme_team, fixtures_for_schemathesis, tmp_path, settings
):
    """No 5xx, every status, content type, header and body as documented; team and worker tokens."""
    # The generated calls with no or a wrong token would lock 127.0.0.1 out, and then every
    # call answers 429 and reaches no view: tests/scheduler_project/api/test_throttles.py covers that.
    settings.DUETIME_AUTH_FAILURES_PER_MINUTE = 0
    _, worker = ApiToken.issue(acme, "worker", queues=["default", "reports"])

    # Stateful testing is left out: the schema declares no links between operations. The team endpoints'
    # coverage phase (every boundary of every field: 80 % of this test's time) is left to test_fuzz.py, which
    # sends positive and negative cases of every operation in process.
    team_scope = ["--exclude-path-regex", WORKER_PATHS, "--phases", "examples,fuzzing"]
    worker_scope = ["--include-path-regex", WORKER_PATHS, "--phases", "coverage,fuzzing"]

    team_run = schemathesis(live_server, acme_team, team_scope, fixtures_for_schemathesis, tmp_path)
    worker_run = schemathesis(live_server, worker, worker_scope, fixtures_for_schemathesis, tmp_path)

    assert team_run.returncode == 0, team_run.stdout[-6000:] + team_run.stderr[-2000:]
    assert worker_run.returncode == 0, worker_run.stdout[-6000:] + worker_run.stderr[-2000:]
    assert "passed" in team_run.stdout and "passed" in worker_run.stdout
