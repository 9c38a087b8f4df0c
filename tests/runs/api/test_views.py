"""Alice enqueues and inspects Acme's runs; Acme's workers lease, heartbeat and complete them."""

import datetime as dt

import pytest
from django.utils.dateparse import parse_datetime

from jobs.models import ApiToken, JobDefinition
from runs import presence, shards
from runs.models import Run
from tests.fixtures.api import assert_problem, on_demand


@pytest.fixture
def report_job(api, acme_team, acme):
    """Acme's on-demand `reports.render`, leased by external workers from the reports queue."""
    body = on_demand(payload={"format": "pdf"}, retry={"max_attempts": 2, "base_seconds": 0, "max_seconds": 0})
    assert api.put("/v1/jobs/reports.render", token=acme_team, json=body).status_code == 201
    return JobDefinition.objects.get(tenant=acme, name="reports.render")


def enqueue(api, token, **body):
    response = api.post("/v1/jobs/reports.render/runs", token=token, json=body)
    assert response.status_code == 201, response.text
    return response.json()


def lease(api, token, **body):
    body.setdefault("queues", ["reports"])
    response = api.post("/v1/lease", token=token, json=body)
    assert response.status_code == 200, response.text
    return response.json()["leases"]


def test_it_enqueues_a_run_now_with_the_jobs_payload(api, acme_team, report_job, wall_clock):
    run = enqueue(api, acme_team)

    assert (run["job"], run["state"], run["origin"], run["attempt"]) == ("reports.render", "scheduled", "api", 0)
    # The real clock: the live server stamps the run with its own "now", between these two readings.
    assert wall_clock.now <= parse_datetime(run["due_at"]) <= shards.database_now()
    assert Run.objects.get(pk=run["id"]).payload == {"format": "pdf"}


def test_it_enqueues_a_delayed_run_and_one_at_a_time(api, acme_team, report_job, wall_clock):
    delayed = enqueue(api, acme_team, delay_seconds=600, payload={"format": "csv"})
    at = enqueue(api, acme_team, run_at="2030-03-01T09:00:00+01:00")

    assert parse_datetime(delayed["due_at"]) - wall_clock.now > dt.timedelta(seconds=590)
    assert Run.objects.get(pk=delayed["id"]).payload == {"format": "csv"}
    assert parse_datetime(at["due_at"]) == dt.datetime(2030, 3, 1, 8, 0, tzinfo=dt.UTC)


def test_a_run_shows_a_django_tasks_positional_and_keyword_arguments_apart(api, acme_team, report_job, make_run):
    task_run = make_run(report_job, payload={"format": "pdf"}, args=[42, "eu"])
    other_run = make_run(report_job, payload={"format": "csv"})

    detail = api.get(f"/v1/runs/{task_run.pk}", token=acme_team).json()
    assert (detail["args"], detail["payload"]) == ([42, "eu"], {"format": "pdf"})
    assert api.get(f"/v1/runs/{other_run.pk}", token=acme_team).json()["args"] == []


def test_it_refuses_a_run_at_and_a_delay_together(api, acme_team, report_job):
    response = api.post(
        "/v1/jobs/reports.render/runs", token=acme_team, json={"run_at": "2030-03-01T09:00:00Z", "delay_seconds": 5}
    )

    assert assert_problem(response, 400, "validation-error")["errors"][0]["field"] == "run_at"


def test_it_lists_a_jobs_runs_newest_first_a_page_at_a_time(api, acme_team, report_job):
    ids = [enqueue(api, acme_team)["id"] for _ in range(5)]

    first = api.get("/v1/jobs/reports.render/runs?limit=2", token=acme_team).json()
    second = api.get(first["next"], token=acme_team).json()
    third = api.get(second["next"], token=acme_team).json()
    back = api.get(third["previous"], token=acme_team).json()

    assert [r["id"] for r in first["results"]] == ids[:-3:-1]
    assert [r["id"] for r in second["results"]] == [ids[2], ids[1]]
    assert [r["id"] for r in third["results"]] == [ids[0]]
    assert third["next"] is None
    assert [r["id"] for r in back["results"]] == [ids[2], ids[1]]


