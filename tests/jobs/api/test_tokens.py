"""Who may call what. Globex's objects do not exist for Acme (404); a token of the
wrong kind is refused (403); no token, an unknown one or a revoked one is 401."""

import datetime as dt

import pytest

from jobs.models import ApiToken, JobDefinition
from runs.models import Run
from tests.fixtures.api import assert_problem, on_demand

TEAM, WORKER = "team", "worker"

# (method, path, body, kind): every endpoint that names an object. {job}, {run}
# and {letter} are Globex's. Acme's token of the right kind must get 404.
OBJECT_ENDPOINTS = [
    ("GET", "/v1/jobs/{job}", None, TEAM),
    ("DELETE", "/v1/jobs/{job}", None, TEAM),
    ("POST", "/v1/jobs/{job}:pause", None, TEAM),
    ("POST", "/v1/jobs/{job}:resume", None, TEAM),
    ("POST", "/v1/jobs/{job}:trigger", None, TEAM),
    ("POST", "/v1/jobs/{job}:backfill", {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}, TEAM),
    ("GET", "/v1/jobs/{job}/runs", None, TEAM),
    ("POST", "/v1/jobs/{job}/runs", {}, TEAM),
    ("GET", "/v1/runs/{run}", None, TEAM),
    ("POST", "/v1/runs/{run}:cancel", {}, TEAM),
    ("POST", "/v1/dlq/{letter}:replay", {}, TEAM),
    ("POST", "/v1/dlq/{letter}:discard", {}, TEAM),
    ("POST", "/v1/runs/{run}/heartbeat", {"fencing_token": 1}, WORKER),
    ("POST", "/v1/runs/{run}/complete", {"fencing_token": 1, "outcome": "succeeded"}, WORKER),
]
COLLECTION_ENDPOINTS = [
    ("GET", "/v1/jobs", None, TEAM),
    ("PUT", "/v1/jobs/acme.job", on_demand(), TEAM),
    ("GET", "/v1/dlq", None, TEAM),
    ("POST", "/v1/lease", {"queues": ["default"]}, WORKER),
]
EVERY_ENDPOINT = OBJECT_ENDPOINTS + COLLECTION_ENDPOINTS


@pytest.fixture
def globex_objects(globex, make_job, make_run, make_dead_letter):
    job = make_job(globex, "globex.payroll", cron_expr="0 * * * *", target_kind="external", target_ref="")
    run = make_run(job, state="leased")
    letter = make_dead_letter(job)
    return {"job": job.name, "run": run.pk, "letter": letter.pk}


def answers(api, endpoints, token_for, objects):
    """Call every endpoint; returns [(method, path, status, problem type)]."""
    found = []
    for method, path, body, kind in endpoints:
        response = api.call(method, path.format(**objects), token=token_for(kind), json=body)
        assert response.headers["Content-Type"].startswith("application/problem+json"), (method, path)
        found.append((method, path, response.status_code, response.json()["type"].rsplit("/", 1)[-1]))
    return found


def test_it_hides_another_tenants_objects(api, acme_team, acme_worker, globex_objects):
    """Every endpoint that names an object answers 404 for Globex's, with Acme's token of the right kind."""
    token_for = {TEAM: acme_team, WORKER: acme_worker}.get

    found = answers(api, OBJECT_ENDPOINTS, token_for, globex_objects)

    assert found == [(m, p, 404, "not-found") for m, p, _, _ in OBJECT_ENDPOINTS]


def test_it_leaves_another_tenants_objects_untouched(api, acme_team, acme_worker, globex_objects):
    answers(api, OBJECT_ENDPOINTS, {TEAM: acme_team, WORKER: acme_worker}.get, globex_objects)

    job = JobDefinition.objects.get(name="globex.payroll")
    assert job.status == "active"
    assert Run.objects.get(pk=globex_objects["run"]).state == "leased"
    assert Run.objects.filter(job=job).count() == 2


