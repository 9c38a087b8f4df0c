"""The scheduler step: shard leases renewed, occurrences materialised, expired leases reaped."""

import pytest

from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs import scheduler, shards
from runs.models import Attempt, Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_scheduler_step_materialises_and_reaps(acme, clock):
    job = JobDefinition(
        tenant=acme,
        name="tick",
        schedule_kind="cron",
        cron_expr="* * * * *",
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    save_definition(job, "test", now=clock.now)
    shards.ensure_rows()
    result = scheduler.tick("node-a", now=clock.now)
    assert result.shards == 64 and result.inserted >= 1
    assert Run.objects.filter(job=job, state="scheduled").exists()


def test_the_scheduler_step_reaps_expired_leases(acme, make_job, make_run, clock):
    job = make_job(acme, "lost", overlap_policy="allow")
    run = make_run(job, state="leased", due_at=clock.ago(minutes=5))  # its lease ran out 4.5 minutes ago
    shards.ensure_rows()
    result = scheduler.tick("node-a", now=clock.now)
    assert result.reaped == 1
    run.refresh_from_db()
    assert run.state == "retry_wait"
    assert Attempt.objects.get(run=run).outcome == "lease_expired"


def test_the_scheduler_step_runs_the_periodic_steps_and_says_what_each_did(db, clock):
    shards.ensure_rows()
    result = scheduler.tick("node-a", now=clock.now)
    assert set(result.extra) == {step.__module__ for step in scheduler.STEPS}


def test_a_step_that_hit_its_bound_asks_for_another_at_once():
    assert scheduler.TickResult(reaped=scheduler.REAP_BATCH).busy
    assert scheduler.TickResult(materialized_jobs=scheduler.MATERIALIZE_BATCH).busy
    assert not scheduler.TickResult(inserted=10, reaped=3).busy
