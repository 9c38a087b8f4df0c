"""Every error is an RFC 9457 problem: a client can branch on `type` and show `detail`."""

import base64
import re
from pathlib import Path

import pytest
from rest_framework.test import APIRequestFactory

from jobs.idempotency import KeyInFlight, KeyReused
from jobs.models import JobDefinition, Tenant
from jobs.permissions import Revoked
from jobs.quotas import QuotaExceeded
from jobs.roles import InsufficientRole
from jobs.schedules import SetChanged
from jobs.tokens import QueueNotAllowed
from runs.controls import ConcurrencyLimit
from runs.transitions import StaleLease
from scheduler_project.api import problems
from tests.fixtures.api import assert_problem, nightly, on_demand

LIMIT = 256 * 1024
ENVELOPE = len('{"blob":""}')


def blob(total_bytes):
    """A payload whose compact JSON is exactly `total_bytes` long."""
    return {"blob": "x" * (total_bytes - ENVELOPE)}


def test_it_lists_every_bad_field_of_a_job_body(api, acme_team):
    body = nightly(retry={"max_attempts": 0}, priority="urgent", queue="Billing Queue")

    problem = assert_problem(api.put("/v1/jobs/billing.export", token=acme_team, json=body), 400, "validation-error")

    fields = {e["field"] for e in problem["errors"]}
    assert fields == {"retry.max_attempts", "priority"}
    assert {e["pointer"] for e in problem["errors"]} == {"#/retry/max_attempts", "#/priority"}
    assert "retry.max_attempts" in problem["detail"]


def test_it_reports_domain_rules_by_body_path(api, acme_team):
    body = nightly(
        queue="Billing Queue", retry={"base_seconds": 60, "max_seconds": 10}, target={"kind": "python", "ref": "nope"}
    )

    problem = assert_problem(api.put("/v1/jobs/billing.export", token=acme_team, json=body), 400, "validation-error")

    assert {e["field"] for e in problem["errors"]} == {"queue", "retry.max_seconds", "target.ref"}


def test_it_calls_a_bad_cron_expression_an_invalid_schedule(api, acme_team):
    body = nightly(schedule={"kind": "cron", "cron": "61 * * * *"})

    problem = assert_problem(api.put("/v1/jobs/billing.export", token=acme_team, json=body), 400, "invalid-schedule")

    assert problem["errors"][0]["field"] == "schedule.cron"


def test_it_calls_an_unknown_time_zone_an_invalid_schedule(api, acme_team):
    body = nightly(schedule={"kind": "cron", "cron": "0 2 * * *", "time_zone": "Mars/Olympus"})

    problem = assert_problem(api.put("/v1/jobs/billing.export", token=acme_team, json=body), 400, "invalid-schedule")

    assert problem["errors"][0]["field"] == "schedule.time_zone"


def test_it_wants_an_offset_on_an_at_schedule(api, acme_team):
    body = on_demand(schedule={"kind": "at", "at": "2030-01-01T09:00:00"})

    problem = assert_problem(api.put("/v1/jobs/billing.once", token=acme_team, json=body), 400, "invalid-schedule")

    assert problem["errors"][0]["field"] == "schedule.at"
    assert "offset" in problem["errors"][0]["detail"]


def test_it_calls_a_bad_job_name_a_validation_error(api, acme_team):
    problem = assert_problem(
        api.put("/v1/jobs/Billing.Export", token=acme_team, json=nightly()), 400, "validation-error"
    )

    assert problem["errors"][0]["field"] == "name"


def test_it_answers_malformed_json_with_a_problem(api, acme_team):
    response = api.put(
        "/v1/jobs/billing.export", token=acme_team, data="{not json", headers={"Content-Type": "application/json"}
    )

    assert_problem(response, 400, "malformed-request")


def test_it_refuses_a_body_that_is_not_json(api, acme_team):
    response = api.put("/v1/jobs/billing.export", token=acme_team, data="a=1", headers={"Content-Type": "text/plain"})

    assert_problem(response, 415, "unsupported-media-type")


def test_it_refuses_to_answer_in_html(api, acme_team):
    assert_problem(api.get("/v1/jobs", token=acme_team, headers={"Accept": "text/html"}), 406, "not-acceptable")


def test_it_answers_a_wrong_method_with_405_and_allow(api, acme_team):
    response = api.call("PATCH", "/v1/jobs/billing.export", token=acme_team, json={})

    assert_problem(response, 405, "method-not-allowed")
    assert "PUT" in response.headers["Allow"]


def test_it_answers_unknown_urls_with_a_404_problem(api, acme_team):
    for method, path in [
        ("GET", "/v1/nothing-here"),
        ("POST", "/v1/jobs/billing.export:explode"),
        ("DELETE", "/v1/runs/not-a-number"),
        ("GET", "/v1/jobs/"),
        ("POST", "/v1/runs/%0A:cancel"),
    ]:
        assert_problem(api.call(method, path, token=acme_team), 404, "not-found")


def test_it_answers_a_garbled_cursor_with_404(api, acme_team):
    forged = base64.b64encode(b"p=%00").decode()

    for cursor in ("garbage", forged):
        assert_problem(api.get(f"/v1/jobs?cursor={cursor}", token=acme_team), 404, "not-found")
        assert_problem(api.get(f"/v1/dlq?cursor={cursor}", token=acme_team), 404, "not-found")


