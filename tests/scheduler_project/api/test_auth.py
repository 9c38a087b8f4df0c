"""Team token roles on every /v1 endpoint: a viewer reads, an operator also operates, an owner also defines.

The matrix below is the table of docs/api.md (Roles): every team endpoint with
every role. An allowed call does what it says (the tenant's state moves); a
refused one answers 403 `insufficient-role` and changes nothing at all.
"""

import json

import pytest

from dlq.models import DeadLetter
from jobs import tokens
from jobs.models import ApiToken, AuditEntry, IdempotencyRecord, JobDefinition, QueuePause
from runs.models import Run
from tests.fixtures.api import assert_problem, issue, on_demand
from tests.fixtures.schedules import nightly_export

ROLES = ["viewer", "operator", "owner"]
RANK = {role: i for i, role in enumerate(ROLES)}
WINDOW = {"start": "2026-05-01T00:00:00Z", "end": "2026-05-03T00:00:00Z", "max_runs": 10}
SET = {"source": "billing", "jobs": {"billing.export": nightly_export()}}

# (method, path, body, the role it needs). {run} and {letter}, {other_letter}: the story's ids.
ENDPOINTS = [
    ("GET", "/v1/jobs", None, "viewer"),
    ("GET", "/v1/jobs/billing.nightly", None, "viewer"),
    ("GET", "/v1/jobs/billing.nightly/runs", None, "viewer"),
    ("GET", "/v1/jobs/billing.nightly/ledger", None, "viewer"),
    ("GET", "/v1/runs/{run}", None, "viewer"),
    ("GET", "/v1/dlq", None, "viewer"),
    ("GET", "/v1/tenant", None, "viewer"),
    ("PUT", "/v1/schedules?dry_run=1", SET, "viewer"),
    ("POST", "/v1/jobs/billing.nightly:pause", None, "operator"),
    ("POST", "/v1/jobs/billing.paused:resume", None, "operator"),
    ("POST", "/v1/jobs/billing.nightly:trigger", {}, "operator"),
    ("POST", "/v1/jobs/billing.nightly/runs", {"delay_seconds": 60}, "operator"),
    ("POST", "/v1/jobs/billing.nightly:backfill", WINDOW, "operator"),
    ("POST", "/v1/runs/{run}:cancel", {}, "operator"),
    ("POST", "/v1/dlq/{letter}:replay", {}, "operator"),
    ("POST", "/v1/dlq/{other_letter}:discard", {}, "operator"),
    ("POST", "/v1/tenant:pause", {"queue": "default"}, "operator"),
    ("POST", "/v1/tenant:resume", {"queue": "reports"}, "operator"),
    ("POST", "/v1/tenant:close-breaker", {}, "operator"),
    ("PUT", "/v1/jobs/billing.new", on_demand(), "owner"),
    ("PUT", "/v1/jobs/billing.nightly", on_demand(), "owner"),
    ("DELETE", "/v1/jobs/billing.nightly", None, "owner"),
    ("POST", "/v1/jobs/billing.hook:rotate-signing-secret", None, "owner"),
    ("PUT", "/v1/schedules", SET, "owner"),
]


@pytest.fixture
def story(acme, make_job, make_dead_letter, clock):
    """Acme: a nightly cron job with a scheduled run, a paused job, an http job, two dead letters, a paused queue."""
    nightly = make_job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="Europe/Berlin")
    make_job(acme, "billing.paused", status="paused")
    make_job(acme, "billing.hook", target_kind="http", target_ref="https://public.example/hook", payload={})
    run = Run.objects.create(
        job=nightly,
        tenant=acme,
        due_at=clock.ahead(days=1),
        available_at=clock.ahead(days=1),
        queue="default",
        shard=nightly.shard,
        max_attempts=nightly.max_attempts,
        timeout_seconds=nightly.timeout_seconds,
        idempotency_key="billing.nightly@tomorrow",
    )
    failing = make_job(acme, "billing.failing")
    letter, other = make_dead_letter(failing, "boom"), make_dead_letter(make_job(acme, "billing.other"), "bang")
    QueuePause.objects.create(tenant=acme, queue="reports", paused_at=clock.now)
    type(acme).objects.filter(pk=acme.pk).update(breaker_opened_at=clock.now, breaker_detail="90 % of 200 attempts")
    return {"run": run.pk, "letter": letter.pk, "other_letter": other.pk}


def state(tenant):
    """Everything a team token could change about its tenant, to tell "nothing changed" exactly."""
    return {
        "jobs": sorted(JobDefinition.objects.filter(tenant=tenant).values_list("name", "status", "version")),
        "runs": sorted(Run.objects.filter(tenant=tenant).values_list("id", "state")),
        "letters": sorted(DeadLetter.objects.filter(tenant=tenant).values_list("id", "replayed_at", "discarded_at")),
        "pauses": sorted(QueuePause.objects.filter(tenant=tenant).values_list("queue", flat=True)),
        "breaker": type(tenant).objects.get(pk=tenant.pk).breaker_opened_at,
        "audit": AuditEntry.objects.filter(tenant=tenant).count(),
        "keys": IdempotencyRecord.objects.filter(tenant=tenant).count(),
    }


def call(client, secret, method, path, body):
    return client.generic(
        method,
        path,
        json.dumps(body) if body is not None else "",
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("method", "path", "body", "needed"), ENDPOINTS, ids=[f"{m} {p.split('?')[0]}" for m, p, _, _ in ENDPOINTS]
)
def test_it_lets_each_role_do_what_it_may_and_refuses_the_rest_changing_nothing(
    client, acme, story, role, method, path, body, needed
):
    secret = issue(acme, "team", role=role)
    before = state(acme)

    response = call(client, secret, method, path.format(**story), body)

    if RANK[role] >= RANK[needed]:
        assert response.status_code in (200, 201), response.content.decode()
        if method != "GET" and "dry_run" not in path:
            assert state(acme) != before, "an allowed call did nothing"
    else:
        problem = assert_problem(response, 403, "insufficient-role")
        assert f"role {needed} or above" in problem["detail"] and f"token's role is {role}" in problem["detail"]
        assert state(acme) == before


@pytest.mark.django_db(transaction=True)  # the lease is served from a thread of its own, which must see the token
def test_a_worker_token_is_unchanged_it_has_no_role_and_no_team_endpoint(client, acme, story):
    worker = issue(acme, "worker", queues=["default"])
    assert ApiToken.objects.get(kind="worker").role == ""

    assert_problem(call(client, worker, "GET", "/v1/jobs", None), 403, "forbidden")
    leased = call(client, worker, "POST", "/v1/lease", {"queues": ["default"], "max": 1, "wait_seconds": 0})
    assert leased.status_code == 200, leased.content.decode()


def test_a_role_change_counts_from_the_tokens_next_call(client, acme, story):
    """Checked when used: the token is read on every request, so a demotion needs no new secret."""
    secret = issue(acme, "team", role="operator")
    assert call(client, secret, "POST", "/v1/jobs/billing.nightly:pause", None).status_code == 200

    tokens.change_role(ApiToken.objects.filter(tenant=acme), "viewer", actor="user:alice")

    assert_problem(call(client, secret, "POST", "/v1/jobs/billing.paused:resume", None), 403, "insufficient-role")
    assert call(client, secret, "GET", "/v1/jobs/billing.paused", None).json()["status"] == "paused"


def test_a_method_the_endpoint_does_not_serve_is_405_whatever_the_role(client, acme):
    secret = issue(acme, "team", role="viewer")
    assert_problem(call(client, secret, "PATCH", "/v1/jobs/billing.nightly", {}), 405, "method-not-allowed")