def test_it_leases_heartbeats_and_completes_a_run(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team)

    (leased,) = lease(api, acme_worker, max=5, lease_seconds=20, worker_id="w-17")
    beat = api.post(
        f"/v1/runs/{run['id']}/heartbeat",
        token=acme_worker,
        json={"fencing_token": leased["fencing_token"], "lease_seconds": 60},
    )
    done = api.post(
        f"/v1/runs/{run['id']}/complete",
        token=acme_worker,
        json={"fencing_token": leased["fencing_token"], "outcome": "succeeded"},
    )

    assert leased["run_id"] == run["id"]
    assert (leased["job"], leased["attempt"], leased["payload"]) == ("reports.render", 1, {"format": "pdf"})
    assert leased["idempotency_key"] == run["idempotency_key"]
    assert beat.status_code == 200
    assert parse_datetime(beat.json()["lease_expires_at"]) > parse_datetime(leased["lease_expires_at"])
    assert done.json() == {"run_id": run["id"], "state": "succeeded"}
    detail = api.get(f"/v1/runs/{run['id']}", token=acme_team).json()
    assert detail["state"] == "succeeded"
    assert detail["worker_id"] == "w-17"
    assert [(a["attempt"], a["outcome"], a["fencing_token"], a["worker_id"]) for a in detail["attempts"]] == [
        (1, "succeeded", leased["fencing_token"], "w-17")
    ]


def test_it_retries_a_failure_then_sends_it_to_the_dlq(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team)

    (first,) = lease(api, acme_worker)
    failed = api.post(
        f"/v1/runs/{run['id']}/complete",
        token=acme_worker,
        json={"fencing_token": first["fencing_token"], "outcome": "failed", "error": "printer on fire"},
    )
    (second,) = lease(api, acme_worker)
    dead = api.post(
        f"/v1/runs/{run['id']}/complete",
        token=acme_worker,
        json={"fencing_token": second["fencing_token"], "outcome": "failed", "error": "still on fire"},
    )

    assert failed.json()["state"] == "retry_wait"
    assert second["attempt"] == 2
    assert second["fencing_token"] > first["fencing_token"]
    assert dead.json()["state"] == "dead"
    (letter,) = api.get("/v1/dlq", token=acme_team).json()["results"]
    assert (letter["run"], letter["job"], letter["last_error"], letter["status"]) == (
        run["id"],
        "reports.render",
        "still on fire",
        "open",
    )


def test_it_sends_a_permanent_failure_straight_to_the_dlq(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team)
    (leased,) = lease(api, acme_worker)

    done = api.post(
        f"/v1/runs/{run['id']}/complete",
        token=acme_worker,
        json={"fencing_token": leased["fencing_token"], "outcome": "failed", "retryable": False},
    )

    assert done.json()["state"] == "dead"


def test_it_refuses_a_stale_fencing_token(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team)
    (leased,) = lease(api, acme_worker)
    stale = {"fencing_token": leased["fencing_token"] - 1}

    beat = api.post(f"/v1/runs/{run['id']}/heartbeat", token=acme_worker, json=stale)
    done = api.post(f"/v1/runs/{run['id']}/complete", token=acme_worker, json={**stale, "outcome": "succeeded"})

    assert "stop working" in assert_problem(beat, 409, "stale-lease")["detail"]
    assert_problem(done, 409, "stale-lease")
    assert Run.objects.get(pk=run["id"]).state == "leased"


def test_it_refuses_a_second_completion(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team)
    (leased,) = lease(api, acme_worker)
    body = {"fencing_token": leased["fencing_token"], "outcome": "succeeded"}

    api.post(f"/v1/runs/{run['id']}/complete", token=acme_worker, json=body)

    assert_problem(api.post(f"/v1/runs/{run['id']}/complete", token=acme_worker, json=body), 409, "stale-lease")


def test_it_cancels_a_waiting_run_once(api, acme_team, report_job):
    run = enqueue(api, acme_team, delay_seconds=3600)

    cancelled = api.post(f"/v1/runs/{run['id']}:cancel", token=acme_team, json={"reason": "customer left"})
    again = api.post(f"/v1/runs/{run['id']}:cancel", token=acme_team)

    assert (cancelled.json()["state"], cancelled.json()["reason"]) == ("cancelled", "customer left")
    assert "cancelled" in assert_problem(again, 409, "invalid-state")["detail"]


