"""Acme's billing service applies its declared jobs with PUT /v1/schedules (a team token)."""

from jobs.models import AuditEntry, JobDefinition
from tests.fixtures.api import assert_problem
from tests.fixtures.schedules import nightly_export, ping

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
