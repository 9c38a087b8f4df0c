"""The one insert path of runs, and one-off runs.

Every door that creates runs goes through runs.enqueue.insert_runs, and a door
that names a tenant quota obeys it there, before anything is written.
"""

import datetime as dt
from collections import Counter

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from bench import setup as bench_setup
from jobs.models import JobDefinition, Tenant
from jobs.quotas import QuotaExceeded
from runs import backfill, claims, controls, enqueue, materialize, transitions
from runs.enqueue import Quota
from runs.models import OPEN_DAY, Run, RunQuerySet
from tests.conftest import NOW, is_postgres  # noqa: F401 (is_postgres: the skipif below)


def minutes(n):
    return dt.timedelta(minutes=n)


def limit(tenant, **quotas):
    Tenant.objects.filter(pk=tenant.pk).update(**quotas)
    tenant.refresh_from_db()


# --- insert_runs ----------------------------------------------------------------


def test_it_inserts_new_runs_and_passes_over_an_occurrence_already_there(every_minute):
    first = enqueue.insert_runs(enqueue.build_runs(every_minute, [NOW, NOW + minutes(1)]))
    again = enqueue.insert_runs(enqueue.build_runs(every_minute, [NOW + minutes(1), NOW + minutes(2)]))
    assert [run.due_at for run in first] == [NOW, NOW + minutes(1)] and all(run.pk for run in first)
    assert [run.due_at for run in again] == [NOW + minutes(2)], "the repeated occurrence is left out"
    assert Run.objects.filter(job=every_minute).count() == 3


def finish(run, now):
    """Lease `run` and complete it: on PostgreSQL its row then lives in a day partition, not the open one."""
    (lease,) = claims.claim([run.queue], 1, "w-alice", now=now)
    assert lease.run_id == run.pk
    assert transitions.complete(run.pk, lease.fencing_token, "succeeded", now=now) == "succeeded"
    assert Run.objects.get(pk=run.pk).history_day != OPEN_DAY


def test_an_occurrence_is_passed_over_even_once_its_first_run_finished(every_minute):
    (first,) = enqueue.insert_runs(enqueue.build_runs(every_minute, [NOW]))
    finish(first, NOW + minutes(1))
    assert enqueue.insert_runs(enqueue.build_runs(every_minute, [NOW, NOW + minutes(1)]))[0].due_at == NOW + minutes(1)
    assert Run.objects.filter(job=every_minute, due_at=NOW).count() == 1


def test_a_skipped_summary_inserted_twice_is_passed_over(every_minute):
    rows = lambda: enqueue.skipped_rows(every_minute, [(NOW, None, 1, "missed")], NOW)  # noqa: E731
    assert enqueue.insert_runs(rows()) and enqueue.insert_runs(rows()) == []
    assert enqueue.insert_runs(enqueue.build_runs(every_minute, [NOW])) == [], "nor the occurrence it stands for"


def test_it_writes_a_new_run_with_no_attempt_lease_or_error_yet(every_minute):
    (run,) = enqueue.insert_runs(enqueue.build_runs(every_minute, [NOW], payload={"invoice": 17}))
    stored = Run.objects.get(pk=run.pk)
    assert (stored.state, stored.attempt, stored.fencing_token, stored.lease_expires_at) == ("scheduled", 0, None, None)
    assert (stored.worker_id, stored.last_error, stored.started_at, stored.finished_at) == ("", "", None, None)
    assert (stored.due_at, stored.available_at, stored.payload) == (NOW, NOW, {"invoice": 17})
    assert stored.idempotency_key == "ping@2026-06-01T11:00:00+02:00"
    assert stored.created_at == run.created_at


def test_a_fresh_run_is_written_like_one_of_insert_runs_and_is_claimable(every_minute):
    [row] = enqueue.build_runs(every_minute, [NOW], origin=Run.Origin.API, payload={"invoice": 17}, key="ping@fresh-1")
    row.priority = JobDefinition.Priority.CRITICAL
    run = enqueue.insert_fresh_run(row)
    stored = Run.objects.get(pk=run.pk)
    assert (stored.state, stored.attempt, stored.fencing_token, stored.history_day) == ("scheduled", 0, None, OPEN_DAY)
    assert (stored.origin, stored.idempotency_key, stored.payload) == ("api", "ping@fresh-1", {"invoice": 17})
    assert (stored.due_at, stored.available_at, stored.priority) == (NOW, NOW, JobDefinition.Priority.CRITICAL)
    assert (stored.created_at, run._state.adding) == (run.created_at, False)
    (lease,) = claims.claim([run.queue], 10, "w-alice", now=NOW)
    assert lease.run_id == run.pk


