"""Operator controls, one job or many: pause, resume, delete, trigger, cancel, replay, discard.

Each is written once, set-based; the one-job forms call it with one job, so
both are checked here through the same stories.
"""

import datetime as dt

import pytest

from dlq.models import DeadLetter
from jobs.models import AuditEntry, JobDefinition, Tenant
from jobs.quotas import QuotaExceeded
from runs import claims, controls, materialize
from runs.enqueue import Quota
from runs.models import Run
from tests.conftest import NOW

pytestmark = pytest.mark.django_db


def minutes(n):
    return dt.timedelta(minutes=n)


def skipped(job):
    return list(Run.objects.filter(job=job, state="skipped").order_by("due_at"))


def audited(action):
    return list(AuditEntry.objects.filter(action=action).values_list("object_id", flat=True))


def test_it_explains_occurrences_passed_over_while_paused(every_minute):
    controls.pause(every_minute, actor="user:alice")
    assert materialize.materialize(NOW + minutes(30), lookahead=60).jobs == 0
    controls.resume(every_minute, actor="user:alice", now=NOW + minutes(30) + dt.timedelta(seconds=5))
    (summary,) = skipped(every_minute)
    assert "paused" in summary.reason and "31 occurrences" in summary.reason
    every_minute.refresh_from_db()
    assert every_minute.next_due_at == NOW + minutes(31)


def test_it_pauses_an_active_job_once(every_minute):
    assert controls.pause(every_minute, actor="user:alice", note="maintenance")
    assert every_minute.status == "paused"
    assert not controls.pause(every_minute, actor="user:alice"), "already paused"
    assert audited("pause") == [str(every_minute.pk)]
    assert AuditEntry.objects.get(action="pause").note == "maintenance"


def test_it_resumes_only_a_paused_job(every_minute):
    assert not controls.resume(every_minute, actor="user:alice", now=NOW)
    controls.pause(every_minute, actor="user:alice")
    assert controls.resume(every_minute, actor="user:alice", now=NOW)
    assert every_minute.status == "active"
    assert audited("resume") == [str(every_minute.pk)]


def test_it_cancels_future_runs_when_a_job_is_deleted(every_minute):
    materialize.materialize(NOW, lookahead=120)
    assert controls.delete(every_minute, actor="user:alice") == 3
    assert set(Run.objects.filter(job=every_minute).values_list("state", flat=True)) == {"cancelled"}
    every_minute.refresh_from_db()
    assert every_minute.status == "cancelled" and every_minute.next_due_at is None
    assert AuditEntry.objects.get(action="delete").detail == {"cancelled_runs": 3}


def test_it_leaves_a_running_run_of_a_deleted_job_to_finish(acme, make_job, make_run):
    job = make_job(acme, "report")
    running = make_run(job, state="leased", due_at=NOW)
    waiting = make_run(job, due_at=NOW + minutes(5))
    assert controls.delete(job, actor="user:alice") == 1
    running.refresh_from_db()
    waiting.refresh_from_db()
    assert (running.state, waiting.state, waiting.reason) == ("leased", "cancelled", "job deleted")


def test_it_pauses_resumes_and_deletes_many_jobs_at_once(acme, make_job):
    jobs = [make_job(acme, f"batch.{i}", cron_expr="*/5 * * * *") for i in range(3)]
    selected = JobDefinition.objects.filter(pk__in=[job.pk for job in jobs])
    controls.pause(jobs[0], actor="user:alice")

    assert {job.pk for job in controls.pause_many(selected, actor="user:alice")} == {jobs[1].pk, jobs[2].pk}
    assert len(controls.resume_many(selected, actor="user:alice", now=NOW)) == 3
    deleted, cancelled = controls.delete_many(selected, actor="user:alice", now=NOW)

    assert len(deleted) == 3 and cancelled == 0
    assert set(selected.values_list("status", flat=True)) == {"cancelled"}
    assert len(audited("pause")) == 3 and len(audited("resume")) == 3 and len(audited("delete")) == 3
    assert controls.delete_many(selected, actor="user:alice", now=NOW) == ([], 0), "a cancelled job stays as it is"


