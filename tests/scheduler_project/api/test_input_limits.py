"""No input gives a 500: JSON nested too deep and instants outside 1970-9990 are 400 problems on every /v1 door.

(scheduler_project/api/endpoints.py's parser and fields.py's AwareDateTimeField;
the generated requests of test_fuzz.py cover the rest of the input space.)
"""

import datetime as dt
import json

import pytest

from tests.fixtures.api import assert_problem, nightly, on_demand

JSON = {"Content-Type": "application/json"}


def nested(levels):
    """A JSON array nested `levels` deep, as text: [[[...]]]."""
    return "[" * levels + "]" * levels


@pytest.fixture
def deep_doors(api, acme, acme_team, acme_worker, make_job, make_run, wall_clock):
    """(method, path, token, body of the door's own shape): each endpoint that takes JSON."""
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    leased = make_run(
        make_job(acme, "billing.leased", cron_expr="0 2 * * *"),
        state="leased",
        lease_expires_at=wall_clock.ahead(hours=1),
    )
    return [
        ("PUT", "/v1/jobs/billing.export", acme_team, on_demand()),
        ("POST", "/v1/jobs/billing.export/runs", acme_team, {}),
        ("POST", "/v1/jobs/billing.export:trigger", acme_team, {}),
        ("PUT", "/v1/schedules", acme_team, {"jobs": {}}),
        ("POST", "/v1/lease", acme_worker, {"queues": ["default"]}),
        ("POST", f"/v1/runs/{leased.pk}/complete", acme_worker, {"fencing_token": 1, "outcome": "succeeded"}),
    ]


@pytest.mark.parametrize("levels", [65, 1_000, 100_000])
def test_it_refuses_json_nested_deeper_than_64_levels_on_every_door(api, deep_doors, levels):
    for method, path, token, body in deep_doors:
        text = json.dumps({**body, "deep": "DEEP"}).replace('"DEEP"', nested(levels - 1))

        response = api.call(method, path, token=token, data=text, headers=JSON)

        problem = assert_problem(response, 400, "malformed-request")
        assert "deeper than 64 levels" in problem["detail"], (method, path)


def test_it_takes_json_64_levels_deep(api, acme_team):
    text = json.dumps(on_demand(payload="DEEP")).replace('"DEEP"', "{" + '"a": ' + nested(62) + "}")

    response = api.put("/v1/jobs/billing.export", token=acme_team, data=text, headers=JSON)

    assert response.status_code == 201, response.text


YEAR_1 = "0001-01-01T00:00:00Z"
OUTSIDE = [
    YEAR_1,
    "0001-01-01T00:00:00+05:00",
    "1969-12-31T23:59:59Z",
    "9991-01-01T00:00:00Z",
    "9999-12-31T23:59:59-05:00",
]


@pytest.mark.parametrize("instant", OUTSIDE)
def test_it_refuses_a_backfill_outside_the_years_a_schedule_can_express(api, acme_team, instant):
    api.put("/v1/jobs/billing.hourly", token=acme_team, json=nightly(schedule={"kind": "cron", "cron": "0 * * * *"}))

    response = api.post(
        "/v1/jobs/billing.hourly:backfill", token=acme_team, json={"start": instant, "end": "2026-01-01T00:00:00Z"}
    )

    problem = assert_problem(response, 400, "validation-error")
    assert problem["errors"][0]["field"] == "start"
    assert "between 1970-01-01 and 9990-12-31" in problem["detail"]


@pytest.mark.parametrize("instant", [YEAR_1, "9999-12-31T23:59:59Z"])
def test_it_refuses_every_other_instant_outside_them(api, acme, acme_team, instant):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    api.put("/v1/jobs/billing.hourly", token=acme_team, json=nightly(schedule={"kind": "cron", "cron": "0 * * * *"}))

    at = api.put("/v1/jobs/billing.once", token=acme_team, json=nightly(schedule={"kind": "at", "at": instant}))
    run = api.post("/v1/jobs/billing.export/runs", token=acme_team, json={"run_at": instant})
    ledger = api.get(f"/v1/jobs/billing.hourly/ledger?start={instant.replace('+', '%2B')}", token=acme_team)
    window = api.post(
        "/v1/windows",
        token=acme_team,
        json={"name": "freeze", "kind": "one_off", "starts_at": instant, "ends_at": "2027-01-04T00:00:00Z"},
    )
    declared = api.put(
        "/v1/schedules",
        token=acme_team,
        json={"jobs": {"billing.once": nightly(schedule={"kind": "at", "at": instant})}},
    )

    assert assert_problem(at, 400, "invalid-schedule")["errors"][0]["field"] == "schedule.at"
    assert assert_problem(run, 400, "validation-error")["errors"][0]["field"] == "run_at"
    assert assert_problem(ledger, 400, "validation-error")["errors"][0]["field"] == "start"
    assert assert_problem(window, 400, "validation-error")["errors"][0]["field"] == "starts_at"
    assert declared.status_code == 400 and "between 1970-01-01 and 9990-12-31" in declared.json()["detail"]


def test_it_takes_the_first_and_last_instants_it_allows(api, acme_team, clock):
    first, last = "1970-01-01T00:00:00Z", "9990-12-31T23:59:59Z"
    api.put("/v1/jobs/billing.hourly", token=acme_team, json=nightly(schedule={"kind": "cron", "cron": "0 * * * *"}))

    backfill = api.post(
        "/v1/jobs/billing.hourly:backfill",
        token=acme_team,
        json={"start": first, "end": (clock.now - dt.timedelta(days=1)).isoformat(), "max_runs": 1},
    )
    at = api.put("/v1/jobs/billing.later", token=acme_team, json=nightly(schedule={"kind": "at", "at": last}))

    assert backfill.status_code == 201, backfill.text
    assert at.status_code == 201, at.text


def test_it_refuses_a_job_naming_a_task_whose_module_fails_as_it_is_imported(api, acme, acme_team, settings):
    settings.DUETIME_TASK_MODULES = [*settings.DUETIME_TASK_MODULES, "tests.broken_handlers"]
    acme.task_module_prefixes = "tests.handlers\ntests.broken_handlers"
    acme.save()

    response = api.put(
        "/v1/jobs/billing.export",
        token=acme_team,
        json=on_demand(target={"kind": "python", "ref": "tests.broken_handlers.export"}, payload={}),
    )

    problem = assert_problem(response, 400, "validation-error")
    assert problem["errors"][0]["field"] == "target.ref"
    assert "cannot be imported: RuntimeError: billing settings are missing" in problem["errors"][0]["detail"]
