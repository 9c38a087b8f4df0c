"""Quotas keep one team from filling the shared scheduler: 429 `quota-exceeded`, with Retry-After."""

import datetime as dt

from jobs.models import Tenant
from tests.fixtures.api import assert_problem, nightly, on_demand


def test_it_limits_the_enqueue_rate(api, acme, acme_team, globex_team):
    Tenant.objects.filter(pk=acme.pk).update(enqueue_rate_per_minute=2)
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    api.put("/v1/jobs/billing.export", token=globex_team, json=on_demand())

    answers = [api.post("/v1/jobs/billing.export/runs", token=acme_team, json={}) for _ in range(2)]
    refused = api.post("/v1/jobs/billing.export/runs", token=acme_team, json={})
    trigger = api.post("/v1/jobs/billing.export:trigger", token=acme_team)
    other_tenant = api.post("/v1/jobs/billing.export/runs", token=globex_team, json={})

    assert [a.status_code for a in answers] == [201, 201]
    assert "2 runs a minute" in assert_problem(refused, 429, "quota-exceeded")["detail"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert_problem(trigger, 429, "quota-exceeded")
    assert other_tenant.status_code == 201


def test_it_limits_the_runs_waiting_or_running(api, acme, acme_team):
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=2)
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    api.post("/v1/jobs/billing.export/runs", token=acme_team, json={})
    api.post("/v1/jobs/billing.export/runs", token=acme_team, json={})

    refused = api.post("/v1/jobs/billing.export/runs", token=acme_team, json={})

    assert "2 runs waiting or running" in assert_problem(refused, 429, "quota-exceeded")["detail"]
    assert refused.headers["Retry-After"] == "60"


def test_it_counts_a_backfill_against_the_pending_runs(api, acme, acme_team, clock):
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=3)
    api.put("/v1/jobs/billing.hourly", token=acme_team, json=nightly(schedule={"kind": "cron", "cron": "0 * * * *"}))
    end = clock.ago(hours=1)
    window = {"start": (end - dt.timedelta(hours=10)).isoformat(), "end": end.isoformat()}

    refused = api.post("/v1/jobs/billing.hourly:backfill", token=acme_team, json={**window, "max_runs": 4})
    allowed = api.post("/v1/jobs/billing.hourly:backfill", token=acme_team, json={**window, "max_runs": 3})

    assert_problem(refused, 429, "quota-exceeded")
    assert allowed.status_code == 201


def test_it_limits_the_number_of_definitions(api, acme, acme_team):
    Tenant.objects.filter(pk=acme.pk).update(max_definitions=1)
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())

    refused = api.put("/v1/jobs/billing.import", token=acme_team, json=on_demand())
    update = api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand(priority="bulk"))
    api.delete("/v1/jobs/billing.export", token=acme_team)
    after_delete = api.put("/v1/jobs/billing.import", token=acme_team, json=on_demand())

    assert "1 job definitions" in assert_problem(refused, 429, "quota-exceeded")["detail"]
    assert "Retry-After" not in refused.headers
    assert update.status_code == 200
    assert after_delete.status_code == 201
