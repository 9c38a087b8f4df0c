"""Schedules as code, the plan and the drift (jobs/schedules.py): what an apply would do, field by field.

Acme's billing team declares its jobs; runs.schedule_sets writes the plans (tests/runs/test_schedule_sets.py). The clock is pinned.
"""

import datetime as dt
import tomllib

import pytest

from jobs import schedules
from jobs.api.schedules import ScheduleSetSerializer, declared_specs, jsonable
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs.schedule_sets import apply_set
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


# --------------------------------------------------------------- every, bounds, remaining_runs

PULSE_TOML = """
[jobs."billing.pulse"]
schedule = { kind = "every", every_seconds = 90, start_at = 2026-06-01T10:59:00+02:00, end_at = 2026-06-02T00:00:00Z, remaining_runs = 3, jitter_seconds = 0 }
target = { kind = "external" }
"""


def pulse_set(text=PULSE_TOML):
    serializer = ScheduleSetSerializer(data=jsonable(tomllib.loads(text)))
    assert serializer.is_valid(), serializer.errors
    return declared_specs(serializer.validated_data)


def test_it_applies_an_every_job_with_bounds_and_a_count_from_toml(acme, clock):
    apply_set(acme, pulse_set(), actor="test", now=clock.now)
    job = JobDefinition.objects.get(name="billing.pulse")
    assert (job.schedule_kind, job.every_seconds, job.remaining_runs) == ("every", 90, 3)
    assert job.start_at.isoformat() == "2026-06-01T08:59:00+00:00"
    assert job.next_due_at == job.start_at + dt.timedelta(seconds=90)  # the first period after the apply (09:00)
    text = schedules.declaration(job)
    assert "every_seconds = 90" in text and 'start_at = "2026-06-01T08:59:00+00:00"' in text
    assert (
        pulse_set(text.replace("[jobs.billing.pulse]", '[jobs."billing.pulse"]'))["billing.pulse"]
        == pulse_set()["billing.pulse"]
    )


def test_reapplying_the_same_count_leaves_the_live_count_alone_and_is_no_drift(acme, clock):
    from runs import materialize

    declared = pulse_set()
    apply_set(acme, declared, actor="test", now=clock.now)
    materialize.materialize(clock.now, lookahead=150)  # two runs scheduled: one left
    job = JobDefinition.objects.get(name="billing.pulse")
    assert job.remaining_runs == 1
    assert schedules.drift(job) == []  # the count goes down by itself: not an edit

    plan = schedules.plan(acme, declared, now=clock.now)
    assert plan.changes == [] and plan.unchanged == ["billing.pulse"]
    apply_set(acme, declared, actor="test", now=clock.now)
    job.refresh_from_db()
    assert job.remaining_runs == 1


def test_declaring_another_count_sets_the_live_count_to_it(acme, clock):
    from runs import materialize

    apply_set(acme, pulse_set(), actor="test", now=clock.now)
    materialize.materialize(clock.now, lookahead=150)
    more = pulse_set(PULSE_TOML.replace("remaining_runs = 3", "remaining_runs = 5"))

    (change,) = schedules.plan(acme, more, now=clock.now).changes
    assert [(f.field, f.before, f.after) for f in change.fields] == [("schedule.remaining_runs", 1, 5)]
    apply_set(acme, more, actor="test", now=clock.now)
    assert JobDefinition.objects.get(name="billing.pulse").remaining_runs == 5
    assert schedules.plan(acme, more, now=clock.now).changes == []


def test_a_set_with_an_end_before_its_start_writes_nothing_and_names_the_field(acme, clock):
    bad = pulse_set(PULSE_TOML.replace("end_at = 2026-06-02T00:00:00Z", "end_at = 2026-05-01T00:00:00Z"))
    with pytest.raises(schedules.SetInvalid) as refused:
        schedules.plan(acme, bad, now=clock.now)
    assert [(name, path) for name, path, _ in refused.value.errors] == [("billing.pulse", "schedule.end_at")]
