"""The API as a client sees it: a live server, real HTTP, bearer tokens.

Acme (Alice's team) and Globex (Bob's) each have a team token and a worker
token for the `default` and `reports` queues. `api` speaks to the live server:
`api.get("/v1/jobs", token=acme_team)` returns a `requests.Response`.
"""

import datetime as dt

import pytest
import requests
from django.db import connection
from django.utils import timezone

from dlq.models import DeadLetter
from jobs.models import ApiToken
from runs.models import Counter

PROBLEM = "application/problem+json"


class Api:
    """A thin HTTP client for the live server; `token` is a secret or None."""

    def __init__(self, base_url):
        self.base_url = base_url
        self.session = requests.Session()

    def fresh(self):
        """Another client with its own connection pool, for use from another thread."""
        return Api(self.base_url)

    def call(self, method, path, *, token=None, json=None, headers=None, data=None, timeout=30):
        headers = dict(headers or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        url = path if path.startswith("http") else self.base_url + path
        return self.session.request(method, url, json=json, data=data, headers=headers, timeout=timeout)

    def get(self, path, **kwargs):
        return self.call("GET", path, **kwargs)

    def put(self, path, **kwargs):
        return self.call("PUT", path, **kwargs)

    def post(self, path, **kwargs):
        return self.call("POST", path, **kwargs)

    def delete(self, path, **kwargs):
        return self.call("DELETE", path, **kwargs)


@pytest.fixture
def api(live_server, transactional_db):
    restore_fencing_source()
    client = Api(live_server.url)
    yield client
    client.session.close()


def restore_fencing_source():
    """Live-server tests flush tables between tests, and with them SQLite's fencing
    counter row that a migration created (PostgreSQL's sequence survives)."""
    if connection.vendor == "sqlite":
        Counter.objects.get_or_create(name="fencing_token", defaults={"value": 0})


def issue(tenant, kind, queues=()):
    _, secret = ApiToken.issue(tenant, kind, name=f"{tenant.name}-{kind}", queues=queues)
    return secret


@pytest.fixture
def acme_team(acme):
    return issue(acme, "team")


@pytest.fixture
def acme_worker(acme):
    return issue(acme, "worker", queues=["default", "reports"])


@pytest.fixture
def globex_team(globex):
    return issue(globex, "team")


@pytest.fixture
def globex_worker(globex):
    return issue(globex, "worker", queues=["default", "reports"])


def nightly(**overrides):
    """A job body: 02:00 Berlin every night, an external target on the reports queue."""
    body = {
        "schedule": {"kind": "cron", "cron": "0 2 * * *", "time_zone": "Europe/Berlin"},
        "target": {"kind": "external", "ref": None},
        "queue": "reports",
    }
    body.update(overrides)
    return body


def on_demand(**overrides):
    body = {"schedule": {"kind": "none"}, "target": {"kind": "external"}, "queue": "reports"}
    body.update(overrides)
    return body


@pytest.fixture
def make_dead_letter(make_run):
    def make(job, error="boom"):
        run = make_run(job, state="dead", attempt=job.max_attempts, last_error=error)
        return DeadLetter.objects.create(run=run, job=job, tenant=job.tenant, last_error=error, dead_at=timezone.now())

    return make


def past(seconds=5):
    return timezone.now() - dt.timedelta(seconds=seconds)


def assert_problem(response, status, slug):
    """The response is an RFC 9457 problem of type `slug` with `status`."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith(PROBLEM), response.headers["Content-Type"]
    body = response.json()
    assert body["type"] == f"https://duetime.dev/problems/{slug}", body
    assert body["status"] == status
    assert body["title"] and body["detail"]
    return body
