"""What a claim batch gets: priorities, tenant fairness, caps and overlap policies."""

import datetime as dt
from collections import Counter

import pytest

from jobs.models import Tenant
from runs import claims, transitions
from runs.claims import Candidate, priority_quotas
from runs.models import Run

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
NOW = T0 + dt.timedelta(hours=1)


def due(i):
    return T0 + dt.timedelta(milliseconds=i)


def fill(make_run, job, count, start=0):
    return [make_run(job, due_at=due(start + i), origin="api") for i in range(count)]


def by(leases, attr):
    return Counter(getattr(lease, attr) for lease in leases)


@pytest.mark.parametrize(
    "available, quotas",
    [
        ((1000, 1000, 1000), [70, 25, 5]),  # all have work: 70/25/5
        ((10, 1000, 1000), [10, 85, 5]),  # critical's unused share flows down to default
        ((10, 10, 1000), [10, 10, 80]),  # ... and on to bulk
        ((1000, 0, 0), [100, 0, 0]),  # nothing below: the batch is never short while work waits
        ((0, 0, 3), [0, 0, 3]),
        ((1000, 1000, 0), [75, 25, 0]),
    ],
)
def test_it_splits_a_batch_70_25_5_with_unused_share_flowing_on(available, quotas):
    assert priority_quotas(100, list(available)) == quotas


def test_it_fills_a_batch_by_priority_share_from_the_database(acme, make_job, make_run):
    for name, priority in (("critical.job", 0), ("default.job", 1), ("bulk.job", 2)):
        fill(make_run, make_job(acme, name, priority=priority, overlap_policy="allow"), 150)
    leases = claims.claim(["default"], 100, "w", shares=claims.PriorityShares(), now=NOW)  # no earlier claims
    assert [by(leases, "job_name")[n] for n in ("critical.job", "default.job", "bulk.job")] == [70, 25, 5]


def test_it_serves_tenants_round_robin_so_a_big_backlog_cannot_starve_a_small_one(acme, globex, make_job, make_run):
    fill(make_run, make_job(acme, "acme.bulk", priority=2, overlap_policy="allow"), 300)  # older, and many
    fill(make_run, make_job(globex, "globex.bulk", priority=2, overlap_policy="allow"), 10, start=10_000)
    leases = claims.claim(["default"], 20, "w", now=NOW)
    assert by(leases, "tenant_id") == {acme.pk: 10, globex.pk: 10}


def test_it_takes_the_oldest_runs_first_within_a_tenant(acme, make_job, make_run):
    runs = fill(make_run, make_job(acme, "fifo", overlap_policy="allow"), 5)
    leases = claims.claim(["default"], 2, "w", now=NOW)
    assert sorted(lease.run_id for lease in leases) == [runs[0].pk, runs[1].pk]


def test_it_serves_only_the_asked_queues_and_the_asked_tenant(acme, globex, make_job, make_run):
    fill(make_run, make_job(acme, "mail", queue="mail", overlap_policy="allow"), 3)
    fill(make_run, make_job(globex, "globex.mail", queue="mail", overlap_policy="allow"), 3)
    fill(make_run, make_job(acme, "other", queue="other", overlap_policy="allow"), 3)
    leases = claims.claim(["mail"], 10, "w", tenant_id=acme.pk, now=NOW)
    assert {(lease.tenant_id, lease.queue) for lease in leases} == {(acme.pk, "mail")} and len(leases) == 3


def test_a_dedicated_pool_claims_only_its_tenants_and_the_others_leave_them(acme, globex, make_job, make_run):
    fill(make_run, make_job(acme, "acme.sync", overlap_policy="allow"), 3)
    fill(make_run, make_job(globex, "globex.sync", overlap_policy="allow"), 3)
    dedicated = claims.claim(["default"], 10, "acme-pool", only_tenants=[acme.pk], now=NOW)
    assert by(dedicated, "tenant_id") == {acme.pk: 3}
    fill(make_run, make_job(acme, "acme.more", overlap_policy="allow"), 3, start=100)
    shared = claims.claim(["default"], 10, "shared", except_tenants=[acme.pk], now=NOW)
    assert by(shared, "tenant_id") == {globex.pk: 3}
    assert claims.claim(["default"], 10, "globex-pool", only_tenants=[globex.pk], now=NOW) == []


def test_it_holds_a_tenant_to_its_concurrent_cap(acme, make_job, make_run):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=4)
    fill(make_run, make_job(acme, "capped", overlap_policy="allow"), 10)
    assert len(claims.claim(["default"], 10, "w", now=NOW)) == 4
    assert claims.claim(["default"], 10, "w", now=NOW) == []


