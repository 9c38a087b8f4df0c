"""Alice's billing service retries POSTs with an Idempotency-Key; Duetime makes the retries harmless."""

import threading

import pytest

from jobs import idempotency
from jobs.models import IdempotencyRecord
from runs.models import Run
from tests.fixtures.api import assert_problem, on_demand

RUNS = "/v1/jobs/billing.export/runs"


@pytest.fixture
def billing_job(api, acme_team, globex_team):
    for token in (acme_team, globex_team):
        assert api.put("/v1/jobs/billing.export", token=token, json=on_demand()).status_code == 201


def post(api, token, key, body, path=RUNS):
    return api.post(path, token=token, json=body, headers={"Idempotency-Key": key})


def test_it_replays_the_first_answer_for_the_same_key_and_body(api, acme_team, billing_job):
    first = post(api, acme_team, "invoice-42", {"payload": {"invoice": 42}, "delay_seconds": 60})
    second = post(api, acme_team, "invoice-42", {"delay_seconds": 60, "payload": {"invoice": 42}})

    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert Run.objects.filter(origin="api").count() == 1
    assert first.json()["idempotency_key"] == "invoice-42"


def test_it_refuses_the_same_key_with_a_different_body(api, acme_team, billing_job):
    post(api, acme_team, "invoice-42", {"payload": {"invoice": 42}})

    response = post(api, acme_team, "invoice-42", {"payload": {"invoice": 43}})

    assert "different request" in assert_problem(response, 422, "idempotency-key-reused")["detail"]
    assert Run.objects.filter(origin="api").count() == 1


def test_it_refuses_the_same_key_on_another_endpoint(api, acme_team, billing_job):
    api.put("/v1/jobs/billing.other", token=acme_team, json=on_demand())
    post(api, acme_team, "invoice-42", {})

    response = post(api, acme_team, "invoice-42", {}, path="/v1/jobs/billing.other/runs")

    assert_problem(response, 422, "idempotency-key-reused")


def test_it_scopes_keys_to_the_tenant(api, acme_team, globex_team, billing_job):
    acme_run = post(api, acme_team, "invoice-42", {}).json()
    globex_run = post(api, globex_team, "invoice-42", {"payload": {"other": True}})

    assert globex_run.status_code == 201
    assert globex_run.json()["id"] != acme_run["id"]
    assert globex_run.json()["tenant"] == "globex"


def test_it_answers_409_while_the_first_request_is_in_flight(api, acme, acme_team, billing_job):
    body = {"payload": {"invoice": 42}}
    IdempotencyRecord.objects.create(
        tenant=acme, key="invoice-42", request_hash=idempotency.fingerprint("POST", RUNS, body)
    )

    response = post(api, acme_team, "invoice-42", body)

    assert_problem(response, 409, "idempotency-key-in-use")
    assert response.headers["Retry-After"] == "1"


def test_it_takes_over_a_key_left_in_flight_by_a_crash(api, acme, acme_team, billing_job, wall_clock):
    body = {"payload": {"invoice": 42}}
    record = IdempotencyRecord.objects.create(
        tenant=acme, key="invoice-42", request_hash=idempotency.fingerprint("POST", RUNS, body)
    )
    # Ten minutes old by the real clock, which the live server reads.
    IdempotencyRecord.objects.filter(pk=record.pk).update(created_at=wall_clock.ago(minutes=10))

    assert post(api, acme_team, "invoice-42", body).status_code == 201


def test_it_creates_one_run_for_concurrent_duplicates(api, acme_team, billing_job):
    body = {"payload": {"invoice": 42}}
    answers = []
    start = threading.Barrier(8)

    def client():
        own = api.fresh()
        start.wait()
        response = post(own, acme_team, "invoice-42", body)
        answers.append((response.status_code, response.json()))

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    created = {answer["id"] for status, answer in answers if status == 201}
    in_flight = [answer for status, answer in answers if status == 409]
    assert len(answers) == 8
    assert {status for status, _ in answers} <= {201, 409}
    assert len(created) == 1
    assert all(a["type"].endswith("/idempotency-key-in-use") for a in in_flight)
    assert Run.objects.filter(origin="api").count() == 1


def test_it_releases_the_key_after_an_error(api, acme_team, billing_job):
    refused = post(api, acme_team, "invoice-42", {"delay_seconds": -1})
    fixed = post(api, acme_team, "invoice-42", {"delay_seconds": 1})

    assert_problem(refused, 400, "validation-error")
    assert fixed.status_code == 201


def test_it_forgets_keys_after_the_ttl(api, acme, acme_team, billing_job, wall_clock):
    old = post(api, acme_team, "invoice-42", {"delay_seconds": 5})
    IdempotencyRecord.objects.update(created_at=wall_clock.ago(hours=25))  # by the real clock: the live server's

    # The record is gone, but the run keeps the key: the same request finds it (200).
    again = post(api, acme_team, "invoice-42", {"delay_seconds": 5})

    assert again.status_code == 200
    assert again.json()["id"] == old.json()["id"]


def test_it_replays_triggers_too(api, acme_team, billing_job):
    first = post(api, acme_team, "nightly-rerun", {}, path="/v1/jobs/billing.export:trigger")
    second = post(api, acme_team, "nightly-rerun", {}, path="/v1/jobs/billing.export:trigger")

    assert second.json()["id"] == first.json()["id"]
    assert Run.objects.filter(origin="trigger").count() == 1


def test_it_refuses_a_malformed_key(api, acme_team, billing_job):
    assert_problem(post(api, acme_team, "x" * 256, {}), 400, "validation-error")
