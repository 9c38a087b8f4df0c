"""Acme's billing service applies its declared jobs with PUT /v1/schedules (a team token)."""

from calendars.models import Calendar, Window
from jobs.models import AuditEntry, JobDefinition
from tests.fixtures.api import assert_problem
from tests.fixtures.schedules import days_off, freeze, nightly_export, office, ping

SET = {"source": "billing", "jobs": {"billing.export": nightly_export(), "billing.ping": ping()}}


def test_it_shows_the_plan_on_a_dry_run_then_applies_it_and_is_idempotent(api, acme_team):
    dry = api.put("/v1/schedules?dry_run=1", token=acme_team, json=SET)
    assert dry.status_code == 200, dry.text
    assert dry.json()["applied"] is False and dry.json()["summary"]["create"] == 2
    assert not JobDefinition.objects.exists()

    applied = api.put("/v1/schedules", token=acme_team, json=SET)
    again = api.put("/v1/schedules", token=acme_team, json=SET)

    assert applied.json()["applied"] is True
    assert [c["action"] for c in applied.json()["changes"]] == ["create", "create"]
    assert again.json()["changes"] == [] and again.json()["unchanged"] == ["billing.export", "billing.ping"]
    assert set(JobDefinition.objects.values_list("managed_by", flat=True)) == {"billing"}
    assert AuditEntry.objects.filter(action="apply_schedules").count() == 1


def test_it_reports_every_bad_field_of_the_set_by_its_path_and_writes_nothing(api, acme_team):
    body = {
        "jobs": {
            "billing.export": nightly_export(schedule={"kind": "cron", "cron": "61 2 * * *"}),
            "billing.ping": ping(queu="reports"),
        }
    }
    problem = assert_problem(api.put("/v1/schedules", token=acme_team, json=body), 400, "validation-error")
    rules = assert_problem(
        api.put("/v1/schedules", token=acme_team, json={"jobs": {"billing.export": body["jobs"]["billing.export"]}}),
        400,
        "invalid-schedule",
    )

    assert [(e["field"], e["pointer"]) for e in problem["errors"]] == [
        ("jobs.billing.ping.queu", "#/jobs/billing.ping/queu")
    ]
    assert rules["errors"][0]["field"] == "jobs.billing.export.schedule.cron"
    assert rules["errors"][0]["pointer"] == "#/jobs/billing.export/schedule/cron"
    flag = assert_problem(api.put("/v1/schedules?dry_run=yes", token=acme_team, json=SET), 400, "validation-error")
    assert flag["errors"][0]["field"] == "dry_run"
    assert not JobDefinition.objects.exists()


def test_it_prunes_only_with_prune_and_only_the_sets_own_jobs(api, acme_team, globex_team):
    api.put("/v1/schedules", token=acme_team, json=SET)
    api.put("/v1/schedules", token=globex_team, json=SET)  # globex has jobs of the same names: its own
    api.put("/v1/jobs/billing.manual", token=acme_team, json=ping())  # made outside the set

    kept = api.put("/v1/schedules", token=acme_team, json={"source": "billing", "jobs": {}})
    pruned = api.put("/v1/schedules?prune=1", token=acme_team, json={"source": "billing", "jobs": {}})

    assert [(c["action"], c["job"]) for c in kept.json()["changes"]] == [
        ("pause", "billing.export"),
        ("pause", "billing.ping"),
    ]
    assert [c["action"] for c in pruned.json()["changes"]] == ["delete", "delete"]
    assert JobDefinition.objects.get(tenant__name="acme", name="billing.manual").status == "active"
    assert set(JobDefinition.objects.filter(tenant__name="globex").values_list("status", flat=True)) == {"active"}


def test_an_apply_with_a_stale_if_match_is_refused_and_writes_nothing(api, acme_team):
    planned = api.put("/v1/schedules?dry_run=1", token=acme_team, json=SET)
    tag = planned.headers["ETag"]
    first = api.put("/v1/schedules", token=acme_team, json=SET, headers={"If-Match": tag})
    assert first.status_code == 200 and first.headers["ETag"] != tag, "an apply that changed the set moves its tag"

    JobDefinition.objects.filter(name="billing.ping").update(status="paused")  # a portal pause meanwhile
    changed = {**SET, "jobs": {**SET["jobs"], "billing.ping": {**ping(), "queue": "pings"}}}
    stale = api.put("/v1/schedules", token=acme_team, json=changed, headers={"If-Match": first.headers["ETag"]})
    garbled = api.put("/v1/schedules", token=acme_team, json=changed, headers={"If-Match": "set-1"})

    assert_problem(stale, 412, "precondition-failed")
    assert_problem(garbled, 400, "validation-error")
    assert JobDefinition.objects.get(name="billing.ping").queue != "pings", "nothing was written"
    fresh = api.put("/v1/schedules?dry_run=1", token=acme_team, json=changed).headers["ETag"]
    assert api.put("/v1/schedules", token=acme_team, json=changed, headers={"If-Match": fresh}).status_code == 200


