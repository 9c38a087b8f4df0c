"""Prometheus metrics: counters moved by the engine's events, gauges read from the database at scrape time.

Counters are process-wide, so each test reads them before and after (`Delta`).
"""

import datetime as dt
import logging
import socket
import time
import urllib.request
from collections import Counter as Tally

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from dlq.models import DeadLetter
from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant, shard_for
from runs import claims, materialize, metrics, scheduler, shards, transitions
from tests.conftest import NOW

pytestmark = pytest.mark.django_db(transaction=True)


class Delta:
    """How much a sample moved since this object was made."""

    def __init__(self, name, **labels):
        self.name, self.labels = name, labels
        self.before = self.value()

    def value(self):
        return REGISTRY.get_sample_value(self.name, self.labels) or 0.0

    @property
    def moved(self):
        return self.value() - self.before


def scrape(now):
    """{(metric name, sorted labels): value} of the database collector at `now`."""
    samples = {}
    for family in metrics.DatabaseCollector().collect_at(now):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_it_counts_a_claim_by_tenant_queue_and_priority_and_observes_first_attempt_lateness(
    acme, make_job, make_run, clock
):
    job = make_job(acme, "billing.close", priority=JobDefinition.Priority.CRITICAL)
    make_run(job, due_at=clock.ago(seconds=12))
    claimed = Delta("duetime_runs_claimed_total", tenant="acme", queue="default", priority="critical")
    late_count = Delta("duetime_run_lateness_seconds_count", tenant="acme", priority="critical")
    late_sum = Delta("duetime_run_lateness_seconds_sum", tenant="acme", priority="critical")
    within_10 = Delta("duetime_run_lateness_seconds_bucket", tenant="acme", priority="critical", le="10.0")
    within_30 = Delta("duetime_run_lateness_seconds_bucket", tenant="acme", priority="critical", le="30.0")

    leases = claims.claim(["default"], 10, "w-1", now=clock.now)

    assert len(leases) == 1
    assert claimed.moved == 1
    assert late_count.moved == 1
    assert late_sum.moved == pytest.approx(12.0)
    assert within_10.moved == 0  # 12 s late: above the 10 s bucket
    assert within_30.moved == 1


def test_observing_a_batch_gives_what_observing_one_by_one_gives():
    values = [-1, 0, 0.05, 0.07, 1, 1, 4.99, 5, 5.01, 59, 3600, 99999]
    registry_one, registry_all = CollectorRegistry(), CollectorRegistry()
    one = Histogram("lateness", "one by one", ["tenant"], buckets=metrics.LATENESS_BUCKETS, registry=registry_one)
    batch = Histogram("lateness", "in a batch", ["tenant"], buckets=metrics.LATENESS_BUCKETS, registry=registry_all)
    for value in values:
        one.labels("acme").observe(value)
    metrics.observe_all(batch.labels("acme"), values)

    def samples(registry):
        return [
            (s.name, s.labels, s.value) for f in registry.collect() for s in f.samples if s.name != "lateness_created"
        ]

    assert samples(registry_all) == samples(registry_one)


def test_it_counts_completions_by_outcome_and_refuses_stale_ones(acme, make_job, make_run, clock):
    job = make_job(acme, "billing.close", max_attempts=3, overlap_policy="allow")
    make_run(job, due_at=clock.ago(seconds=1))
    make_run(job, due_at=clock.ago(seconds=2))
    first, second = claims.claim(["default"], 10, "w-1", now=clock.now, shares=claims.PriorityShares())
    succeeded = Delta("duetime_runs_completed_total", outcome="succeeded")
    failed = Delta("duetime_runs_completed_total", outcome="failed")
    retries = Delta("duetime_retries_total", cause="failed")
    refused = Delta("duetime_stale_completions_refused_total")
    heartbeats_refused = Delta("duetime_stale_heartbeats_refused_total")

    transitions.complete(first.run_id, first.fencing_token, "succeeded", now=clock.now)
    transitions.complete(second.run_id, second.fencing_token, "failed", "boom", now=clock.now)
    with pytest.raises(transitions.StaleLease):
        transitions.complete(first.run_id, first.fencing_token, "succeeded", now=clock.now)
    with pytest.raises(transitions.StaleLease):
        transitions.heartbeat(first.run_id, first.fencing_token, 30, now=clock.now)

    assert (succeeded.moved, failed.moved, retries.moved) == (1, 1, 1)
    assert refused.moved == 1
    assert heartbeats_refused.moved == 1


def test_it_counts_lease_expiries_retries_and_dead_letters_by_tenant_and_queue(acme, make_job, make_run, clock):
    once = make_job(acme, "once", max_attempts=1, priority=JobDefinition.Priority.CRITICAL, queue="billing")
    twice = make_job(acme, "twice", max_attempts=2, queue="billing")
    make_run(once, state="leased", due_at=clock.ago(minutes=5))
    make_run(twice, state="leased", due_at=clock.ago(minutes=5))
    expiries = Delta("duetime_lease_expiries_total", tenant="acme", queue="billing")
    retries = Delta("duetime_retries_total", cause="lease_expired")
    dead = Delta("duetime_dead_letters_created_total", tenant="acme", queue="billing", priority="critical")

    transitions.reap(now=clock.now)

    assert expiries.moved == 2
    assert retries.moved == 1
    assert dead.moved == 1


