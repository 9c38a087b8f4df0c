"""Every quota, cap and limit of a tenant with its use now (runs.limits), as the API and the portal show them."""

import datetime as dt

from jobs.models import AuditEntry, QueueLimit, Tenant
from runs import claims, limits, transitions


def by_name(rows):
    return {(row.name, row.scope): row for row in rows}


def test_it_lists_every_quota_cap_and_limit_with_its_use(acme, globex, make_job, make_run, wall_clock):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=2, max_definitions=3)
    acme.refresh_from_db()
    sync = make_job(acme, "sync", concurrency=1, overlap_policy="allow")
    make_job(acme, "other")
    make_run(sync, state="leased")
    make_run(sync)
    make_run(make_job(globex, "theirs"), state="leased")  # not acme's
    AuditEntry.objects.create(tenant=acme, actor="token:x", action="api", object_type="runs.run", object_id="1")

    rows = by_name(limits.usage(acme, now=wall_clock.now + dt.timedelta(seconds=1)))

    assert [
        (r.limit, r.used) for r in (rows[("max_definitions", "tenant")], rows[("max_concurrent_runs", "tenant")])
    ] == [
        (3, 2),
        (2, 1),
    ]
    assert rows[("max_pending_runs", "tenant")].used == 2
    assert rows[("enqueue_rate_per_minute", "tenant")].used == 1
    job = rows[("job_concurrency", "job sync")]
    assert (job.limit, job.used, job.at_limit, job.enforced_by) == (1, 1, True, "claim")
    breaker = rows[("failure_breaker", "tenant")]
    assert (breaker.limit, breaker.used) == (50, 0) and "closed" in breaker.description


# --- enforced in the claim: queue limits and concurrency groups ------------------------------------

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
NOW = T0 + dt.timedelta(hours=1)


def fill(make_run, job, count, start=0):
    return [make_run(job, due_at=T0 + dt.timedelta(milliseconds=start + i), origin="api") for i in range(count)]


def leased_by_tenant(leases):
    found = {}
    for lease in leases:
        found[lease.tenant_id] = found.get(lease.tenant_id, 0) + 1
    return found


def test_a_tenants_queue_limit_holds_its_running_runs_on_that_queue(acme, globex, make_job, make_run):
    QueueLimit.objects.create(tenant=acme, queue="default", max_running=2)
    fill(make_run, make_job(acme, "sync", overlap_policy="allow"), 5)
    fill(make_run, make_job(acme, "mail", queue="mail", overlap_policy="allow"), 2)
    fill(make_run, make_job(globex, "sync", overlap_policy="allow"), 5)
    first = claims.claim(["default", "mail"], 20, "w", now=NOW)
    assert {(lease.tenant_id, lease.queue) for lease in first} == {
        (acme.pk, "default"),
        (acme.pk, "mail"),
        (globex.pk, "default"),
    }
    assert sum(1 for lease in first if (lease.tenant_id, lease.queue) == (acme.pk, "default")) == 2
    assert claims.claim(["default"], 20, "w", now=NOW) == [], "two run: acme's queue is full, globex is done"


def test_a_platform_queue_limit_holds_every_tenants_runs_together(acme, globex, make_job, make_run):
    QueueLimit.objects.create(tenant=None, queue="default", max_running=3)
    fill(make_run, make_job(acme, "sync", overlap_policy="allow"), 5)
    fill(make_run, make_job(globex, "sync", overlap_policy="allow"), 5)
    assert len(claims.claim(["default"], 20, "w", now=NOW)) == 3
    assert claims.claim(["default"], 20, "w", now=NOW) == []


def test_a_rate_limit_allows_n_starts_per_calendar_second(acme, make_job, make_run):
    QueueLimit.objects.create(tenant=acme, queue="default", max_starts=3, rate_per="second")
    fill(make_run, make_job(acme, "sync", overlap_policy="allow"), 10)
    assert len(claims.claim(["default"], 20, "w", now=NOW)) == 3
    assert claims.claim(["default"], 20, "w", now=NOW + dt.timedelta(milliseconds=900)) == []
    assert len(claims.claim(["default"], 20, "w", now=NOW + dt.timedelta(seconds=1))) == 3
    row = QueueLimit.objects.get()
    assert (row.window_start, row.window_starts) == (NOW + dt.timedelta(seconds=1), 3)


