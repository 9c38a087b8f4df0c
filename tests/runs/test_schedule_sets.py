"""Applying a declared set (runs/schedule_sets.py): through save_definition and runs.controls, audited, all or nothing."""

import datetime as dt
from unittest import mock

import pytest

from calendars import edits
from calendars.models import Calendar, Window
from jobs import schedules
from jobs.models import AuditEntry, JobDefinition, Tenant
from jobs.quotas import QuotaExceeded
from runs.models import Run
from runs.schedule_sets import apply_set
from tests.fixtures.schedules import days_off, declared, freeze, nightly_export, office, ping, specs


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


# --- calendars and windows declared in the set ------------------------------------------------


def acme_billing(**changes):
    """acme's billing set: the nightly export, the office calendar, the export's days off and the New Year freeze."""
    parts = {
        "jobs": {"billing.export": nightly_export()},
        "calendars": {"office": office()},
        "windows": {"export days off": days_off("billing.export"), "new year freeze": freeze()},
    }
    parts.update(changes)
    return declared(**parts)


def test_it_creates_a_calendar_a_job_and_the_window_naming_both_through_calendars_edits(acme, clock):
    specs, sections = acme_billing()

    with (
        mock.patch.object(edits, "save_calendar", wraps=edits.save_calendar) as calendars_saved,
        mock.patch.object(edits, "save_window", wraps=edits.save_window) as windows_saved,
    ):
        plan = apply_set(acme, specs, **sections, source="billing", actor="cli:ops", now=clock.now)

    window = Window.objects.select_related("job", "calendar").get(name="export days off")
    assert (window.job.name, window.calendar.name, window.kind) == ("billing.export", "office", "calendar")
    assert window.job.tenant == acme and window.calendar.tenant == acme
    assert (calendars_saved.call_count, windows_saved.call_count) == (1, 2), "one door per control"
    assert set(Window.objects.values_list("managed_by", flat=True)) == {"billing"}
    assert Calendar.objects.get(name="office").managed_by == "billing"
    created = AuditEntry.objects.filter(action="create", actor="cli:ops", note="applied from code (set billing)")
    assert created.count() == 4  # the calendar, the job, the two windows
    summary = AuditEntry.objects.get(action="apply_schedules").detail
    assert summary == plan.as_json()
    assert (summary["calendars"]["summary"]["create"], summary["windows"]["summary"]["create"]) == (1, 2)


def test_applying_calendars_and_windows_again_changes_nothing(acme, clock):
    summer = (
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260831\nSUMMARY:Bank holiday\nEND:VEVENT\nEND:VCALENDAR\n"
    )
    specs, sections = acme_billing(calendars={"office": office(ical=summer)})
    apply_set(acme, specs, **sections, actor="test", now=clock.now)
    entries, stamps = AuditEntry.objects.count(), list(Window.objects.values_list("updated_at", flat=True))

    again = apply_set(acme, specs, **sections, actor="test", now=clock.now)

    assert not again.changed and AuditEntry.objects.count() == entries
    assert again.sections["windows"].unchanged == ["export days off", "new year freeze"]
    assert again.sections["calendars"].unchanged == ["office"]
    assert list(Window.objects.values_list("updated_at", flat=True)) == stamps
    assert len(Calendar.objects.get().holidays) == 2, "Christmas, and the bank holiday of its iCalendar text"