def test_a_claim_locks_no_more_of_a_capped_tenants_runs_than_its_room_and_says_the_cap_held_it(
    acme, globex, make_job, make_run, monkeypatch
):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=4)
    fill(make_run, make_job(acme, "capped", overlap_policy="allow"), 30)
    fill(make_run, make_job(globex, "free", overlap_policy="allow"), 3, start=100)
    read = []
    candidates = claims.claim_candidates
    monkeypatch.setattr(claims, "claim_candidates", lambda params: read.extend(candidates(params)) or read)
    first = claims.claim(["default"], 20, "w", now=NOW)
    # Its room of 4 and one more, held back (what tells that the cap holds it), not the 10 of its share.
    assert Counter(c.tenant_id for c in read) == {acme.pk: 5, globex.pk: 3}
    assert (by(first, "tenant_id"), first.held) == ({acme.pk: 4, globex.pk: 3}, True)
    read.clear()
    second = claims.claim(["default"], 20, "w", now=NOW)
    assert Counter(c.tenant_id for c in read) == {acme.pk: 1}, "at its cap: one run read, none leased"
    assert (second, second.held) == ([], True)


def test_a_claim_that_took_a_whole_share_is_not_held_even_with_a_capped_tenant(acme, globex, make_job, make_run):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=1)
    fill(make_run, make_job(acme, "capped", overlap_policy="allow"), 5)
    fill(make_run, make_job(globex, "many", overlap_policy="allow"), 30, start=100)
    leases = claims.claim(["default"], 10, "w", now=NOW)
    # globex's share (5 of a batch of 10 between two tenants) was taken whole: more of it may be due.
    assert (by(leases, "tenant_id"), leases.held) == ({acme.pk: 1, globex.pk: 5}, False)


def test_it_holds_a_job_to_its_concurrency_limit(acme, make_job, make_run):
    fill(make_run, make_job(acme, "two-at-once", concurrency=2, overlap_policy="allow"), 5)
    first = claims.claim(["default"], 10, "w", now=NOW)
    assert len(first) == 2
    assert claims.claim(["default"], 10, "w", now=NOW) == []
    transitions.complete(first[0].run_id, first[0].fencing_token, "succeeded", now=NOW)
    assert len(claims.claim(["default"], 10, "w", now=NOW)) == 1


def test_it_leaves_the_runs_of_a_paused_job_alone(acme, make_job, make_run):
    job = make_job(acme, "paused", status="paused", overlap_policy="allow")
    fill(make_run, job, 3)
    fill(make_run, make_job(acme, "active", overlap_policy="allow"), 2, start=100)
    leases = claims.claim(["default"], 10, "w", now=NOW)
    assert by(leases, "job_name") == {"active": 2}
    assert Run.objects.filter(job=job, state="scheduled").count() == 3


def test_it_skips_an_occurrence_while_the_previous_runs_under_forbid(acme, make_job, make_run):
    job = make_job(acme, "nightly", overlap_policy="forbid")
    first = make_run(job, due_at=due(0))
    (lease,) = claims.claim(["default"], 10, "w", now=NOW)
    second = make_run(job, due_at=due(60_000))
    assert claims.claim(["default"], 10, "w", now=NOW) == []
    second.refresh_from_db()
    assert second.state == "skipped" and "overlap" in second.reason
    assert lease.run_id == first.pk


def test_it_cancels_the_running_lease_under_replace(acme, make_job, make_run):
    job = make_job(acme, "report", overlap_policy="replace")
    make_run(job, due_at=due(0))
    (old,) = claims.claim(["default"], 10, "w", now=NOW)
    newer = make_run(job, due_at=due(60_000))
    (new,) = claims.claim(["default"], 10, "w", now=NOW)
    assert new.run_id == newer.pk
    with pytest.raises(transitions.StaleLease):
        transitions.heartbeat(old.run_id, old.fencing_token, 30, now=NOW)
    replaced = Run.objects.get(pk=old.run_id)
    assert replaced.state == "cancelled" and f"replaced by run {newer.pk}" in replaced.reason


def test_it_runs_both_under_allow(acme, make_job, make_run):
    job = make_job(acme, "parallel", overlap_policy="allow")
    make_run(job, due_at=due(0))
    claims.claim(["default"], 10, "w", now=NOW)
    make_run(job, due_at=due(60_000))
    assert len(claims.claim(["default"], 10, "w", now=NOW)) == 1
    assert Run.objects.filter(job=job, state="leased").count() == 2


def test_it_applies_overlap_only_to_scheduled_occurrences(acme, make_job, make_run):
    job = make_job(acme, "forbid-but-triggered", overlap_policy="forbid")
    make_run(job, due_at=due(0))
    claims.claim(["default"], 10, "w", now=NOW)
    make_run(job, due_at=due(1), origin="trigger")
    assert len(claims.claim(["default"], 10, "w", now=NOW)) == 1, "a manual trigger is not an overlapping occurrence"


def candidate(i, tenant=1, job=1, priority=1, origin="api", overlap="allow", concurrency=None, job_leased=0, room=1000):
    return Candidate(i, tenant, job, priority, origin, due(i), concurrency, overlap, job_leased, room)


def test_choose_leases_one_of_two_due_occurrences_of_a_forbid_job_and_holds_the_other():
    decision = claims.choose(
        [candidate(1, origin="schedule", overlap="forbid"), candidate(2, origin="schedule", overlap="forbid")], 10
    )
    assert decision.lease == [1] and decision.skip == []


