"""Alice pauses and resumes Acme, or one of its queues, over /v1/tenant (a team token)."""

import datetime as dt

from django.utils import timezone

from jobs.models import AuditEntry, JobDefinition
from runs.models import Run
from tests.fixtures.api import assert_problem, nightly


def test_it_pauses_the_whole_tenant_once_and_says_so(api, acme_team, acme_worker, acme, make_job, make_run):
    job = make_job(acme, "billing.ping", queue="reports", target_kind="external", target_ref="")
    make_run(job, due_at=timezone.now() - dt.timedelta(minutes=1))
    make_run(job, due_at=timezone.now() - dt.timedelta(minutes=2))
    before = api.post("/v1/lease", token=acme_worker, json={"queues": ["reports"], "max": 1})
    paused = api.post("/v1/tenant:pause", token=acme_team, json={"note": "database upgrade"})
    again = api.post("/v1/tenant:pause", token=acme_team, json={})
    lease = api.post("/v1/lease", token=acme_worker, json={"queues": ["reports"], "max": 10})

    assert len(before.json()["leases"]) == 1
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True and paused.json()["paused_queues"] == {}
    assert again.json()["paused_at"] == paused.json()["paused_at"]  # a paused tenant stays paused
    assert lease.status_code == 200 and lease.json()["leases"] == []  # its own workers lease nothing either
    assert AuditEntry.objects.filter(action="pause", object_type="jobs.tenant").count() == 1
    assert api.get("/v1/tenant", token=acme_team).json()["paused"] is True


def test_it_pauses_one_queue_and_resumes_it_recording_what_its_jobs_passed_over(api, acme_team, acme):
    api.put("/v1/jobs/billing.nightly", token=acme_team, json=nightly())  # on queue reports
    paused = api.post("/v1/tenant:pause", token=acme_team, json={"queue": "reports"})
    JobDefinition.objects.filter(name="billing.nightly").update(next_due_at=timezone.now() - dt.timedelta(days=2))
    resumed = api.post("/v1/tenant:resume", token=acme_team, json={"queue": "reports", "note": "done"})

    assert paused.json()["paused"] is False and list(paused.json()["paused_queues"]) == ["reports"]
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["paused_queues"] == {} and resumed.json()["jobs_caught_up"] == 1
    (summary,) = Run.objects.filter(job__name="billing.nightly", state="skipped")
    assert "passed over while queue reports was paused" in summary.reason


def test_it_pauses_only_the_callers_tenant_and_refuses_a_worker_token(api, acme_team, globex_team, acme_worker, globex):
    api.post("/v1/tenant:pause", token=acme_team, json={})

    shown = api.get("/v1/tenant", token=globex_team).json()
    assert {key: shown[key] for key in ("name", "paused", "paused_at", "paused_queues")} == {
        "name": "globex",
        "paused": False,
        "paused_at": None,
        "paused_queues": {},
    }
    assert_problem(api.post("/v1/tenant:pause", token=acme_worker, json={}), 403, "forbidden")
    bad = api.post("/v1/tenant:pause", token=globex_team, json={"queue": "Reports!"})
    assert assert_problem(bad, 400, "validation-error")["errors"][0]["field"] == "queue"


def test_it_shows_the_failure_breaker_and_an_operator_closes_it(api, acme_team, acme, globex):
    from jobs.models import Tenant

    opened = timezone.now().replace(microsecond=0)
    Tenant.objects.filter(pk__in=[acme.pk, globex.pk]).update(
        breaker_opened_at=opened, breaker_detail="80 % of 150 attempts failed over 5 min"
    )
    shown = api.get("/v1/tenant", token=acme_team).json()["breaker"]
    closed = api.post("/v1/tenant:close-breaker", token=acme_team, json={"note": "fixed the DNS"})

    assert shown["open"] is True and shown["detail"] == "80 % of 150 attempts failed over 5 min"
    assert (shown["window_seconds"], shown["failure_percent"], shown["min_attempts"]) == (300, 50, 100)
    assert closed.status_code == 200, closed.text
    assert closed.json()["breaker"]["open"] is False and closed.json()["breaker"]["opened_at"] is None
    entry = AuditEntry.objects.get(action="breaker_close")
    assert entry.tenant_id == acme.pk and entry.note == "fixed the DNS" and entry.actor.startswith("token:")
    assert Tenant.objects.get(pk=globex.pk).breaker_opened_at is not None, "only the caller's tenant"


def test_it_lists_every_limit_with_its_use(api, acme_team, acme, make_job, make_run):
    make_run(make_job(acme, "sync", concurrency=2, overlap_policy="allow"), state="leased")

    body = api.get("/v1/tenant", token=acme_team).json()

    limits = {(row["name"], row["scope"]): row for row in body["limits"]}
    assert {"max_definitions", "max_pending_runs", "enqueue_rate_per_minute", "max_concurrent_runs"} <= {
        name for name, _scope in limits
    }
    assert limits[("max_concurrent_runs", "tenant")]["used"] == 1
    job = limits[("job_concurrency", "job sync")]
    assert (job["limit"], job["used"], job["at_limit"], job["enforced_by"]) == (2, 1, False, "claim")
    assert limits[("failure_breaker", "tenant")]["limit"] == 50


def test_a_job_names_its_concurrency_group_and_the_tenant_sees_the_group(api, acme_team, acme):
    from tests.fixtures.api import on_demand

    made = api.put(
        "/v1/jobs/billing.load",
        token=acme_team,
        json=on_demand(concurrency_group="warehouse", concurrency_group_limit=1),
    )
    bad = api.put("/v1/jobs/billing.bad", token=acme_team, json=on_demand(concurrency_group="Ware House!"))

    assert made.status_code in (200, 201), made.text
    assert (made.json()["concurrency_group"], made.json()["concurrency_group_limit"]) == ("warehouse", 1)
    assert assert_problem(bad, 400, "validation-error")["errors"][0]["field"] == "concurrency_group"
    limits = {(row["name"], row["scope"]): row for row in api.get("/v1/tenant", token=acme_team).json()["limits"]}
    assert limits[("concurrency_group", "group warehouse")]["limit"] == 1