BILLING = {
    "source": "billing",
    "jobs": {"billing.export": nightly_export()},
    "calendars": {"office": office()},
    "windows": {"export days off": days_off("billing.export"), "new year freeze": freeze()},
}


def test_it_applies_calendars_and_windows_declared_with_the_jobs_and_is_idempotent(api, acme_team):
    dry = api.put("/v1/schedules?dry_run=1", token=acme_team, json=BILLING)
    assert dry.status_code == 200, dry.text
    assert dry.json()["calendars"]["summary"]["create"] == 1 and dry.json()["windows"]["summary"]["create"] == 2
    assert not Window.objects.exists() and not Calendar.objects.exists()

    applied = api.put("/v1/schedules", token=acme_team, json=BILLING, headers={"If-Match": dry.headers["ETag"]})
    again = api.put("/v1/schedules", token=acme_team, json=BILLING)

    assert applied.status_code == 200, applied.text
    assert [(c["name"], c["action"]) for c in applied.json()["windows"]["changes"]] == [
        ("export days off", "create"),
        ("new year freeze", "create"),
    ]
    assert again.json()["windows"]["changes"] == [] and again.json()["calendars"]["unchanged"] == ["office"]
    window = api.get(f"/v1/windows/{Window.objects.get(name='export days off').pk}", token=acme_team).json()
    assert (window["job"], window["calendar"], window["kind"]) == ("billing.export", "office", "calendar")


def test_an_edit_to_a_window_of_the_set_moves_its_etag(api, acme_team):
    tag = api.put("/v1/schedules", token=acme_team, json=BILLING).headers["ETag"]
    freeze_id = Window.objects.get(name="new year freeze").pk
    edited = api.put(f"/v1/windows/{freeze_id}", token=acme_team, json={"name": "new year freeze", **freeze(note="x")})
    assert edited.status_code == 200, edited.text

    stale = api.put("/v1/schedules", token=acme_team, json=BILLING, headers={"If-Match": tag})

    assert_problem(stale, 412, "precondition-failed")
    assert Window.objects.get(pk=freeze_id).note == "x", "nothing was written"


def test_it_names_the_section_name_and_field_of_each_bad_calendar_or_window_and_writes_nothing(api, acme_team):
    typo = {**BILLING, "windows": {"new year freeze": {**freeze(), "nmae": "freeze"}}}
    shape = {**BILLING, "windows": {"new year freeze": freeze(starts_at="New Year's Eve")}}
    rules = {
        **BILLING,
        "calendars": {"office": office(time_zone="Mars/Olympus_Mons")},
        "windows": {"nightly backup": {"kind": "recurring", "cron": "0 25 * * *", "duration_seconds": 600}},
    }

    answers = [api.put("/v1/schedules", token=acme_team, json=body) for body in (typo, shape, rules)]

    fields = [
        [(e["field"], e["pointer"]) for e in assert_problem(a, 400, "validation-error")["errors"]] for a in answers
    ]
    assert fields == [
        [("windows.new year freeze.nmae", "#/windows/new year freeze/nmae")],
        [("windows.new year freeze.starts_at", "#/windows/new year freeze/starts_at")],
        [
            ("calendars.office.time_zone", "#/calendars/office/time_zone"),
            ("windows.nightly backup.cron", "#/windows/nightly backup/cron"),
        ],
    ]
    assert not JobDefinition.objects.exists() and not Calendar.objects.exists() and not Window.objects.exists()


def test_a_window_cannot_name_another_tenants_calendar(api, acme_team, globex):
    Calendar.objects.create(tenant=globex, name="office")
    body = {"jobs": {}, "windows": {"office days off": days_off(None)}}

    problem = assert_problem(api.put("/v1/schedules", token=acme_team, json=body), 400, "validation-error")

    assert [(e["field"], e["detail"]) for e in problem["errors"]] == [
        ("windows.office days off.calendar", "no calendar named 'office' in this tenant (declare it in the set)")
    ]
