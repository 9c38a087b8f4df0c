"""A worker_id or an Idempotency-Key that carries a credential is refused, and never reaches a log or an answer.

Both are logged on every move (runs.move_log) and shown in the portal and the
API. Every log record of the test is captured, unfiltered, from the root logger
and the move log (which does not propagate), so a credential that reached any
logger would show here.
"""

import io
import logging

import pytest
from django.core.management import CommandError, call_command

from runs.models import Attempt, Run
from tests.fixtures.api import assert_problem, on_demand

CREDENTIALS = [
    "ghp_" + "a1B2" * 9,
    "w-AKIAIOSFODNN7EXAMPLE",
    "password=hunter2",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
]


@pytest.fixture
def every_log_line():
    """Every record logged during the test, formatted, with no redaction of its own."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s %(lines)s", defaults={"lines": ""}))
    loggers = [logging.getLogger(), logging.getLogger("duetime.moves")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield stream
    for logger, level in zip(loggers, levels):
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def report_job(api, acme_team):
    assert api.put("/v1/jobs/reports.render", token=acme_team, json=on_demand()).status_code == 201


@pytest.mark.parametrize("credential", CREDENTIALS)
def test_a_worker_id_that_carries_a_credential_is_refused(
    api, acme_team, acme_worker, report_job, every_log_line, credential
):
    api.post("/v1/jobs/reports.render/runs", token=acme_team, json={})

    response = api.post("/v1/lease", token=acme_worker, json={"queues": ["reports"], "worker_id": credential})

    problem = assert_problem(response, 400, "validation-error")
    assert problem["errors"][0]["field"] == "worker_id" and "seems to carry" in problem["errors"][0]["detail"]
    assert credential not in response.text
    assert Run.objects.get().state == "scheduled"  # nothing was leased under that name
    assert not Run.objects.filter(worker_id=credential).exists() and not Attempt.objects.exists()
    assert credential not in every_log_line.getvalue()


@pytest.mark.parametrize("credential", CREDENTIALS)
def test_an_idempotency_key_that_carries_a_credential_is_refused(
    api, acme_team, report_job, every_log_line, credential
):
    for path in ("/v1/jobs/reports.render/runs", "/v1/jobs/reports.render:trigger"):
        response = api.post(path, token=acme_team, json={}, headers={"Idempotency-Key": credential})

        problem = assert_problem(response, 400, "validation-error")
        assert problem["errors"][0]["field"] == "Idempotency-Key"
        assert credential not in response.text
    assert not Run.objects.exists()
    assert credential not in every_log_line.getvalue()


@pytest.mark.parametrize("key", ["two words", "x" * 201, 'quote"d', "tab\tkey"])
def test_an_idempotency_key_outside_the_charset_is_refused(api, acme_team, report_job, key):
    response = api.post("/v1/jobs/reports.render/runs", token=acme_team, json={}, headers={"Idempotency-Key": key})

    assert "must be 1-200 characters" in assert_problem(response, 400, "validation-error")["detail"]


def test_ordinary_identifiers_are_logged_and_shown_as_they_are(api, acme_team, acme_worker, report_job, every_log_line):
    headers = {"Idempotency-Key": "invoice-42/attempt-1"}
    run = api.post("/v1/jobs/reports.render/runs", token=acme_team, json={}, headers=headers).json()
    (lease,) = api.post("/v1/lease", token=acme_worker, json={"queues": ["reports"], "worker_id": "w-17:4242"}).json()[
        "leases"
    ]

    assert lease["idempotency_key"] == run["idempotency_key"] == "invoice-42/attempt-1"
    assert Run.objects.get().worker_id == "w-17:4242"
    logged = every_log_line.getvalue()
    assert '"worker":"w-17:4242"' in logged and '"idempotency_key":"invoice-42/attempt-1"' in logged


def test_run_worker_refuses_a_worker_id_that_carries_a_credential(db):
    credential = "ghp_" + "a1B2" * 9
    with pytest.raises(CommandError) as refused:
        call_command("run_worker", "--once", "--worker-id", credential)

    assert "--worker-id seems to carry a GitHub token" in str(refused.value)
    assert credential not in str(refused.value)
