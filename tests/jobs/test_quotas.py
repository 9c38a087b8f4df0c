"""Acme shares the scheduler with Globex; its quotas keep it from filling it.

A quota refused is a `QuotaExceeded` naming the quota, its limit and when a
retry may pass. The HTTP answer (429, Retry-After) is tested in tests/jobs/api/test_quotas.py.
"""

import pytest

from jobs import audit, quotas
from jobs.models import AuditEntry, Tenant
from jobs.quotas import QuotaExceeded


def with_quotas(tenant, **limits):
    Tenant.objects.filter(pk=tenant.pk).update(**limits)
    tenant.refresh_from_db()
    return tenant


@pytest.fixture
def enqueued(acme):
    """Record that Acme created a run through the API (or did something else) at `at`."""

    def record(at, action="api"):
        entry = audit.record("token:dt_t_acme", action, acme, tenant=acme)
        AuditEntry.objects.filter(pk=entry.pk).update(at=at)

    return record


def test_it_lets_acme_enqueue_up_to_its_rate(acme, enqueued, clock):
    with_quotas(acme, enqueue_rate_per_minute=2)
    enqueued(clock.ago(seconds=30))

    quotas.check_rate(acme, now=clock.now)


def test_it_refuses_a_run_over_the_rate_until_the_oldest_leaves_the_minute(acme, enqueued, clock):
    with_quotas(acme, enqueue_rate_per_minute=2)
    enqueued(clock.ago(seconds=50))
    enqueued(clock.ago(seconds=10))

    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_rate(acme, now=clock.now)

    assert (refused.value.quota, refused.value.limit, refused.value.retry_after) == ("enqueue_rate_per_minute", 2, 10)
    assert "2 runs a minute" in str(refused.value)


def test_it_forgets_runs_created_more_than_a_minute_ago(acme, enqueued, clock):
    with_quotas(acme, enqueue_rate_per_minute=2)
    enqueued(clock.ago(seconds=61))
    enqueued(clock.ago(seconds=10))

    quotas.check_rate(acme, now=clock.now)


def test_it_counts_triggers_but_not_other_changes_against_the_rate(acme, enqueued, clock):
    with_quotas(acme, enqueue_rate_per_minute=2)
    enqueued(clock.ago(seconds=20), action="trigger")
    enqueued(clock.ago(seconds=10), action="pause")

    quotas.check_rate(acme, now=clock.now)
    enqueued(clock.ago(seconds=5), action="trigger")
    with pytest.raises(QuotaExceeded):
        quotas.check_rate(acme, now=clock.now)


def test_it_refuses_more_pending_runs_than_the_quota(acme, make_job, make_run, clock):
    with_quotas(acme, max_pending_runs=2)
    job = make_job(acme)
    make_run(job, state="scheduled", due_at=clock.ahead(hours=1))
    make_run(job, state="leased", due_at=clock.ago(minutes=1))

    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_pending(acme)

    assert (refused.value.quota, refused.value.limit, refused.value.retry_after) == ("max_pending_runs", 2, 60)


def test_it_counts_only_runs_that_have_not_finished(acme, make_job, make_run, clock):
    with_quotas(acme, max_pending_runs=2)
    job = make_job(acme)
    make_run(job, state="retry_wait", due_at=clock.ago(minutes=3))
    for minutes, state in enumerate(["succeeded", "dead", "cancelled", "skipped"], start=4):
        make_run(job, state=state, due_at=clock.ago(minutes=minutes))

    quotas.check_pending(acme)


def test_it_counts_every_run_a_backfill_would_create(acme, make_job, make_run, clock):
    with_quotas(acme, max_pending_runs=3)
    make_run(make_job(acme), due_at=clock.ahead(hours=1))

    quotas.check_pending(acme, count=2)
    with pytest.raises(QuotaExceeded):
        quotas.check_pending(acme, count=3)


def test_it_refuses_a_backfill_larger_than_the_quota_itself(acme):
    with_quotas(acme, max_pending_runs=3)

    with pytest.raises(QuotaExceeded):
        quotas.check_pending(acme, count=4)


def test_it_does_not_count_globex_runs_against_acme(acme, globex, make_job, make_run, clock):
    with_quotas(acme, max_pending_runs=1)
    make_run(make_job(globex, "globex.payroll"), due_at=clock.ahead(hours=1))

    quotas.check_pending(acme)


def test_it_refuses_a_definition_over_the_quota_with_no_time_to_wait(acme, make_job):
    with_quotas(acme, max_definitions=1)
    make_job(acme)

    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_definitions(acme)

    assert (refused.value.quota, refused.value.limit, refused.value.retry_after) == ("max_definitions", 1, None)
    assert "delete one" in str(refused.value)


def test_it_does_not_count_deleted_definitions(acme, make_job):
    with_quotas(acme, max_definitions=1)
    make_job(acme, status="cancelled")

    quotas.check_definitions(acme)