def test_it_refuses_text_no_database_can_store(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    nul = '{"payload": {"note": "a\\u0000b"}}'
    surrogate = '{"payload": {"\\ud800": 1}}'

    for body in (nul, surrogate):
        response = api.post(
            "/v1/jobs/billing.export/runs", token=acme_team, data=body, headers={"Content-Type": "application/json"}
        )
        assert assert_problem(response, 400, "validation-error")["errors"][0]["field"] == "payload"
    assert_problem(api.get("/v1/jobs/billing%00export", token=acme_team), 404, "not-found")
    assert_problem(api.get("/v1/dlq?job=billing%00export", token=acme_team), 400, "validation-error")
    assert_problem(api.put("/v1/jobs/billing%0A", token=acme_team, json=on_demand()), 400, "validation-error")


def test_it_refuses_json_nested_too_deeply(api, acme_team):
    deep = '{"payload": ' + "[" * 100_000 + "]" * 100_000 + "}"

    response = api.put(
        "/v1/jobs/billing.export", token=acme_team, data=deep, headers={"Content-Type": "application/json"}
    )

    assert_problem(response, 400, "malformed-request")


def test_it_accepts_a_payload_of_exactly_256_kb(api, acme_team):
    response = api.put("/v1/jobs/billing.export", token=acme_team, json=nightly(payload=blob(LIMIT)))

    assert response.status_code == 201


def test_it_refuses_a_payload_one_byte_over_256_kb(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())

    on_put = api.put("/v1/jobs/billing.export", token=acme_team, json=nightly(payload=blob(LIMIT + 1)))
    on_run = api.post("/v1/jobs/billing.export/runs", token=acme_team, json={"payload": blob(LIMIT + 1)})

    assert "262145 bytes" in assert_problem(on_put, 413, "payload-too-large")["detail"]
    assert_problem(on_run, 413, "payload-too-large")


def test_it_refuses_a_huge_body_before_reading_it(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    huge = '{"payload": "' + "x" * (7 * LIMIT) + '"}'

    response = api.post(
        "/v1/jobs/billing.export/runs", token=acme_team, data=huge, headers={"Content-Type": "application/json"}
    )

    assert_problem(response, 413, "payload-too-large")


# What a client sees when a domain module raises: (exception, status, type, the detail says, Retry-After).
ACME = Tenant(name="acme")
DOMAIN_ERRORS = [
    (
        QuotaExceeded(
            "Tenant acme may create 2 runs a minute",
            tenant=ACME,
            quota="enqueue_rate_per_minute",
            limit=2,
            retry_after=7,
        ),
        429,
        "quota-exceeded",
        "2 runs a minute",
        "7",
    ),
    (
        QuotaExceeded("Tenant acme may have 1 job definitions", tenant=ACME, quota="max_definitions", limit=1),
        429,
        "quota-exceeded",
        "1 job definitions",
        None,
    ),
    (KeyReused("invoice-42"), 422, "idempotency-key-reused", "'invoice-42' was used for a different request", None),
    (KeyInFlight("invoice-42"), 409, "idempotency-key-in-use", "still being processed", "1"),
    (QueueNotAllowed(["reports"], ["payroll"]), 403, "forbidden", "queues ['reports'], not ['payroll']", None),
    (StaleLease("run 7: fencing token 41 is not the current lease"), 409, "stale-lease", "stop working on", None),
    (SetChanged("billing", '"set-abc"'), 412, "precondition-failed", "Set billing changed since you read it", None),
    (
        ConcurrencyLimit(JobDefinition(name="billing.nightly", concurrency=2), 2),
        409,
        "concurrency-limit",
        "Job billing.nightly already runs 2 of at most 2 at once",
        None,
    ),
    (
        InsufficientRole("viewer", "operator", "POST /v1/jobs/nightly:pause"),
        403,
        "insufficient-role",
        "needs a team token with the role operator or above; this token's role is viewer",
        None,
    ),
    (
        Revoked("billing.export: permission revoked: tenant 'acme' may no longer run tasks from 'billing.tasks'"),
        403,
        "permission-revoked",
        "may no longer run tasks from 'billing.tasks'",
        None,
    ),
]


def test_it_has_a_case_here_for_every_domain_error_it_maps():
    assert {type(exc) for exc, *_ in DOMAIN_ERRORS} == set(problems.DOMAIN_ERRORS)


@pytest.mark.parametrize(
    ("exc", "status", "slug", "says", "retry_after"),
    DOMAIN_ERRORS,
    ids=[type(case[0]).__name__ for case in DOMAIN_ERRORS],
)
def test_it_answers_a_domain_error_with_its_problem(exc, status, slug, says, retry_after):
    request = APIRequestFactory().post("/v1/jobs/billing.export/runs")

    response = problems.exception_handler(exc, {"request": request, "view": None})

    assert response.status_code == status
    assert response.content_type == problems.CONTENT_TYPE
    assert response.data["type"] == f"https://duetime.dev/problems/{slug}"
    assert (response.data["status"], response.data["title"]) == (status, problems.TYPES[slug][1])
    assert says in response.data["detail"]
    assert response.get("Retry-After") == retry_after


def test_it_turns_an_unexpected_error_into_a_500_problem(caplog):
    request = APIRequestFactory().get("/v1/jobs")

    response = problems.exception_handler(RuntimeError("disk on fire"), {"request": request, "view": None})

    assert response.status_code == 500
    assert response.data["type"] == "https://duetime.dev/problems/server-error"
    assert "disk on fire" not in response.data["detail"]
    assert "disk on fire" in caplog.text


def test_it_documents_every_problem_type():
    documented = set(re.findall(r"`([a-z-]+)`", (Path(__file__).parents[3] / "docs" / "api.md").read_text()))

    assert set(problems.TYPES) <= documented
