"""Every quota, cap and limit of a tenant with its use now (runs.limits), as the API and the portal show them."""

import datetime as dt

from jobs.models import AuditEntry, Tenant
from runs import limits


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
