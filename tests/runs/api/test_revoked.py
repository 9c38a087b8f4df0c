"""Alice's token asks to run a job whose module prefix a superuser took from acme: 403 permission-revoked."""

import pytest

from dlq.models import DeadLetter
from jobs.models import JobDefinition, Tenant
from runs.models import Run
from tests.fixtures.api import assert_problem


@pytest.fixture
def export(acme, make_job):
    return make_job(acme, "billing.export", cron_expr="0 2 * * *", time_zone="UTC", overlap_policy="allow")


def revoke(acme):
    Tenant.objects.filter(pk=acme.pk).update(task_module_prefixes="")


def assert_revoked(response):
    detail = assert_problem(response, 403, "permission-revoked")["detail"]
    assert detail.startswith("billing.export: permission revoked: tenant 'acme' may no longer run tasks from")
    assert "'tests.handlers'" in detail and "allowed module prefixes now: none" in detail


def test_trigger_runs_and_backfill_are_refused_and_create_nothing(api, acme, acme_team, export):
    revoke(acme)

    assert_revoked(api.post("/v1/jobs/billing.export:trigger", token=acme_team, json={}))
    assert_revoked(api.post("/v1/jobs/billing.export/runs", token=acme_team, json={"delay_seconds": 60}))
    backfill = {"start": "2026-05-01T00:00:00Z", "end": "2026-05-03T00:00:00Z"}
    assert_revoked(api.post("/v1/jobs/billing.export:backfill", token=acme_team, json=backfill))
    assert not Run.objects.exists()


def test_resume_is_refused_and_the_job_stays_paused(api, acme, acme_team, export):
    assert api.post("/v1/jobs/billing.export:pause", token=acme_team, json={}).status_code == 200
    revoke(acme)

    assert_revoked(api.post("/v1/jobs/billing.export:resume", token=acme_team, json={}))
    assert JobDefinition.objects.get(pk=export.pk).status == "paused"


def test_replay_is_refused_and_the_letter_stays_open(api, acme, acme_team, export, make_dead_letter):
    letter = make_dead_letter(export)
    revoke(acme)

    assert_revoked(api.post(f"/v1/dlq/{letter.pk}:replay", token=acme_team, json={}))
    letter.refresh_from_db()
    assert letter.is_open and Run.objects.get(pk=letter.run_id).state == "dead"


def test_the_same_calls_work_again_once_the_prefix_is_granted_again(api, acme, acme_team, export):
    revoke(acme)
    Tenant.objects.filter(pk=acme.pk).update(task_module_prefixes="tests")

    assert api.post("/v1/jobs/billing.export:trigger", token=acme_team, json={}).status_code == 201
    assert DeadLetter.objects.count() == 0 and Run.objects.count() == 1