def test_a_rate_limit_per_minute_on_the_platform(acme, globex, make_job, make_run):
    QueueLimit.objects.create(tenant=None, queue="default", max_starts=4, rate_per="minute")
    fill(make_run, make_job(acme, "sync", overlap_policy="allow"), 5)
    fill(make_run, make_job(globex, "sync", overlap_policy="allow"), 5)
    assert len(claims.claim(["default"], 3, "w", now=NOW)) == 3
    assert len(claims.claim(["default"], 20, "w", now=NOW + dt.timedelta(seconds=30))) == 1
    assert claims.claim(["default"], 20, "w", now=NOW + dt.timedelta(seconds=59)) == []
    assert len(claims.claim(["default"], 20, "w", now=NOW + dt.timedelta(seconds=60))) == 4


def test_a_concurrency_group_of_1_runs_one_run_of_its_jobs_at_a_time(acme, globex, make_job, make_run):
    nightly = make_job(acme, "nightly", overlap_policy="allow", concurrency_group="db")
    report = make_job(acme, "report", overlap_policy="allow", concurrency_group="db")
    fill(make_run, nightly, 3)
    fill(make_run, report, 3, start=1)
    fill(make_run, make_job(globex, "other", overlap_policy="allow", concurrency_group="db"), 2)  # globex's own group
    first = claims.claim(["default"], 20, "w", now=NOW)
    assert leased_by_tenant(first) == {acme.pk: 1, globex.pk: 1}
    assert claims.claim(["default"], 20, "w", now=NOW) == []
    (ours,) = [lease for lease in first if lease.tenant_id == acme.pk]
    transitions.complete(ours.run_id, ours.fencing_token, "succeeded", now=NOW)
    assert leased_by_tenant(claims.claim(["default"], 20, "w", now=NOW)) == {acme.pk: 1}


def test_each_job_of_a_group_starts_only_below_its_own_limit(acme, make_job, make_run):
    wide = make_job(acme, "wide", overlap_policy="allow", concurrency_group="db", concurrency_group_limit=3)
    narrow = make_job(acme, "narrow", overlap_policy="allow", concurrency_group="db", concurrency_group_limit=1)
    fill(make_run, wide, 5)
    leases = claims.claim(["default"], 20, "w", now=NOW)
    assert len(leases) == 3
    fill(make_run, narrow, 2, start=100)
    assert claims.claim(["default"], 20, "w", now=NOW) == [], "three run: narrow waits until none does"


def test_the_limits_that_hold_a_claim_back_are_counted(acme, make_job, make_run):
    from runs import metrics

    QueueLimit.objects.create(tenant=acme, queue="default", max_running=1)
    fill(make_run, make_job(acme, "sync", overlap_policy="allow"), 3)
    seen = []
    original = metrics.capped
    metrics.capped = lambda held: seen.append(set(held))
    try:
        claims.claim(["default"], 20, "w", now=NOW)
    finally:
        metrics.capped = original
    assert seen == [{(acme.pk, "queue_concurrency")}]


def test_the_list_shows_queue_limits_and_groups_with_their_use(acme, globex, make_job, make_run, wall_clock):
    QueueLimit.objects.create(tenant=acme, queue="default", max_running=4, max_starts=10, rate_per="minute")
    QueueLimit.objects.create(tenant=None, queue="mail", max_running=50)
    QueueLimit.objects.create(tenant=globex, queue="default", max_running=1)  # not acme's
    make_run(make_job(acme, "nightly", concurrency_group="db"), state="leased")
    make_job(acme, "report", concurrency_group="db", concurrency_group_limit=2)

    rows = by_name(limits.usage(acme, now=wall_clock.now))

    assert (rows[("queue_concurrency", "queue default")].limit, rows[("queue_concurrency", "queue default")].used) == (
        4,
        1,
    )
    assert rows[("queue_rate", "queue default")].limit == 10
    assert rows[("platform_queue_concurrency", "queue mail (every tenant together)")].limit == 50
    group = rows[("concurrency_group", "group db")]
    assert (group.limit, group.used) == (1, 1) and "nightly, report" in group.description
    assert not any(
        scope == "queue default" and row.limit == 1 for (_n, scope), row in rows.items() if _n == "queue_concurrency"
    )
