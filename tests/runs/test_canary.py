"""The canaries (a job per shard every minute) and the dead-man's switch (has a scheduler materialised?)."""

import datetime as dt

import pytest

from jobs.models import SHARDS, SYSTEM_TENANT, JobDefinition, Tenant
from runs import canary, metrics, scheduler, shards
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def minute(at):
    return at.replace(second=0, microsecond=0)


def succeed(job, due_at):
    Run.objects.create(
        job=job,
        tenant=job.tenant,
        due_at=due_at,
        available_at=due_at,
        state="succeeded",
        finished_at=due_at + dt.timedelta(seconds=1),
        queue=job.queue,
        shard=job.shard,
        idempotency_key=f"{job.name}@{due_at.isoformat()}",
    )


def test_ensure_creates_one_canary_per_shard_once(db, clock):
    assert canary.ensure(now=clock.now) == SHARDS
    assert canary.ensure(now=clock.now) == 0
    jobs = JobDefinition.objects.filter(tenant__name=SYSTEM_TENANT)
    assert sorted(jobs.values_list("shard", flat=True)) == list(range(SHARDS))
    job = jobs.get(shard=12)
    assert (job.name, job.cron_expr, job.target_ref, job.priority) == ("canary.shard-12", "* * * * *", CANARY, 0)
    assert job.next_due_at == minute(clock.now) + dt.timedelta(minutes=1)
    job.full_clean()  # a valid definition: its task is registered and its tenant may use it


CANARY = canary.CANARY_TASK


def test_the_canary_task_is_a_registered_task_that_succeeds():
    from jobs.registry import registered_task

    assert registered_task(CANARY).call() == "ok"


def test_a_scheduler_materialises_the_canaries_on_its_shards(db, clock):
    canary.ensure(now=clock.ago(minutes=1))
    shards.ensure_rows()
    while scheduler.tick("node-a", now=clock.now).busy:  # a pass may stop at its time budget on a busy machine
        pass
    due = Run.objects.filter(tenant__name=SYSTEM_TENANT, state="scheduled")
    assert due.values("shard").distinct().count() == SHARDS


def test_all_is_well_when_every_canary_succeeded_and_a_scheduler_just_passed(db, clock):
    canary.ensure(now=clock.ago(minutes=5))
    for job in JobDefinition.objects.filter(tenant__name=SYSTEM_TENANT):
        for back in (1, 2):
            succeed(job, minute(clock.now - canary.CANARY_GRACE) - dt.timedelta(minutes=back - 1))
    shards.ensure_rows()
    scheduler.tick("node-a", now=clock.now)

    status = canary.status(clock.now)

    assert not status.dead and status.missed_twice == []
    assert status.messages() == []


def test_it_says_which_canary_missed_twice(db, clock):
    canary.ensure(now=clock.ago(minutes=5))
    for job in JobDefinition.objects.filter(tenant__name=SYSTEM_TENANT).exclude(shard=12):
        for back in (0, 1):
            succeed(job, minute(clock.now - canary.CANARY_GRACE) - dt.timedelta(minutes=back))
    shards.ensure_rows()
    scheduler.tick("node-a", now=clock.now)

    status = canary.status(clock.now)

    assert status.missed[12] == 2 and status.missed[11] == 0
    assert status.messages() == ["Canary on shard 12 missed twice."]


def test_one_miss_is_not_yet_an_alert_and_a_new_canary_is_not_missed_before_its_first_minute(db, clock):
    canary.ensure(now=clock.ago(minutes=5))
    latest = minute(clock.now - canary.CANARY_GRACE)
    for job in JobDefinition.objects.filter(tenant__name=SYSTEM_TENANT):
        succeed(job, latest - dt.timedelta(minutes=1))  # the newest minute is missed, the one before ran
    assert set(canary.missed_canaries(clock.now).values()) == {1}

    JobDefinition.objects.filter(tenant__name=SYSTEM_TENANT).update(created_at=clock.ago(seconds=20))
    assert set(canary.missed_canaries(clock.now).values()) == {0}


