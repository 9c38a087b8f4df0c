"""Two owners edit one job: `ETag` and `If-Match` make the second a 412, never a lost update."""

import datetime as dt

from jobs.models import JobDefinition
from tests.fixtures.api import assert_problem, nightly


def test_a_stale_if_match_is_refused_and_the_first_edit_kept(api, acme_team):
    created = api.put("/v1/jobs/billing.nightly", token=acme_team, json=nightly())
    read = api.get("/v1/jobs/billing.nightly", token=acme_team)
    tag = read.headers["ETag"]
    assert created.headers["ETag"] == tag

    first = api.put(
        "/v1/jobs/billing.nightly", token=acme_team, json=nightly(queue="exports"), headers={"If-Match": tag}
    )
    second = api.put(
        "/v1/jobs/billing.nightly", token=acme_team, json=nightly(queue="imports"), headers={"If-Match": tag}
    )

    assert first.status_code == 200 and first.headers["ETag"] != tag
    body = assert_problem(second, 412, "precondition-failed")
    assert first.headers["ETag"] in body["detail"]
    assert JobDefinition.objects.get(name="billing.nightly").queue == "exports", "the first edit stands"
    third = api.put(
        "/v1/jobs/billing.nightly",
        token=acme_team,
        json=nightly(queue="imports"),
        headers={"If-Match": first.headers["ETag"]},
    )
    assert third.status_code == 200 and third.json()["queue"] == "imports"


def test_if_match_star_needs_the_job_and_if_none_match_star_creates_only(api, acme_team):
    missing = api.put("/v1/jobs/billing.new", token=acme_team, json=nightly(), headers={"If-Match": "*"})
    created = api.put("/v1/jobs/billing.new", token=acme_team, json=nightly(), headers={"If-None-Match": "*"})
    again = api.put("/v1/jobs/billing.new", token=acme_team, json=nightly(), headers={"If-None-Match": "*"})
    star = api.put("/v1/jobs/billing.new", token=acme_team, json=nightly(queue="x"), headers={"If-Match": "*"})

    assert_problem(missing, 412, "precondition-failed")
    assert created.status_code == 201
    assert_problem(again, 412, "precondition-failed")
    assert star.status_code == 200


def test_garbled_preconditions_are_validation_problems(api, acme_team):
    api.put("/v1/jobs/billing.nightly", token=acme_team, json=nightly())
    for headers in ({"If-Match": "17-3"}, {"If-Match": ""}, {"If-None-Match": '"17-3"'}):
        assert_problem(
            api.put("/v1/jobs/billing.nightly", token=acme_team, json=nightly(), headers=headers),
            400,
            "validation-error",
        )


def test_a_backfill_dry_run_answers_the_plan_and_creates_nothing(api, acme_team, wall_clock):
    api.put(
        "/v1/jobs/billing.hourly",
        token=acme_team,
        json=nightly(schedule={"kind": "cron", "cron": "0 * * * *", "time_zone": "UTC"}),
    )
    end = wall_clock.now.replace(minute=30, second=0, microsecond=0) - dt.timedelta(hours=1)
    window = {"start": (end - dt.timedelta(hours=3)).isoformat(), "end": end.isoformat()}

    plan = api.post("/v1/jobs/billing.hourly:backfill", token=acme_team, json={**window, "dry_run": True})
    done = api.post("/v1/jobs/billing.hourly:backfill", token=acme_team, json=window)

    assert plan.status_code == 200, plan.text
    assert (plan.json()["dry_run"], plan.json()["created"], plan.json()["planned"]) == (True, 0, 3)
    assert len(plan.json()["due_at"]) == 3
    assert done.status_code == 201 and done.json()["created"] == 3 and done.json()["due_at"] == []