def test_it_refuses_a_token_of_the_wrong_kind(api, acme_team, acme_worker, globex_objects):
    """Worker tokens on team endpoints and team tokens on worker endpoints: 403, before any lookup."""
    token_for = {TEAM: acme_worker, WORKER: acme_team}.get

    found = answers(api, EVERY_ENDPOINT, token_for, globex_objects)

    assert found == [(m, p, 403, "forbidden") for m, p, _, _ in EVERY_ENDPOINT]


def test_it_wants_a_valid_token_everywhere(api, acme, globex_objects, clock, settings):
    """No token, an unknown one, a revoked one: 401 with a Bearer challenge, on every endpoint."""
    settings.DUETIME_AUTH_FAILURES_PER_MINUTE = 0  # this many bad tokens would lock the address out (429)
    revoked = {}
    for kind in (TEAM, WORKER):
        token, revoked[kind] = ApiToken.issue(acme, kind)
        ApiToken.objects.filter(pk=token.pk).update(revoked_at=clock.now)

    for token_for in (lambda kind: None, lambda kind: "dt_t_not-a-real-token", revoked.get):
        found = answers(api, EVERY_ENDPOINT, token_for, globex_objects)
        assert found == [(m, p, 401, "unauthorized") for m, p, _, _ in EVERY_ENDPOINT]
    response = api.get("/v1/jobs")
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="duetime"'


def test_it_refuses_a_scheme_other_than_bearer(api, acme_team):
    response = api.get("/v1/jobs", headers={"Authorization": f"Token {acme_team}"})

    assert "Bearer" in assert_problem(response, 401, "unauthorized")["detail"]


def test_it_says_a_revoked_token_was_revoked(api, acme, acme_team, clock):
    ApiToken.objects.filter(tenant=acme).update(revoked_at=clock.now)

    assert "revoked" in assert_problem(api.get("/v1/jobs", token=acme_team), 401, "unauthorized")["detail"]


def test_it_gives_each_tenant_its_own_job_names(api, acme_team, globex_team, globex_objects):
    mine = api.put("/v1/jobs/globex.payroll", token=acme_team, json=on_demand())

    assert mine.status_code == 201
    assert mine.json()["tenant"] == "acme"
    assert JobDefinition.objects.get(tenant__name="globex", name="globex.payroll").target_kind == "external"
    assert [j["name"] for j in api.get("/v1/jobs", token=globex_team).json()["results"]] == ["globex.payroll"]


def test_it_never_leases_another_tenants_runs(api, acme_worker, globex_objects, globex, make_job, make_run, wall_clock):
    job = make_job(globex, "globex.due", target_kind="external", target_ref="")
    make_run(job, due_at=wall_clock.ago(seconds=5))  # due by the real clock, which the live server's claim reads

    response = api.post("/v1/lease", token=acme_worker, json={"queues": ["default"], "max": 10})

    assert response.status_code == 200
    assert response.json() == {"leases": []}


def test_it_hides_the_dlq_of_another_tenant(api, acme_team, globex_team, globex_objects):
    assert api.get("/v1/dlq", token=acme_team).json()["results"] == []
    assert [d["id"] for d in api.get("/v1/dlq", token=globex_team).json()["results"]] == [globex_objects["letter"]]


def test_it_notes_when_a_token_was_last_used_at_most_once_a_minute(api, acme, acme_team):
    token = ApiToken.objects.get(tenant=acme, kind="team")
    assert token.last_used_at is None

    api.get("/v1/jobs", token=acme_team)
    token.refresh_from_db()
    first = token.last_used_at
    api.get("/v1/jobs", token=acme_team)
    token.refresh_from_db()

    assert first is not None
    assert token.last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - dt.timedelta(minutes=2))
    api.get("/v1/jobs", token=acme_team)
    token.refresh_from_db()
    assert token.last_used_at > first