def test_a_fresh_run_whose_key_is_taken_after_all_is_refused_and_the_first_kept(every_minute):
    build = lambda: enqueue.build_runs(every_minute, [NOW], origin=Run.Origin.API, key="ping@fresh-2")[0]  # noqa: E731
    first = enqueue.insert_fresh_run(build())
    with pytest.raises(IntegrityError, match="ping@fresh-2"):
        enqueue.insert_fresh_run(build())
    assert list(Run.objects.filter(idempotency_key="ping@fresh-2").values_list("pk", flat=True)) == [first.pk]
    with pytest.raises(ValueError, match="scheduled"):
        enqueue.insert_fresh_run(enqueue.skipped_rows(every_minute, [(NOW, None, 1, "missed")], NOW)[0])


def test_it_writes_a_skipped_summary_with_its_reason_and_window(every_minute):
    summary = (NOW, NOW + minutes(4), 5, "missed while no scheduler ran")
    (run,) = enqueue.insert_runs(enqueue.skipped_rows(every_minute, [summary], NOW + minutes(10)))
    stored = Run.objects.get(pk=run.pk)
    assert (stored.state, stored.reason) == ("skipped", "missed while no scheduler ran")
    assert (stored.due_at, stored.covers_until, stored.finished_at) == (NOW, NOW + minutes(4), NOW + minutes(10))


def test_it_tells_progress_after_each_statement(acme, make_job):
    job = make_job(acme, "many")
    told = []
    rows = enqueue.build_runs(job, [NOW + dt.timedelta(seconds=i) for i in range(enqueue.INSERT_CHUNK + 1)])
    enqueue.insert_runs(rows, progress=lambda done, total: told.append((done, total)))
    assert told == [(enqueue.INSERT_CHUNK, enqueue.INSERT_CHUNK + 1), (enqueue.INSERT_CHUNK + 1,) * 2]


def test_every_door_inserts_through_insert_runs(acme, make_job, every_minute, monkeypatch):
    """With Run.save and bulk_create forbidden, every door still creates its runs."""
    on_demand = make_job(acme, "oneoff")

    def forbidden(*args, **kwargs):
        raise AssertionError("a run inserted outside runs.enqueue.insert_runs")

    monkeypatch.setattr(Run, "save", forbidden)
    monkeypatch.setattr(RunQuerySet, "bulk_create", forbidden)

    materialize.materialize(NOW + minutes(5), lookahead=0)  # run_once: the latest missed, a summary, the due one
    enqueue.enqueue(on_demand, now=NOW)
    controls.trigger(on_demand, actor="user:alice", now=NOW)
    controls.trigger_many(JobDefinition.objects.filter(pk=on_demand.pk), actor="user:alice", now=NOW)
    backfill.backfill(every_minute, NOW - minutes(60), NOW - minutes(58), actor="user:alice", now=NOW)
    controls.pause(every_minute, actor="user:alice")
    controls.resume(every_minute, actor="user:alice", now=NOW + minutes(30))  # a summary of what it passed over
    bench_setup.insert_runs(on_demand, NOW, 3)

    made = Counter(Run.objects.values_list("origin", "state"))
    assert made == {
        ("schedule", "scheduled"): 2,
        ("schedule", "skipped"): 2,
        ("api", "scheduled"): 1 + 3,
        ("trigger", "scheduled"): 2,
        ("backfill", "scheduled"): 2,
    }


# --- insert_selected: the bulk path ----------------------------------------------

SELECTED = """
SELECT %(job)s AS job_id, %(tenant)s AS tenant_id, %(now)s::timestamptz + make_interval(mins => i) AS due_at,
       %(now)s::timestamptz + make_interval(mins => i) AS available_at, 'bulk@' || i AS idempotency_key,
       %(queue)s AS queue, (ARRAY['succeeded', 'scheduled', 'dead'])[i + 1] AS state,
       CASE WHEN i <> 1 THEN %(now)s::timestamptz + make_interval(mins => i, secs => 3) END AS finished_at
FROM generate_series(0, 2) AS i
"""