def test_canaries_missed_on_many_shards_are_summarised(db, clock):
    canary.ensure(now=clock.ago(minutes=5))
    status = canary.status(clock.now)
    assert status.missed_twice == list(range(SHARDS))
    assert f"Canaries on {SHARDS} shards missed twice (shards 0-{SHARDS - 1})." in status.messages()


def test_the_dead_mans_switch_fires_when_no_scheduler_materialised_for_a_while(db, clock):
    shards.ensure_rows()
    assert canary.status(clock.now).messages() == ["No scheduler has materialised yet: start run_scheduler."]

    scheduler.tick("node-a", now=clock.now)
    assert not canary.status(clock.now + dt.timedelta(seconds=2)).dead

    later = clock.now + dt.timedelta(seconds=10)
    status = canary.status(later)
    assert status.dead and status.nodes_alive == 0
    assert status.messages() == ["No scheduler has materialised for 10 s."]


def test_a_graceful_stop_fires_the_switch_at_once_and_keeps_the_time_of_the_last_pass(db, clock):
    shards.ensure_rows()
    scheduler.tick("node-a", now=clock.now)
    shards.release("node-a")

    status = canary.status(clock.now + dt.timedelta(seconds=1))

    assert status.dead  # no node alive, although the last pass was a second ago
    assert status.messages() == ["No scheduler has materialised for 1 s."]


@pytest.mark.parametrize("stop", ["graceful", "crash"])
def test_every_scheduler_stopped_shows_in_the_metrics_and_the_portal_two_ticks_after_the_switch(db, clock, stop):
    """A graceful stop gives its shards and its node row back: the switch fires at once. A crash leaves both
    behind: the switch fires once the last pass is DEADMAN_SECONDS old (a busy pass may take its materialise and
    notification budgets, about 3 s, so a shorter bound would cry wolf)."""
    tick = dt.timedelta(seconds=shards.RENEW_EVERY_SECONDS)
    shards.ensure_rows()
    scheduler.tick("node-a", now=clock.now)
    scheduler.tick("node-b", now=clock.now)
    assert not canary.status(clock.now + tick).dead
    for node in ("node-a", "node-b"):
        if stop == "graceful":
            shards.release(node)
    silent_for = dt.timedelta(0) if stop == "graceful" else dt.timedelta(seconds=canary.DEADMAN_SECONDS)
    seen_at = clock.now + silent_for + 2 * tick

    gauges = {f.name: f.samples[0].value for f in metrics.DatabaseCollector().collect_at(seen_at) if f.samples}
    said = canary.status(seen_at).messages()

    assert gauges["duetime_scheduler_last_pass_age_seconds"] == (silent_for + 2 * tick).total_seconds()
    if stop == "graceful":
        assert gauges["duetime_scheduler_nodes_alive"] == 0  # (a crashed node's row outlives it by its lease)
    assert said == [f"No scheduler has materialised for {(silent_for + 2 * tick).total_seconds():.0f} s."]


def test_the_metrics_carry_the_dead_mans_switch_and_the_canaries(db, clock):
    canary.ensure(now=clock.ago(minutes=5))
    shards.ensure_rows()
    scheduler.tick("node-a", now=clock.now)

    families = {f.name: f for f in metrics.DatabaseCollector().collect_at(clock.now + dt.timedelta(seconds=3))}

    assert families["duetime_scheduler_last_pass_age_seconds"].samples[0].value == 3
    assert families["duetime_scheduler_nodes_alive"].samples[0].value == 1
    missed = {s.labels["shard"]: s.value for s in families["duetime_canary_missed_in_a_row"].samples}
    assert missed["12"] == 2 and len(missed) == SHARDS


def test_the_system_tenant_is_in_no_tenant_list_of_the_portal(db, clock, django_user_model):
    from scheduler_project.admin import scoping

    canary.ensure(now=clock.now)
    Tenant.objects.create(name="acme")
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    assert list(scoping.tenants(root).values_list("name", flat=True)) == ["acme"]
    assert scoping.default_tenant(root).name == "acme"
    assert scoping.tenant_or_404(root, SYSTEM_TENANT).name == SYSTEM_TENANT  # still opened by name
