"""What a job will do and how it has done, over the API: the DST preview, lateness stats, drift."""

import datetime as dt

import pytest

from calendars.models import Window
from jobs.models import JobDefinition
from runs import rollups
from runs.schedule_sets import apply_set
from tests.fixtures.api import assert_problem, nightly
from tests.fixtures.schedules import ping, specs


def test_the_preview_shows_the_next_runs_in_both_zones_with_windows(api, acme, acme_team, wall_clock):
    api.put("/v1/jobs/billing.nightly", token=acme_team, json=nightly())
    first = JobDefinition.objects.get(name="billing.nightly").next_due_at
    Window.objects.create(
        tenant=acme,
        name="freeze",
        kind="one_off",
        starts_at=first - dt.timedelta(minutes=5),
        ends_at=first + dt.timedelta(minutes=5),
    )

    answer = api.get("/v1/jobs/billing.nightly/preview?count=3", token=acme_team)

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["time_zone"] == "Europe/Berlin" and "02:00" in body["description"]
    assert [o["local"][11:16] for o in body["occurrences"]] == ["02:00"] * 3
    assert body["occurrences"][0]["window"] == "skipped: window 'freeze'"
    assert body["occurrences"][1]["window"] == ""


def test_the_preview_says_where_dst_moves_a_run(api, acme_team):
    # 02:30 New York does not exist on the spring-forward Sunday; 60 Sundays always hold one.
    body = nightly(schedule={"kind": "cron", "cron": "30 2 * * 0", "time_zone": "America/New_York"})
    api.put("/v1/jobs/billing.sunday", token=acme_team, json=body)
    occurrences = api.get("/v1/jobs/billing.sunday/preview?count=60", token=acme_team).json()["occurrences"]

    moved = [o for o in occurrences if o["note"]]
    assert len(occurrences) == 60 and len(moved) == 1, moved
    assert moved[0]["local"][11:16] == "03:00" and "02:30" in moved[0]["note"]  # at the end of the gap (docs/dst.md)
    assert {o["local"][11:16] for o in occurrences if not o["note"]} == {"02:30"}


def test_bad_preview_and_stats_requests_are_problems(api, acme_team):
    api.put("/v1/jobs/billing.nightly", token=acme_team, json=nightly())
    assert_problem(api.get("/v1/jobs/billing.nightly/preview?count=0", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/jobs/billing.nightly/preview?count=x", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/jobs/billing.nightly/stats?window=2h", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/tenant/stats?window=", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/jobs/nope/preview", token=acme_team), 404, "not-found")


def test_stats_read_the_lateness_percentiles_the_portal_shows(
    api, acme, acme_team, globex, make_job, make_run, make_attempt, wall_clock
):
    ours, theirs = make_job(acme, "billing.nightly"), make_job(globex, "billing.nightly")
    for i, (job, late) in enumerate(((ours, 2), (ours, 4), (theirs, 60))):
        run = make_run(job, state="succeeded", due_at=wall_clock.ago(minutes=20, seconds=i))
        make_attempt(run, late=dt.timedelta(seconds=late), ended=wall_clock.ago(minutes=15))
    rollups.tick(wall_clock.now)

    job = api.get("/v1/jobs/billing.nightly/stats", token=acme_team).json()
    tenant = api.get("/v1/tenant/stats?window=1h", token=acme_team).json()

    assert job["window"] == "24h" and job["lateness_ms"]["count"] == 2
    assert 3_400 <= job["lateness_ms"]["p99"] <= 4_600, "about 4 s, within the bins' 12 %"
    assert tenant["lateness_ms"]["count"] == 2, "globex's run is not counted"
    assert tenant["lateness_ms"]["max"] == 4000


@pytest.fixture
def declared(acme):
    apply_set(acme, specs(billing_ping=ping()), source="billing", actor="cli:ops")
    return JobDefinition.objects.get(name="billing.ping")


def test_the_job_resource_shows_its_set_and_drift(api, acme_team, declared):
    clean = api.get("/v1/jobs/billing.ping", token=acme_team).json()
    JobDefinition.objects.filter(pk=declared.pk).update(queue="hotfix")  # an edit outside the set
    drifted = api.get("/v1/jobs/billing.ping", token=acme_team).json()

    assert (clean["managed_by"], clean["drift"]) == ("billing", [])
    assert drifted["drift"] == [{"field": "queue", "code": clean["queue"], "now": "hotfix"}]
