"""Alice keeps acme's maintenance windows and calendars over the API, as she does in the portal."""

import pytest

from calendars.models import Calendar, Window
from jobs.models import AuditEntry
from tests.calendars.test_ical import UK_BANK_HOLIDAYS
from tests.fixtures.api import assert_problem, issue, nightly

ICS = UK_BANK_HOLIDAYS.decode()  # the iCalendar tests' own file (tests/calendars/test_ical.py)

FREEZE = {
    "name": "year-end freeze",
    "kind": "one_off",
    "starts_at": "2026-12-20T00:00:00Z",
    "ends_at": "2027-01-04T00:00:00Z",
    "resume_policy": "run_once",
}


@pytest.fixture
def nightly_job(api, acme_team):
    api.put("/v1/jobs/billing.nightly", token=acme_team, json=nightly())


def test_it_adds_reads_replaces_and_deletes_a_window_each_audited(api, acme_team, nightly_job):
    created = api.post("/v1/windows", token=acme_team, json={**FREEZE, "job": "billing.nightly"})
    assert created.status_code == 201, created.text
    window = created.json()
    assert (window["job"], window["kind"], window["resume_policy"]) == ("billing.nightly", "one_off", "run_once")

    listed = api.get("/v1/windows", token=acme_team).json()["results"]
    replaced = api.put(f"/v1/windows/{window['id']}", token=acme_team, json={**FREEZE, "resume_policy": "skip"})
    gone = api.delete(f"/v1/windows/{window['id']}", token=acme_team)

    assert [w["id"] for w in listed] == [window["id"]]
    assert replaced.json()["job"] is None and replaced.json()["resume_policy"] == "skip"
    assert gone.status_code == 204 and not Window.objects.exists()
    actions = list(
        AuditEntry.objects.filter(object_type="calendars.window").order_by("id").values_list("action", flat=True)
    )
    assert actions == ["create", "update", "delete"]


def test_a_bad_window_is_a_problem_naming_its_field(api, acme_team, globex, nightly_job):
    backwards = api.post("/v1/windows", token=acme_team, json={**FREEZE, "ends_at": "2026-12-01T00:00:00Z"})
    bad_cron = api.post(
        "/v1/windows", token=acme_team, json={"name": "nightly", "kind": "recurring", "cron": "61 * * * *"}
    )
    their_job = api.post("/v1/windows", token=acme_team, json={**FREEZE, "job": "globex.only"})

    assert assert_problem(backwards, 400, "validation-error")["errors"][0]["field"] == "ends_at"
    assert {e["field"] for e in assert_problem(bad_cron, 400, "validation-error")["errors"]} >= {"cron"}
    assert "no job named" in assert_problem(their_job, 400, "validation-error")["detail"]
    assert not Window.objects.exists()


def test_it_keeps_a_calendar_and_imports_holidays_from_ical(api, acme_team):
    created = api.put(
        "/v1/calendars/uk-office",
        token=acme_team,
        json={"time_zone": "Europe/London", "weekend_days": [6, 7], "holidays": []},
    )
    imported = api.post("/v1/calendars/uk-office:import", token=acme_team, json={"ical": ICS})
    again = api.post("/v1/calendars/uk-office:import", token=acme_team, json={"ical": ICS})
    window = api.post(
        "/v1/windows", token=acme_team, json={"name": "days off", "kind": "calendar", "calendar": "uk-office"}
    )

    assert created.status_code == 201, created.text
    names = [h["name"] for h in imported.json()["holidays"]]
    assert "Christmas Day and Boxing Day" in names and "New Year's Day" in names
    assert len(again.json()["holidays"]) == len(names), "importing the same file twice adds nothing"
    assert window.status_code == 201 and window.json()["calendar"] == "uk-office"
    assert_problem(
        api.post("/v1/calendars/uk-office:import", token=acme_team, json={"ical": "nope"}), 400, "validation-error"
    )

    assert api.delete("/v1/calendars/uk-office", token=acme_team).status_code == 204
    assert not Calendar.objects.exists() and not Window.objects.exists(), "its windows go with it"


def test_another_tenants_windows_and_calendars_answer_404(api, globex, acme_team):
    theirs = Window.objects.create(
        tenant=globex, name="theirs", kind="one_off", starts_at="2026-12-20T00:00:00Z", ends_at="2026-12-21T00:00:00Z"
    )
    Calendar.objects.create(tenant=globex, name="theirs")
    assert_problem(api.get(f"/v1/windows/{theirs.pk}", token=acme_team), 404, "not-found")
    assert_problem(api.delete(f"/v1/windows/{theirs.pk}", token=acme_team), 404, "not-found")
    assert_problem(api.get("/v1/calendars/theirs", token=acme_team), 404, "not-found")
    assert Window.objects.filter(pk=theirs.pk).exists()


def test_an_operator_reads_windows_but_may_not_edit_them(api, acme):
    operator = issue(acme, "team", role="operator")
    assert api.get("/v1/windows", token=operator).status_code == 200
    assert_problem(api.post("/v1/windows", token=operator, json=FREEZE), 403, "insufficient-role")
