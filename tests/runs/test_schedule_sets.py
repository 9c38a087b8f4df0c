"""Applying a declared set (runs/schedule_sets.py): through save_definition and runs.controls, audited, all or nothing."""

import datetime as dt

import pytest

from jobs import schedules
from jobs.models import AuditEntry, JobDefinition, Tenant
from jobs.quotas import QuotaExceeded
from runs.models import Run
from runs.schedule_sets import apply_set
from tests.fixtures.schedules import nightly_export, ping, specs


def test_it_creates_the_declared_jobs_marked_as_the_sets_and_audits_each_with_its_fields(acme, clock):
    plan = apply_set(
        acme,
        specs(billing_export=nightly_export(), billing_ping=ping()),
        source="billing",
        actor="cli:ops",
        now=clock.now,
    )

    export = JobDefinition.objects.get(name="billing.export")
    assert (export.managed_by, export.applied_spec["queue"], export.next_due_at is not None) == (
        "billing",
        "reports",
        True,
    )
    entry = AuditEntry.objects.get(action="create", object_id=str(export.pk))
    assert entry.actor == "cli:ops" and entry.note == "applied from code (set billing)"
    assert entry.detail["changes"]["schedule.cron"] == {"before": None, "after": "0 2 * * *"}
    summary = AuditEntry.objects.get(action="apply_schedules")
    assert summary.detail["summary"]["create"] == 2 and summary.detail == plan.as_json()


def test_it_is_a_no_op_the_second_time(acme, clock):
    declared = specs(billing_export=nightly_export(), billing_ping=ping())
    apply_set(acme, declared, actor="test", now=clock.now)
    entries = AuditEntry.objects.count()

    again = apply_set(acme, declared, actor="test", now=clock.now)

    assert again.changes == [] and AuditEntry.objects.count() == entries
    assert set(JobDefinition.objects.values_list("version", flat=True)) == {1}


def test_it_writes_nothing_when_one_job_of_the_set_is_invalid(acme, clock):
    bad = specs(billing_export=nightly_export(), billing_ping=ping(schedule={"kind": "cron", "cron": "*/5 * * *"}))

    with pytest.raises(schedules.SetInvalid):
        apply_set(acme, bad, actor="test", now=clock.now)

    assert not JobDefinition.objects.exists() and not AuditEntry.objects.exists()


def test_it_writes_nothing_past_the_tenants_definitions_quota(acme, clock):
    Tenant.objects.filter(pk=acme.pk).update(max_definitions=1)
    acme.refresh_from_db()

    with pytest.raises(QuotaExceeded):
        apply_set(acme, specs(billing_export=nightly_export(), billing_ping=ping()), actor="test", now=clock.now)

    assert not JobDefinition.objects.exists()


def test_it_reverts_a_portal_edit_and_pauses_then_resumes_through_the_controls(acme, clock):
    apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now)
    JobDefinition.objects.filter(name="billing.ping").update(queue="batch")  # an edit outside the set

    apply_set(acme, specs(billing_ping=ping(paused=True)), actor="test", now=clock.now)
    job = JobDefinition.objects.get(name="billing.ping")
    assert (job.queue, job.status) == ("default", "paused")
    assert AuditEntry.objects.filter(action="pause", object_id=str(job.pk)).exists()  # runs.controls audited it

    later = clock.advance(hours=1)
    apply_set(acme, specs(billing_ping=ping()), actor="test", now=later)
    job.refresh_from_db()
    assert job.status == "active" and job.next_due_at > later
    (passed_over,) = Run.objects.filter(job=job, state="skipped")  # as a resume in the portal records it
    assert "passed over while the job was paused" in passed_over.reason


def test_it_pauses_an_undeclared_job_and_deletes_it_with_prune_cancelling_its_runs(acme, clock, make_run):
    apply_set(acme, specs(billing_export=nightly_export(), billing_ping=ping()), actor="test", now=clock.now)
    export = JobDefinition.objects.get(name="billing.export")
    waiting = make_run(export, due_at=clock.ahead(hours=1))

    apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now)
    assert JobDefinition.objects.get(pk=export.pk).status == "paused"
    assert schedules.drift(JobDefinition.objects.get(pk=export.pk)) == []  # paused by the set: no drift

    apply_set(acme, specs(billing_ping=ping()), prune=True, actor="test", now=clock.now)
    assert JobDefinition.objects.get(pk=export.pk).status == "cancelled"
    assert Run.objects.get(pk=waiting.pk).state == "cancelled"


def test_it_revives_a_job_of_the_set_deleted_in_the_portal(acme, clock):
    from runs import controls

    apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now)
    controls.delete(JobDefinition.objects.get(name="billing.ping"), actor="user:alice")

    plan = apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now + dt.timedelta(minutes=1))

    assert [(c.action, c.reason) for c in plan.changes] == [("create", "revives the deleted job")]
    assert JobDefinition.objects.get(name="billing.ping").status == "active"
