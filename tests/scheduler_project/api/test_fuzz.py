"""No input gives a 500: every /v1 operation under generated requests (schemathesis and Hypothesis).

The operations are read from /v1/schema. For each one Hypothesis generates
requests that keep to the schema and requests that break it (schemathesis's
positive and negative modes), EXAMPLES of each, with a fixed seed; they are sent
in process through Django's test client with Acme's team token (team paths) or
its worker token (lease, heartbeat, complete), against real objects half of the
time (a job, leased runs, dead letters). Any 5xx fails the test with the request
as a curl command. No server, no subprocess: the run takes well under a minute.

tests/scheduler_project/api/test_schema.py runs the schemathesis CLI against a
live server for conformance (status codes, content types, bodies as documented).
"""

import itertools
import json

import hypothesis
import pytest
import requests
import schemathesis
from django.test import Client
from hypothesis import HealthCheck

from tests.fixtures.api import issue

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = 8  # per operation and mode: about 700 requests in all
WORKER_PATHS = ("/v1/lease", "/heartbeat", "/complete")
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)


@pytest.fixture
def schema():
    response = Client().get("/v1/schema?format=json")
    return schemathesis.openapi.from_dict(json.loads(response.content))


@pytest.fixture
def real_ids(acme, make_job, make_run, make_dead_letter, wall_clock):
    """Objects for generated paths to find: leased runs (an hour's lease) and dead letters of a cron job."""
    job = make_job(acme, "billing.nightly", cron_expr="0 2 * * *")
    runs = [make_run(job, state="leased", lease_expires_at=wall_clock.ahead(hours=1)) for _ in range(3)]
    letters = [make_dead_letter(job) for _ in range(3)]
    return {
        "run_id": itertools.cycle([r.pk for r in runs]),
        "letter_id": itertools.cycle([d.pk for d in letters]),
        "name": itertools.cycle([job.name]),
    }


@pytest.fixture
def unthrottled(settings):
    # Generated calls would otherwise meet the per-token rate (429 reaches no view) or lock the address out.
    settings.DUETIME_AUTH_FAILURES_PER_MINUTE = 0
    settings.DUETIME_TOKEN_REQUESTS_PER_MINUTE = 10**9


def operations(schema, worker):
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path.startswith("/v1/") and operation.path.endswith(WORKER_PATHS) == worker:
            yield operation


def send(client, case, token, real_ids, turn):
    """The generated request through Django's test client, its URL encoded as requests would send it.

    A path id is a real one every other turn; the token replaces any the generator made up.
    """
    for name, ids in real_ids.items():
        if case.path_parameters and name in case.path_parameters and turn % 2 == 0:
            case.path_parameters[name] = next(ids)
    kwargs = case.as_transport_kwargs(base_url="http://testserver")
    url = requests.Request(case.method, kwargs["url"], params=kwargs.get("params")).prepare().url
    headers = {k: v for k, v in kwargs["headers"].items() if k.lower() not in ("content-type", "authorization")}
    headers["Authorization"] = f"Bearer {token}"
    if "json" in kwargs:
        body, content_type = json.dumps(kwargs["json"]), "application/json"
    else:
        body, content_type = kwargs.get("data") or "", kwargs["headers"].get("Content-Type", "application/json")
    return client.generic(case.method, url, data=body, content_type=content_type, headers=headers)


def fuzz(operation, token, real_ids, mode):
    client, turns = Client(raise_request_exception=False), itertools.count()

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def check(case):
        response = send(client, case, token, real_ids, next(turns))
        assert response.status_code < 500, (
            f"{response.status_code} for {case.as_curl_command()}\n{response.content[:2000]}"
        )

    check()


@pytest.mark.parametrize("kind", ["team", "worker"])
def test_no_generated_request_gets_a_server_error(kind, schema, acme, real_ids, unthrottled):
    token = issue(acme, "team", role="owner") if kind == "team" else issue(acme, "worker", queues=["default"])
    checked = 0
    for operation in operations(schema, worker=kind == "worker"):
        for mode in MODES:
            fuzz(operation, token, real_ids, mode)
        checked += 1
    assert checked >= (3 if kind == "worker" else 20), f"only {checked} operations were fuzzed"