def test_it_skips_the_held_occurrence_once_its_predecessor_runs(acme, make_job, make_run):
    job = make_job(acme, "catch-up", overlap_policy="forbid")
    first, second = make_run(job, due_at=due(0)), make_run(job, due_at=due(60_000))
    (lease,) = claims.claim(["default"], 10, "w", now=NOW)
    assert lease.run_id == first.pk
    assert claims.claim(["default"], 10, "w", now=NOW) == []
    second.refresh_from_db()
    assert second.state == "skipped"


@pytest.mark.parametrize("batch", [1, 10, 100])
def test_the_70_25_5_split_holds_over_1000_claims_at_any_batch_size(batch):
    shares, leased = claims.PriorityShares(), [0, 0, 0]
    for _ in range(1000):
        for p, quota in enumerate(shares.split(batch, [batch, batch, batch])):  # a saturated backlog
            leased[p] += quota
    percent = [100 * n / (1000 * batch) for n in leased]
    assert all(abs(got - want) <= 3 for got, want in zip(percent, (70, 25, 5))), percent


def test_the_split_lets_unused_share_flow_on_without_being_paid_back_later():
    shares = claims.PriorityShares()
    for _ in range(100):  # no critical work for a while: default and bulk take the whole batch
        assert sum(shares.split(10, [0, 1000, 1000])) == 10
    leased = [0, 0, 0]
    for _ in range(100):  # critical work arrives: its share at once, nobody owes anything
        for p, quota in enumerate(shares.split(10, [1000, 1000, 1000])):
            leased[p] += quota
    assert all(abs(got - want) <= 1 for got, want in zip(leased, (700, 250, 50))), leased


def test_it_carries_the_priority_split_from_claim_to_claim_in_the_database(acme, make_job, make_run):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=1000)
    for name, priority in (("critical.job", 0), ("default.job", 1), ("bulk.job", 2)):
        fill(make_run, make_job(acme, name, priority=priority, overlap_policy="allow"), 100, start=priority * 1000)
    shares, leases = claims.PriorityShares(), []
    for _ in range(100):
        leases += claims.claim(["default"], 1, "w", shares=shares, now=NOW)
    assert [by(leases, "job_name")[n] for n in ("critical.job", "default.job", "bulk.job")] == [70, 25, 5]


def test_it_claims_only_the_asked_target_kinds(acme, make_job, make_run):
    fill(make_run, make_job(acme, "python.job", overlap_policy="allow"), 2)
    external = make_job(acme, "external.job", target_kind="external", target_ref="", overlap_policy="allow")
    fill(make_run, external, 2, start=100)
    assert by(claims.claim(["default"], 10, "w", kinds=["python", "http"], now=NOW), "job_name") == {"python.job": 2}
    assert by(claims.claim(["default"], 10, "w", kinds=["external"], now=NOW), "job_name") == {"external.job": 2}


def test_it_claims_every_kind_unless_told(acme, make_job, make_run):
    fill(make_run, make_job(acme, "python.job", overlap_policy="allow"), 1)
    fill(make_run, make_job(acme, "external.job", target_kind="external", target_ref="", overlap_policy="allow"), 1)
    assert by(claims.claim(["default"], 10, "w", now=NOW), "job_name") == {"python.job": 1, "external.job": 1}


def test_it_never_reads_tenants_without_claimable_runs(acme, globex, make_job, make_run):
    idle = Tenant.objects.bulk_create(Tenant(name=f"idle-{i}") for i in range(50))
    fill(make_run, make_job(acme, "acme.job", overlap_policy="allow"), 1)
    make_run(make_job(globex, "later"), due_at=NOW + dt.timedelta(hours=1))  # work, but not due yet
    assert claims.lock_ready_tenants({"queues": ["default"], "tenant": None, "kinds": None, "now": NOW}) == [acme.pk]
    assert idle


def test_it_leases_nothing_of_a_paused_tenant_and_serves_the_others(acme, globex, make_job, make_run):
    fill(make_run, make_job(acme, "acme.job", overlap_policy="allow"), 5)
    fill(make_run, make_job(globex, "globex.job", overlap_policy="allow"), 5, start=100)
    Tenant.objects.filter(pk=acme.pk).update(paused_at=T0)

    leases = claims.claim(["default"], 20, "w", now=NOW)
    own = claims.claim(["default"], 20, "w", tenant_id=acme.pk, now=NOW)  # a worker token of acme

    assert by(leases, "tenant_id") == {globex.pk: 5}
    assert own == []


def test_it_leases_nothing_of_a_paused_queue_and_serves_the_tenants_other_queues(acme, make_job, make_run):
    from jobs.models import QueuePause

    fill(make_run, make_job(acme, "acme.reports", queue="reports", overlap_policy="allow"), 5)
    fill(make_run, make_job(acme, "acme.default", overlap_policy="allow"), 5, start=100)
    QueuePause.objects.create(tenant=acme, queue="reports", paused_at=T0)

    leases = claims.claim(["default", "reports"], 20, "w", now=NOW)
    only_reports = claims.claim(["reports"], 20, "w", now=NOW)

    assert by(leases, "queue") == {"default": 5}
    assert only_reports == []