def test_it_changes_a_declared_calendar_and_window_field_by_field(acme, clock):
    specs, sections = acme_billing()
    apply_set(acme, specs, **sections, actor="test", now=clock.now)
    new_year = {"name": "New Year", "start": "2027-01-01", "end": "2027-01-02"}
    specs, sections = acme_billing(
        calendars={"office": office(holidays=[*office()["holidays"], new_year])},
        windows={
            "export days off": days_off("billing.export", resume_policy="run_once"),
            "new year freeze": freeze(ends_at="2027-01-03T00:00:00+01:00"),
        },
    )

    plan = apply_set(acme, specs, **sections, actor="test", now=clock.now)

    windows = {c.name: c for c in plan.sections["windows"].changes}
    assert [(f.field, f.before, f.after) for f in windows["new year freeze"].fields] == [
        ("ends_at", "2027-01-01T23:00:00+00:00", "2027-01-02T23:00:00+00:00")
    ]
    assert [(f.field, f.before, f.after) for f in plan.sections["calendars"].changes[0].fields] == [("holidays", 1, 2)]
    assert Window.objects.get(name="export days off").resume_policy == "run_once"
    assert [h["name"] for h in Calendar.objects.get(name="office").holidays] == ["Christmas", "New Year"]
    assert AuditEntry.objects.filter(action="update", object_type="calendars.window").count() == 2


def test_it_disables_windows_no_longer_declared_and_deletes_them_and_calendars_only_with_prune(acme, clock):
    specs, sections = acme_billing()
    apply_set(acme, specs, **sections, source="billing", actor="test", now=clock.now)
    made_by_hand = Window.objects.create(tenant=acme, name="by hand", kind="calendar", calendar=Calendar.objects.get())

    kept = apply_set(acme, specs, source="billing", actor="test", now=clock.now)

    assert [(c.name, c.action) for c in kept.sections["windows"].changes] == [
        ("export days off", "disable"),
        ("new year freeze", "disable"),
    ]
    assert set(Window.objects.filter(managed_by="billing").values_list("enabled", flat=True)) == {False}
    assert Calendar.objects.filter(name="office").exists(), "without prune a calendar no longer declared is kept"
    pruned = apply_set(acme, specs, source="billing", prune=True, actor="test", now=clock.now)

    assert [c.action for c in pruned.sections["windows"].changes] == ["delete", "delete"]
    assert [(c.name, c.action) for c in pruned.sections["calendars"].changes] == [("office", "delete")]
    assert not Calendar.objects.exists() and not Window.objects.exists(), "a calendar goes with the windows using it"
    assert AuditEntry.objects.filter(action="delete", object_id=str(made_by_hand.pk)).exists()
    specs, sections = acme_billing()
    apply_set(acme, specs, **sections, source="billing", actor="test", now=clock.now)
    assert set(Window.objects.values_list("enabled", flat=True)) == {True}


def test_it_writes_nothing_when_one_window_of_the_set_is_invalid(acme, clock):
    specs, sections = acme_billing(windows={"nightly backup": {"kind": "recurring", "cron": "0 25 * * *"}})

    with pytest.raises(schedules.SetInvalid) as refused:
        apply_set(acme, specs, **sections, actor="test", now=clock.now)

    assert [(s, n, p) for s, n, p, _ in refused.value.every()] == [
        ("windows", "nightly backup", "cron"),
        ("windows", "nightly backup", "duration_seconds"),
    ]
    assert not Calendar.objects.exists() and not JobDefinition.objects.exists() and not Window.objects.exists()
    assert not AuditEntry.objects.exists()


def test_another_tenants_calendar_of_the_same_name_is_neither_named_nor_touched(acme, globex, clock, make_job):
    theirs = Calendar.objects.create(tenant=globex, name="office", weekend_days=[5, 6])
    globex_job = make_job(globex, "globex.report")
    specs, sections = acme_billing(
        calendars={}, windows={"export days off": days_off("billing.export"), "theirs": days_off(globex_job.name)}
    )

    with pytest.raises(schedules.SetInvalid) as refused:
        apply_set(acme, specs, **sections, actor="test", now=clock.now)
    specs, sections = acme_billing()
    apply_set(acme, specs, **sections, actor="test", now=clock.now)

    assert [(n, p) for _, n, p, _ in refused.value.every()] == [
        ("export days off", "calendar"),
        ("theirs", "job"),
        ("theirs", "calendar"),
    ]
    theirs.refresh_from_db()
    assert (theirs.weekend_days, theirs.managed_by) == ([5, 6], "")
    assert Window.objects.get(name="export days off").calendar.tenant == acme
