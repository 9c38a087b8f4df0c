"""Operator controls, one job or many: pause, resume, delete, trigger, cancel, replay, discard.

Each is written once, set-based; the one-job forms call it with one job, so
both are checked here through the same stories.
"""

import datetime as dt

import pytest

from dlq.models import DeadLetter
from jobs.models import AuditEntry, JobDefinition, Tenant
from jobs.quotas import QuotaExceeded
from runs import controls, materialize
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