def test_it_triggers_each_live_job_once_and_audits_each_run(acme, make_job):
    live, cancelled = make_job(acme, "live"), make_job(acme, "gone", status="cancelled")
    runs = controls.trigger_many(JobDefinition.objects.all(), actor="user:alice", note="catch up", now=NOW)
    (run,) = runs
    assert (run.job_id, run.origin, run.due_at, run.state) == (live.pk, "trigger", NOW, "scheduled")
    entry = AuditEntry.objects.get(action="trigger")
    assert (entry.object_id, entry.detail, entry.note) == (
        str(live.pk),
        {"run": run.pk, "due_at": NOW.isoformat()},
        "catch up",
    )
    assert not Run.objects.filter(job=cancelled).exists()


def test_it_cancels_waiting_and_running_runs_and_leaves_finished_ones(acme, make_job, make_run):
    job = make_job(acme, "report", overlap_policy="allow")
    waiting = make_run(job, due_at=NOW)
    running = make_run(job, state="leased", due_at=NOW + minutes(1))
    done = make_run(job, state="succeeded", due_at=NOW + minutes(2))

    cancelled = controls.cancel_runs(Run.objects.all(), actor="user:alice", reason="not needed", now=NOW)

    assert {run.pk for run in cancelled} == {waiting.pk, running.pk}
    assert dict(Run.objects.values_list("pk", "state")) == {
        waiting.pk: "cancelled",
        running.pk: "cancelled",
        done.pk: "succeeded",
    }
    assert running.attempts.get().outcome == "stale"
    assert len(audited("cancel")) == 2


def test_it_replays_and_discards_dead_letters_with_an_audit_entry_each(acme, make_job, make_run):
    job = make_job(acme, "report", overlap_policy="allow")
    letters = []
    for i in range(2):
        run = make_run(job, state="dead", due_at=NOW + minutes(i))
        letters.append(DeadLetter.objects.create(run=run, job=job, tenant=acme, last_error="boom", dead_at=NOW))

    (replayed,) = controls.replay_many(DeadLetter.objects.filter(pk=letters[0].pk), actor="user:alice", now=NOW)
    discarded = controls.discard_many(DeadLetter.objects.all(), actor="user:alice", now=NOW)

    assert replayed.pk == letters[0].pk and [d.pk for d in discarded] == [letters[1].pk]
    assert Run.objects.get(pk=letters[0].run_id).state == "scheduled"
    assert Run.objects.get(pk=letters[1].run_id).state == "dead", "a discarded run stays dead"
    assert audited("replay") == [str(letters[0].pk)] and audited("discard") == [str(letters[1].pk)]


def test_it_triggers_nothing_when_the_tenant_is_at_its_pending_quota(acme, make_job, make_run):
    job = make_job(acme, "live")
    make_run(job, due_at=NOW)
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=1)
    with pytest.raises(QuotaExceeded) as refused:
        controls.trigger_many(JobDefinition.objects.all(), actor="user:alice", now=NOW, quota=Quota.ENQUEUE)
    assert refused.value.quota == "max_pending_runs"
    assert not Run.objects.filter(origin="trigger").exists() and not AuditEntry.objects.filter(action="trigger")


def test_it_counts_the_portals_triggers_against_the_enqueue_rate(acme, make_job):
    make_job(acme, "one"), make_job(acme, "two")
    Tenant.objects.filter(pk=acme.pk).update(enqueue_rate_per_minute=2)
    controls.trigger_many(JobDefinition.objects.all(), actor="user:alice", now=NOW, quota=Quota.ENQUEUE)
    with pytest.raises(QuotaExceeded) as refused:
        controls.trigger_many(JobDefinition.objects.all(), actor="user:alice", now=NOW, quota=Quota.ENQUEUE)
    assert refused.value.quota == "enqueue_rate_per_minute"


def test_it_pauses_a_tenant_once_so_nothing_is_materialised_or_claimed_and_audits_it(acme, every_minute, make_run):
    waiting = make_run(every_minute, due_at=NOW)
    assert controls.pause_tenant(acme, actor="user:alice", note="database upgrade", now=NOW)
    assert not controls.pause_tenant(acme, actor="user:alice", now=NOW), "already paused"

    assert acme.paused_at == NOW
    assert materialize.materialize(NOW + minutes(30), lookahead=60).jobs == 0
    assert claims.claim(["default"], 10, "w", now=NOW + minutes(30)) == []
    Run.objects.get(pk=waiting.pk, state="scheduled")  # it waits, unclaimed, until the resume
    entry = AuditEntry.objects.get(action="pause", object_type="jobs.tenant")
    assert (entry.object_id, entry.note, entry.detail) == (str(acme.pk), "database upgrade", {"queue": None})