@pytest.mark.skipif("not is_postgres()", reason="insert_selected is PostgreSQL's bulk path")
def test_the_bulk_path_places_runs_and_marks_the_claimable_ones_as_insert_runs_does(every_minute):
    from runs.models import ReadyMark

    params = {"job": every_minute.pk, "tenant": every_minute.tenant_id, "queue": every_minute.queue, "now": NOW}
    assert enqueue.insert_selected(SELECTED, params) == 3
    (summary,) = enqueue.insert_runs(enqueue.skipped_rows(every_minute, [(NOW + minutes(10), None, 1, "x")], NOW))
    runs = {run.state: run for run in Run.objects.filter(job=every_minute, idempotency_key__startswith="bulk@")}
    assert runs["succeeded"].history_day == Run.objects.get(pk=summary.pk).history_day != OPEN_DAY
    assert runs["scheduled"].history_day == runs["dead"].history_day == OPEN_DAY
    scheduled = runs["scheduled"]
    assert (scheduled.attempt, scheduled.worker_id, scheduled.fencing_token, scheduled.payload) == (0, "", None, {})
    marks = ReadyMark.objects.filter(tenant_id=every_minute.tenant_id, queue=every_minute.queue)
    assert [mark.due_at for mark in marks] == [scheduled.available_at], "one mark, for the claimable run only"


@pytest.mark.skipif("not is_postgres()", reason="insert_selected is PostgreSQL's bulk path")
def test_the_bulk_path_refuses_a_column_that_is_not_a_runs_and_one_missing(every_minute):
    with pytest.raises(ValueError, match=r"not runs_run's \['colour'\], missing \['queue'\]"):
        enqueue.insert_selected(
            "SELECT 1 AS job_id, 1 AS tenant_id, now() AS due_at, now() AS available_at, 'k' AS idempotency_key,"
            " 'red' AS colour"
        )
    assert not Run.objects.exists()


@pytest.mark.skipif("is_postgres()", reason="SQLite has no bulk path")
def test_the_bulk_path_is_postgresql_s_only(db):
    with pytest.raises(NotImplementedError):
        enqueue.insert_selected("SELECT 1 AS job_id")


# --- quotas -----------------------------------------------------------------------


def test_a_door_that_names_the_pending_quota_obeys_it_before_writing(acme, make_job, every_minute):
    limit(acme, max_pending_runs=2)
    job = make_job(acme, "oneoff")
    enqueue.enqueue(job, quota=Quota.ENQUEUE, now=NOW)
    enqueue.enqueue(job, quota=Quota.ENQUEUE, now=NOW)

    with pytest.raises(QuotaExceeded) as refused:
        enqueue.enqueue(job, quota=Quota.ENQUEUE, now=NOW)
    with pytest.raises(QuotaExceeded):
        controls.trigger(job, actor="token:acme", quota=Quota.ENQUEUE, now=NOW)
    with pytest.raises(QuotaExceeded):
        backfill.backfill(
            every_minute, NOW - minutes(60), NOW - minutes(59), actor="token:acme", quota=Quota.PENDING, now=NOW
        )

    assert (refused.value.quota, refused.value.limit) == ("max_pending_runs", 2)
    assert Run.objects.filter(tenant=acme).count() == 2, "nothing refused was written"


def test_a_backfill_counts_its_whole_window_against_the_pending_quota(acme, every_minute):
    limit(acme, max_pending_runs=3)
    with pytest.raises(QuotaExceeded):
        backfill.backfill(
            every_minute, NOW - minutes(60), NOW - minutes(56), actor="token:acme", quota=Quota.PENDING, now=NOW
        )
    runs = backfill.backfill(
        every_minute, NOW - minutes(60), NOW - minutes(57), actor="token:acme", quota=Quota.PENDING, now=NOW
    )
    assert len(runs) == 3


def test_the_enqueue_rate_counts_runs_and_triggers_alike(acme, make_job):
    # The rate is read from the audit log's own timestamps, so these calls use the real clock.
    limit(acme, enqueue_rate_per_minute=2)
    job = make_job(acme, "oneoff")
    enqueue.enqueue(job, actor="token:acme", quota=Quota.ENQUEUE)
    controls.trigger(job, actor="token:acme", quota=Quota.ENQUEUE)

    with pytest.raises(QuotaExceeded) as refused:
        enqueue.enqueue(job, actor="token:acme", quota=Quota.ENQUEUE)

    assert refused.value.quota == "enqueue_rate_per_minute"
    assert 1 <= refused.value.retry_after <= 60


