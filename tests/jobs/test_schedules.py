"""Schedules as code, the plan and the drift (jobs/schedules.py): what an apply would do, field by field.

Acme's billing team declares its jobs; runs.apply writes the plans (tests/runs/test_apply.py). The clock is pinned.
"""

import tomllib

import pytest

from jobs import schedules
from jobs.api.schedules import ScheduleSetSerializer, declared_specs, jsonable
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs.apply import apply_set
from tests.fixtures.schedules import nightly_export, ping, specs


def actions(plan):
    return [(c.action, c.job) for c in plan.in_order()]


def test_it_plans_every_new_job_as_a_create_with_its_fields(acme, clock):
    plan = schedules.plan(acme, specs(billing_export=nightly_export(), billing_ping=ping()), now=clock.now)

    assert actions(plan) == [("create", "billing.export"), ("create", "billing.ping")]
    fields = {f.field: f.after for f in plan.changes[0].fields}
    assert fields["schedule.cron"] == "0 2 * * *" and fields["queue"] == "reports"
    assert fields["schedule.jitter_seconds"] == 300  # not stated: Duetime's default
    assert not JobDefinition.objects.exists()  # a plan writes nothing


def test_it_plans_nothing_once_applied(acme, clock):
    declared = specs(billing_export=nightly_export(), billing_ping=ping())
    apply_set(acme, declared, actor="test", now=clock.now)

    plan = schedules.plan(acme, declared, now=clock.now)

    assert plan.changes == [] and plan.unchanged == ["billing.export", "billing.ping"]


def test_it_plans_a_change_field_by_field_and_marks_the_portal_edits_it_reverts(acme, clock):
    apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now)
    job = JobDefinition.objects.get(name="billing.ping")
    job.queue = "batch"  # Alice moved it in the portal
    save_definition(job, "user:alice", now=clock.now)

    plan = schedules.plan(acme, specs(billing_ping=ping(timeout_seconds=60)), now=clock.now)

    (change,) = plan.changes
    assert change.action == "change"
    assert [(f.field, f.before, f.after, f.reverts_portal_edit) for f in change.fields] == [
        ("queue", "batch", "default", True),
        ("timeout_seconds", 900, 60, False),
    ]


def test_it_pauses_a_job_no_longer_declared_and_deletes_it_with_prune(acme, clock):
    apply_set(acme, specs(billing_export=nightly_export(), billing_ping=ping()), actor="test", now=clock.now)
    left = specs(billing_ping=ping())

    assert actions(schedules.plan(acme, left, now=clock.now)) == [("pause", "billing.export")]
    assert actions(schedules.plan(acme, left, prune=True, now=clock.now)) == [("delete", "billing.export")]


def test_it_pauses_and_resumes_what_is_declared_paused_or_not(acme, clock):
    apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now)

    paused = schedules.plan(acme, specs(billing_ping=ping(paused=True)), now=clock.now)
    JobDefinition.objects.filter(name="billing.ping").update(status="paused")  # paused in the portal meanwhile
    resumed = schedules.plan(acme, specs(billing_ping=ping()), now=clock.now)

    assert actions(paused) == [("pause", "billing.ping")]
    assert actions(resumed) == [("resume", "billing.ping")]
    assert resumed.changes[0].fields[0].reverts_portal_edit


def test_it_adopts_a_job_made_outside_the_set_and_leaves_other_jobs_alone(acme, clock, make_job):
    make_job(acme, "billing.ping", cron_expr="*/5 * * * *")  # made in the portal
    make_job(acme, "billing.other")  # not declared, not of the set: never touched

    plan = schedules.plan(acme, specs(billing_ping=ping()), now=clock.now)

    assert actions(plan) == [("adopt", "billing.ping")]


def test_it_refuses_a_job_of_another_set(acme, clock):
    apply_set(acme, specs(billing_ping=ping()), source="payments", actor="test", now=clock.now)

    with pytest.raises(schedules.SetInvalid) as refused:
        schedules.plan(acme, specs(billing_ping=ping()), source="billing", now=clock.now)

    assert "belongs to the set 'payments'" in str(refused.value)


def test_it_lists_every_invalid_job_and_field_at_once(acme, clock):
    bad = specs(
        billing_export=nightly_export(schedule={"kind": "cron", "cron": "61 2 * * *"}),
        billing_ping=ping(target={"kind": "python", "ref": "not_registered.tasks.ping"}),
        billing_fine=ping(),
    )

    with pytest.raises(schedules.SetInvalid) as refused:
        schedules.plan(acme, bad, now=clock.now)

    assert [(name, path) for name, path, _ in refused.value.errors] == [
        ("billing.export", "schedule.cron"),
        ("billing.ping", "target.ref"),
    ]


def test_it_shows_drift_field_by_field_until_adopted(acme, clock):
    apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now)
    job = JobDefinition.objects.get(name="billing.ping")
    job.cron_expr, job.max_attempts = "*/15 * * * *", 9
    save_definition(job, "user:alice", now=clock.now)

    assert [(d.field, d.code, d.portal) for d in schedules.drift(job)] == [
        ("schedule.cron", "*/5 * * * *", "*/15 * * * *"),
        ("retry.max_attempts", 5, 9),
    ]
    assert schedules.drifted_ids(JobDefinition.objects.all()) == [job.pk]

    assert schedules.adopt([job], actor="user:alice") == [job]
    job.refresh_from_db()
    assert schedules.drift(job) == [] and schedules.drifted_ids(JobDefinition.objects.all()) == []


def test_it_prints_a_declaration_that_reads_back_as_the_same_job(acme, clock):
    declared = specs(billing_export=nightly_export(priority="critical", concurrency=2, paused=True))
    apply_set(acme, declared, actor="test", now=clock.now)
    job = JobDefinition.objects.get(name="billing.export")

    text = schedules.declaration(job)

    serializer = ScheduleSetSerializer(data=jsonable(tomllib.loads(text)))
    assert serializer.is_valid(), (text, serializer.errors)
    again = declared_specs(serializer.validated_data)["billing.export"]
    expected = {**declared["billing.export"], "jitter_seconds": None}  # Duetime's choice is left to Duetime
    assert again == expected
    assert "paused = true" in text and 'priority = "critical"' in text


def test_it_says_a_payload_with_a_null_cannot_be_written_in_toml(acme, make_job):
    job = make_job(acme, "billing.null", payload={"since": None})
    with pytest.raises(ValueError, match="TOML has no null"):
        schedules.declaration(job)