def test_it_resumes_a_tenant_recording_what_each_job_passed_over_like_a_job_resume(acme, every_minute):
    controls.pause_tenant(acme, actor="user:alice", now=NOW)
    materialize.materialize(NOW + minutes(30), lookahead=60)

    caught_up = controls.resume_tenant(
        acme, actor="user:alice", note="upgraded", now=NOW + minutes(30) + dt.timedelta(seconds=5)
    )

    assert [job.pk for job in caught_up] == [every_minute.pk]
    (summary,) = skipped(every_minute)
    assert summary.reason.startswith("passed over while the tenant was paused: 31 occurrences")
    every_minute.refresh_from_db()
    assert every_minute.next_due_at == NOW + minutes(31)
    assert acme.paused_at is None
    entry = AuditEntry.objects.get(action="resume", object_type="jobs.tenant")
    assert entry.detail == {"queue": None, "jobs_caught_up": 1, "jobs_that_passed_over_runs": 1}
    assert controls.resume_tenant(acme, actor="user:alice", now=NOW + minutes(31)) is None, "not paused any more"


def test_it_pauses_one_queue_of_a_tenant_and_leaves_its_other_queues_and_paused_jobs_alone(acme, make_job):
    from jobs.models import QueuePause

    reports = make_job(acme, "reports.hourly", cron_expr="* * * * *", queue="reports", next_due_at=NOW)
    other = make_job(acme, "billing.ping", cron_expr="* * * * *", next_due_at=NOW)
    paused = make_job(acme, "reports.paused", cron_expr="* * * * *", queue="reports", next_due_at=NOW, status="paused")
    assert controls.pause_tenant(acme, actor="user:alice", queue="reports", now=NOW)

    materialize.materialize(NOW + minutes(10), lookahead=60)
    caught_up = controls.resume_tenant(acme, actor="user:alice", queue="reports", now=NOW + minutes(10))

    assert Run.objects.filter(job=other).exists() and not Run.objects.filter(job=reports, state="scheduled").exists()
    assert [job.pk for job in caught_up] == [reports.pk]  # the job paused on its own waits for its own resume
    assert "passed over while queue reports was paused" in skipped(reports)[0].reason
    assert not skipped(paused) and not QueuePause.objects.exists()


def test_it_keeps_a_queue_held_while_its_tenant_is_paused_and_refuses_a_bad_queue_name(acme, make_job):
    from django.core.exceptions import ValidationError

    reports = make_job(acme, "reports.hourly", cron_expr="* * * * *", queue="reports", next_due_at=NOW)
    controls.pause_tenant(acme, actor="user:alice", now=NOW)
    controls.pause_tenant(acme, actor="user:alice", queue="reports", now=NOW)

    assert controls.resume_tenant(acme, actor="user:alice", queue="reports", now=NOW + minutes(5)) == []
    assert controls.resume_tenant(acme, actor="user:alice", now=NOW + minutes(5)) == [reports]
    with pytest.raises(ValidationError) as refused:
        controls.pause_tenant(acme, actor="user:alice", queue="Not A Queue")
    assert "queue" in refused.value.message_dict


def test_a_trigger_at_the_concurrency_limit_creates_nothing_whichever_door_asks(acme, make_job, make_run):
    limited = make_job(acme, "reports.limited", concurrency=1)
    free = make_job(acme, "reports.free")
    make_run(limited, state="leased", due_at=NOW - minutes(1))
    both = JobDefinition.objects.filter(pk__in=[limited.pk, free.pk])

    with pytest.raises(controls.ConcurrencyLimit) as refused:
        controls.trigger_many(both, actor="user:alice", now=NOW)  # the portal's bulk "trigger now"
    with pytest.raises(controls.ConcurrencyLimit):
        controls.trigger(limited, actor="token:acme", now=NOW)  # the API's :trigger

    assert "already runs 1 of at most 1" in str(refused.value)
    assert not Run.objects.filter(origin="trigger").exists(), "nothing is triggered when one job refuses"
    assert not AuditEntry.objects.filter(action="trigger").exists()
    assert controls.trigger(free, actor="token:acme", payload={"n": 1}, now=NOW).payload == {"n": 1}