def test_a_caller_that_names_no_quota_obeys_none(acme, make_job):
    # Every door of a team names its quota (the schedule's: tests/runs/test_materialize.py);
    # code that names none, such as the benchmark's setup, is not limited.
    limit(acme, max_pending_runs=1, enqueue_rate_per_minute=1)
    make_job(acme, "first")
    controls.trigger_many(JobDefinition.objects.filter(name="first"), actor="user:alice", now=NOW)
    job = make_job(acme, "oneoff")
    (run,) = controls.trigger_many(JobDefinition.objects.filter(pk=job.pk), actor="user:alice", now=NOW)
    assert run.origin == "trigger"


# --- enqueue ----------------------------------------------------------------------


def test_it_returns_the_same_run_for_the_same_caller_key(acme, make_job):
    job = make_job(acme, "oneoff")
    first, created = enqueue.enqueue(job, delay_seconds=60, idempotency_key="order-17", now=NOW)
    again, created_again = enqueue.enqueue(job, delay_seconds=5, idempotency_key="order-17", now=NOW)
    assert created and not created_again and again.pk == first.pk
    assert first.due_at == NOW + minutes(1) and first.idempotency_key == "order-17"


def test_the_same_caller_key_returns_the_first_run_after_it_finished(acme, make_job):
    job = make_job(acme, "oneoff")
    first, _ = enqueue.enqueue(job, idempotency_key="order-17", now=NOW)
    finish(first, NOW)
    again, created = enqueue.enqueue(job, idempotency_key="order-17", now=NOW + minutes(5))
    assert not created and again.pk == first.pk and again.state == "succeeded"
    rows = enqueue.build_runs(job, [NOW], origin=Run.Origin.API, key="order-17")
    assert enqueue.insert_runs(rows) == [], "insert_runs passes it over too"


@pytest.mark.skipif("not is_postgres()", reason="SQLite's unique constraint never lets a second run of a key in")
def test_a_key_whose_first_run_finished_during_the_insert_answers_with_that_run(acme, make_job, monkeypatch):
    # The race: the first run of the key finishes (moves to history) while the second call's insert
    # runs, so neither that statement's snapshot nor the open partition's unique index sees it.
    job = make_job(acme, "oneoff")
    first, _ = enqueue.enqueue(job, idempotency_key="order-17", now=NOW)
    finish(first, NOW)
    blind = iter([None])  # the check before the insert ran before the first run existed
    monkeypatch.setattr(enqueue, "_keyed_run", lambda job, key, real=enqueue._keyed_run: next(blind, real(job, key)))

    def insert_blind(rows, **kwargs):  # what the insert would have done without seeing the first run
        (row,) = rows
        row.save()
        return rows

    monkeypatch.setattr(enqueue, "insert_runs", insert_blind)
    again, created = enqueue.enqueue(job, idempotency_key="order-17", now=NOW + minutes(5))
    assert not created and again.pk == first.pk
    assert Run.objects.filter(idempotency_key="order-17").count() == 1, "the second insert was undone"


def test_it_refuses_an_ambiguous_or_naive_run_time(acme, make_job):
    job = make_job(acme, "oneoff")
    with pytest.raises(ValidationError):
        enqueue.enqueue(job, run_at=NOW, delay_seconds=5)
    with pytest.raises(ValidationError):
        enqueue.enqueue(job, run_at=NOW.replace(tzinfo=None))


def test_it_refuses_a_caller_key_already_used_by_another_job(acme, make_job):
    enqueue.enqueue(make_job(acme, "first"), idempotency_key="order-17", now=NOW)
    with pytest.raises(ValidationError):
        enqueue.enqueue(make_job(acme, "second"), idempotency_key="order-17", now=NOW)


def test_it_audits_a_trigger_with_its_run(acme, make_job):
    job = make_job(acme, "oneoff")
    run = controls.trigger(job, actor="user:alice", note="by hand", now=NOW)
    entry = acme.audit.get(action="trigger")
    assert (entry.actor, entry.note, entry.detail) == (
        "user:alice",
        "by hand",
        {"run": run.pk, "due_at": NOW.isoformat()},
    )
    assert (run.origin, run.due_at, run.state) == ("trigger", NOW, "scheduled")