def test_it_takes_the_lease_away_from_a_cancelled_running_run(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team)
    (leased,) = lease(api, acme_worker)

    api.post(f"/v1/runs/{run['id']}:cancel", token=acme_team)
    beat = api.post(
        f"/v1/runs/{run['id']}/heartbeat", token=acme_worker, json={"fencing_token": leased["fencing_token"]}
    )

    assert_problem(beat, 409, "stale-lease")
    detail = api.get(f"/v1/runs/{run['id']}", token=acme_team).json()
    assert [a["outcome"] for a in detail["attempts"]] == ["stale"]


def test_it_leases_only_from_the_tokens_queues(api, acme, acme_team, report_job):
    _, billing_only = ApiToken.issue(acme, "worker", queues=["billing"])
    _, both = ApiToken.issue(acme, "worker", queues=["billing", "reports"])
    enqueue(api, acme_team)

    refused = api.post("/v1/lease", token=billing_only, json={"queues": ["reports"]})
    narrowed = lease(api, both, queues=["reports", "secret"])

    assert "billing" in assert_problem(refused, 403, "forbidden")["detail"]
    assert len(narrowed) == 1


def test_it_leases_only_runs_of_external_jobs(api, acme, acme_team, acme_worker, report_job, make_job, make_run):
    python_job = make_job(acme, "reports.python", queue="reports")
    python_run = make_run(python_job)
    run = enqueue(api, acme_team)
    assert [leased["run_id"] for leased in lease(api, acme_worker, max=10)] == [run["id"]]
    assert Run.objects.get(pk=python_run.pk).state == "scheduled"  # left to run_worker


def test_a_lease_announces_the_token_as_a_consumer_of_external_jobs_on_its_queues(
    api, acme, globex, acme_worker, report_job
):
    lease(api, acme_worker, queues=["reports"])
    assert presence.serving("external", "reports", tenant_id=acme.pk)
    assert not presence.serving("external", "default", tenant_id=acme.pk)
    assert not presence.serving("external", "reports", tenant_id=globex.pk)


def test_it_leases_from_all_the_tokens_queues_by_default(api, acme_team, acme_worker, report_job):
    enqueue(api, acme_team)

    response = api.post("/v1/lease", token=acme_worker, json={})

    assert len(response.json()["leases"]) == 1


def test_it_hides_runs_of_queues_the_worker_may_not_use(api, acme, acme_team, acme_worker, report_job):
    _, billing_only = ApiToken.issue(acme, "worker", queues=["billing"])
    run = enqueue(api, acme_team)
    (leased,) = lease(api, acme_worker)

    beat = api.post(
        f"/v1/runs/{run['id']}/heartbeat", token=billing_only, json={"fencing_token": leased["fencing_token"]}
    )

    assert_problem(beat, 404, "not-found")


def test_it_long_polls_until_a_run_falls_due(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team, delay_seconds=1)

    leases = lease(api, acme_worker, wait_seconds=20)

    # Nothing was due when the poll began: an answer without waiting would be empty.
    assert [lease["run_id"] for lease in leases] == [run["id"]]
    leased = Run.objects.get(pk=run["id"])
    assert leased.due_at <= leased.started_at, "leased once it fell due, never before"


def test_it_answers_an_empty_long_poll_when_the_wait_is_over(api, acme_worker, report_job):
    # The answer comes (the client gives up after 30 s), and it is empty: there was nothing to wait for.
    assert lease(api, acme_worker, wait_seconds=0.5) == []


def test_it_validates_a_lease_request(api, acme_worker):
    response = api.post("/v1/lease", token=acme_worker, json={"max": 0, "lease_seconds": 1, "wait_seconds": 60})

    problem = assert_problem(response, 400, "validation-error")
    assert {e["field"] for e in problem["errors"]} == {"max", "lease_seconds", "wait_seconds"}


def test_it_stores_a_completed_attempts_error_with_credentials_redacted(api, acme_team, acme_worker, report_job):
    run = enqueue(api, acme_team)
    (leased,) = lease(api, acme_worker)
    error = "Traceback ...\nHTTPError: 401 sending Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhY21lIn0"
    api.post(
        f"/v1/runs/{run['id']}/complete",
        token=acme_worker,
        json={"fencing_token": leased["fencing_token"], "outcome": "failed", "error": error, "retryable": False},
    )
    detail = api.get(f"/v1/runs/{run['id']}", token=acme_team).json()
    assert detail["attempts"][0]["error"] == "Traceback ...\nHTTPError: 401 sending Authorization: Bearer [REDACTED]"
    assert "eyJhbGci" not in str(detail)