def test_a_scheduler_pass_counts_what_it_materialised_its_shards_and_the_time_of_each_step(every_minute, clock):
    shards.ensure_rows()
    materialized = Delta("duetime_runs_materialized_total", tenant="acme")
    lead = Delta("duetime_materialize_lead_seconds_count")
    taken = Delta("duetime_shard_handovers_total", direction="taken")
    steps = {step: Delta("duetime_scheduler_tick_step_seconds_count", step=step) for step in ("own_shards", "reap")}

    result = scheduler.tick("node-metrics", now=NOW)

    assert result.inserted >= 1
    assert materialized.moved == result.inserted
    assert lead.moved == result.inserted
    assert taken.moved == 64
    assert REGISTRY.get_sample_value("duetime_scheduler_shards_held") == 64
    assert all(delta.moved == 1 for delta in steps.values())


def test_a_missed_occurrence_is_counted_skipped_with_its_cause(acme, make_job, clock):
    job = JobDefinition(
        tenant=acme,
        name="nightly",
        schedule_kind="cron",
        cron_expr="* * * * *",
        missed_run_policy="skip",
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    save_definition(job, "test", now=clock.ago(minutes=10))
    shards.ensure_rows()
    missed = Delta("duetime_runs_skipped_total", tenant="acme", cause="missed")

    scheduler.tick("node-metrics", now=clock.now)

    assert missed.moved >= 9  # the minutes nobody materialised, recorded skipped by the policy


def test_the_database_gauges_give_backlog_and_oldest_age_per_queue_and_priority(
    acme, globex, make_job, make_run, clock
):
    critical = make_job(acme, "urgent", priority=JobDefinition.Priority.CRITICAL)
    bulk = make_job(globex, "reports", priority=JobDefinition.Priority.BULK, queue="reports")
    make_run(critical, due_at=clock.ago(seconds=90))
    make_run(critical, due_at=clock.ago(seconds=30))
    make_run(bulk, due_at=clock.ago(seconds=5))
    make_run(bulk, due_at=clock.ahead(seconds=30))  # not ready yet
    dead = make_run(bulk, state="dead", due_at=clock.ago(minutes=3))
    DeadLetter.objects.create(run=dead, job=bulk, tenant=globex, last_error="boom", dead_at=clock.now)

    samples = scrape(clock.now)

    assert samples[("duetime_ready_runs", (("priority", "critical"), ("queue", "default")))] == 2
    assert samples[("duetime_oldest_ready_age_seconds", (("priority", "critical"), ("queue", "default")))] == 90
    assert samples[("duetime_ready_runs", (("priority", "bulk"), ("queue", "reports")))] == 1
    assert samples[("duetime_dead_letters_open", (("tenant", "globex"),))] == 1


def test_the_backlog_counts_a_ready_run_where_it_waits_even_after_its_job_moved_queue_and_priority(
    acme, make_job, make_run, clock
):
    job = make_job(acme, "export", queue="reports")
    make_run(job, due_at=clock.ago(seconds=40))
    JobDefinition.objects.filter(pk=job.pk).update(queue="default", priority=JobDefinition.Priority.CRITICAL)

    samples = scrape(clock.now)

    assert samples[("duetime_ready_runs", (("priority", "default"), ("queue", "reports")))] == 1
    assert samples[("duetime_oldest_ready_age_seconds", (("priority", "default"), ("queue", "reports")))] == 40
    assert ("duetime_ready_runs", (("priority", "critical"), ("queue", "default"))) not in samples


def test_the_database_gauges_say_who_owns_the_shards(db, clock):
    shards.ensure_rows()
    shards.own_shards("node-a", clock.now)

    samples = scrape(clock.now)

    assert samples[("duetime_shards_owned", (("owner", "node-a"),))] == 64
    assert samples[("duetime_scheduler_nodes_alive", ())] == 1


def test_the_series_of_each_metric_do_not_grow_with_the_number_of_jobs(acme, globex, clock):
    """36 jobs of 3 tenants, then 1,000 more like them: materialised (with missed minutes skipped), claimed,
    failed, retried, dead-lettered, succeeded and reaped. The second thousand adds no series to any metric: labels are bounded."""
    tenants = [acme, globex, Tenant.objects.create(name="initech", task_module_prefixes="tests.handlers")]

    def flow(first, count, now):
        JobDefinition.objects.bulk_create(job_like(tenants, i, now) for i in range(first, first + count))
        while materialize.materialize(now).jobs:
            pass
        for round_ in (1, 2):
            leases = []
            while batch := claims.claim(["default", "reports"], 200, "w-many", now=now):
                leases += batch
            # Round 1: every attempt fails (jobs of one attempt die, the others retry at once); round 2:
            # the even jobs succeed and the odd ones keep their leases until the reaper finds them expired.
            done = [
                transitions.Completion(lease.run_id, lease.fencing_token, outcome(round_, number(lease)))
                for lease in leases
                if round_ == 1 or number(lease) % 2 == 0
            ]
            transitions.complete_many(done, now=now)
        transitions.reap(now=now + dt.timedelta(minutes=10))
        return series_per_metric(now + dt.timedelta(minutes=10))

    few = flow(0, 36, clock.now)
    many = flow(36, 1000, clock.advance(minutes=20))

    grown = {name: (few.get(name, 0), n) for name, n in many.items() if n != few.get(name, 0)}
    assert grown == {}, grown
    assert few["duetime_runs_claimed_total"] >= 18 and few["duetime_dead_letters_created_total"] >= 18
    assert few["duetime_lease_expiries_total"] >= 6 and few["duetime_dead_letters_open"] == 3
    assert few["duetime_runs_skipped_total"] >= 3 and few["duetime_runs_materialized_total"] >= 3


def job_like(tenants, i, now):
    """Job i: its tenant, priority, queue and attempts cycle so that any 36 consecutive jobs cover every mix."""
    tenant = tenants[i % 3]
    return JobDefinition(
        tenant=tenant,
        name=f"many.{i:04d}",
        schedule_kind="cron",
        cron_expr="* * * * *",
        next_due_at=now - dt.timedelta(minutes=5),  # missed minutes: one catch-up run, the rest recorded skipped
        priority=(i // 3) % 3,
        queue=("default", "reports")[(i // 9) % 2],
        max_attempts=2 if (i // 18) % 2 == 0 else 1,
        retry_base_seconds=0,
        retry_max_seconds=0,
        overlap_policy="allow",
        target_ref="tests.handlers.noop",
        shard=shard_for(tenant.name, f"many.{i:04d}"),
    )


def number(lease):
    return int(lease.job_name.removeprefix("many."))


def outcome(round_, i):
    if round_ == 2:
        return "succeeded"
    return "failed" if i % 2 else "timed_out"


def series_per_metric(now):
    """{sample name: how many label sets} in this process's registry and the database gauges at `now`
    (a series once: the web's /metrics, served in this process by an earlier test, registers the
    database gauges in the registry too)."""
    series = {(s.name, tuple(sorted(s.labels.items()))) for family in REGISTRY.collect() for s in family.samples}
    series.update(
        (s.name, tuple(sorted(s.labels.items())))
        for family in metrics.DatabaseCollector().collect_at(now)
        for s in family.samples
    )
    return dict(Tally(name for name, _ in series))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def other_address():
    """An address of this machine that is not loopback, or None (a machine with loopback only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def answers(address, port):
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.parametrize("addr", [None, "0.0.0.0"], ids=["default", "configured"])
def test_it_serves_the_engine_metrics_on_loopback_unless_told_otherwise(settings, addr):
    if addr is not None:
        settings.DUETIME_METRICS_ADDR = addr
    port = free_port()
    server = metrics.serve(port, logging.getLogger("test"))
    try:
        assert server.server_address[0] == (addr or "127.0.0.1")
        assert answers("127.0.0.1", port)
        outside = other_address()
        if outside is not None:  # the machine's own network address reaches it only when configured so
            assert answers(outside, port) == (addr == "0.0.0.0")
    finally:
        server.shutdown()
        server.server_close()


def test_a_claim_that_a_limit_holds_back_counts_the_time_since_the_previous_claim(
    acme, globex, make_job, make_run, clock
):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=1)
    capped = make_job(acme, "capped", overlap_policy="allow")
    two_at_once = make_job(globex, "two", overlap_policy="allow", concurrency=2)
    for i in range(3):
        make_run(capped, due_at=clock.ago(seconds=10 + i))
        make_run(two_at_once, due_at=clock.ago(seconds=10 + i))
    tenant_cap = Delta("duetime_tenant_capped_seconds_total", tenant="acme", limit="max_concurrent_runs")
    job_cap = Delta("duetime_tenant_capped_seconds_total", tenant="globex", limit="job_concurrency")
    metrics._last_claim["at"] = time.monotonic() - 100  # the previous claim, long ago: counted up to 1 s

    assert len(claims.claim(["default"], 10, "w-1", now=clock.now)) == 3

    assert tenant_cap.moved == metrics.CAPPED_INTERVAL_MAX and job_cap.moved == metrics.CAPPED_INTERVAL_MAX
    uncapped = Delta("duetime_tenant_capped_seconds_total", tenant="globex", limit="max_concurrent_runs")
    claims.claim(["default"], 10, "w-1", now=clock.now)
    assert uncapped.moved == 0


def test_the_database_gauges_name_the_tenants_whose_breaker_is_open(acme, globex, clock):
    Tenant.objects.filter(pk=acme.pk).update(breaker_opened_at=clock.now, breaker_detail="test")

    samples = scrape(clock.now)

    assert samples[("duetime_tenant_breaker_open", (("tenant", "acme"),))] == 1
    assert ("duetime_tenant_breaker_open", (("tenant", "globex"),)) not in samples
