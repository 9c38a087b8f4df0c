"""The tenant-wide failure breaker: opened by a window's failure rate, closed by itself or an operator."""

import datetime as dt

import pytest
from django.core import mail

from jobs.models import AuditEntry, Tenant
from notify import events
from notify.models import Notification
from runs import breaker, claims
from runs.models import TenantMinute
from tests.conftest import NOW


@pytest.fixture(autouse=True)
def every_pass():
    """Each tick in a test is a real pass (the breaker's pass runs at most every EVERY per process)."""
    breaker._last_pass["at"] = None
    yield
    breaker._last_pass["at"] = None


def minutes(tenant, *, ago, succeeded=0, failed=0, timed_out=0, lease_expired=0, now=NOW):
    """One minute row `ago` minutes before `now`, as runs.rollups writes it."""
    start = (now - dt.timedelta(minutes=ago)).replace(second=0, microsecond=0)
    return TenantMinute.objects.create(
        tenant=tenant,
        minute=start,
        succeeded=succeeded,
        failed=failed,
        timed_out=timed_out,
        lease_expired=lease_expired,
    )


def tick(now):
    breaker._last_pass["at"] = None
    return breaker.tick(now)


def fresh(tenant):
    return Tenant.objects.get(pk=tenant.pk)


def test_it_opens_when_more_than_half_of_at_least_100_attempts_failed_over_the_window(acme, globex):
    minutes(acme, ago=1, succeeded=40, failed=50)
    minutes(acme, ago=2, timed_out=5, lease_expired=6)  # 61 of 101 failed: opens
    minutes(globex, ago=1, succeeded=50, failed=50)  # exactly half: stays closed
    minutes(globex, ago=20, failed=1000)  # long before the window: not counted
    assert tick(NOW) == 1
    assert fresh(acme).breaker_opened_at == NOW
    assert fresh(acme).breaker_detail == "60 % of 101 attempts failed over 5 min"
    assert fresh(globex).breaker_opened_at is None
    entry = AuditEntry.objects.get(action="breaker_open")
    assert entry.tenant_id == acme.pk and entry.actor == "system:breaker" and entry.detail["failures"] == 61


def test_it_needs_the_minimum_number_of_attempts(acme, settings):
    minutes(acme, ago=1, failed=99)
    assert tick(NOW) == 0
    settings.DUETIME_BREAKER_MIN_ATTEMPTS = 50
    assert tick(NOW) == 1


def test_a_failure_percent_of_0_turns_it_off(acme, settings):
    settings.DUETIME_BREAKER_FAILURE_PERCENT = 0
    minutes(acme, ago=1, failed=500)
    assert tick(NOW) == 0


def test_an_open_breaker_holds_the_tenants_retries_but_not_its_first_attempts(acme, globex, make_job, make_run):
    job, theirs = make_job(acme, "sync", overlap_policy="allow"), make_job(globex, "sync", overlap_policy="allow")
    due = NOW - dt.timedelta(minutes=1)
    retry = make_run(job, state="retry_wait", due_at=due, attempt=1)
    first = make_run(job, due_at=due + dt.timedelta(seconds=1))
    other_retry = make_run(theirs, state="retry_wait", due_at=due, attempt=1)
    Tenant.objects.filter(pk=acme.pk).update(breaker_opened_at=NOW, breaker_detail="test")
    leased = {lease.run_id for lease in claims.claim(["default"], 10, "w", now=NOW)}
    assert leased == {first.pk, other_retry.pk}, "acme's retry waits; its first attempt and globex's retry run"
    Tenant.objects.filter(pk=acme.pk).update(breaker_opened_at=None)
    assert [lease.run_id for lease in claims.claim(["default"], 10, "w", now=NOW)] == [retry.pk]


def test_it_closes_by_itself_a_window_after_opening_once_the_rate_falls(acme):
    minutes(acme, ago=1, failed=100)
    tick(NOW)
    later = NOW + dt.timedelta(minutes=3)
    minutes(acme, ago=0, succeeded=200, now=later)  # the rate fell, but the breaker stays open a whole window
    assert tick(later) == 0 and fresh(acme).breaker_opened_at == NOW
    after_window = NOW + dt.timedelta(minutes=5)
    assert tick(after_window) == 1
    assert fresh(acme).breaker_opened_at is None
    entry = AuditEntry.objects.get(action="breaker_close")
    assert entry.actor == "system:breaker" and entry.note.startswith("recovered: ")
    assert fresh(acme).breaker_reset_at is None, "a close by itself keeps counting the window as it is"


def test_it_stays_open_while_the_window_still_fails(acme):
    minutes(acme, ago=1, failed=100)
    tick(NOW)
    later = NOW + dt.timedelta(minutes=6)
    minutes(acme, ago=1, failed=150, succeeded=10, now=later)
    assert tick(later) == 0 and fresh(acme).breaker_opened_at == NOW


def test_an_operator_closes_it_audited_and_the_failures_before_no_longer_count(acme):
    minutes(acme, ago=1, failed=100)
    tick(NOW)
    closed_at = NOW + dt.timedelta(seconds=30)
    assert breaker.close(fresh(acme), actor="user:alice", note="downstream is back", now=closed_at) == 1
    assert breaker.close(fresh(acme), actor="user:alice", now=closed_at) == 0, "closed already"
    entry = AuditEntry.objects.get(action="breaker_close")
    assert (entry.actor, entry.note, entry.detail["opened_at"]) == ("user:alice", "downstream is back", NOW.isoformat())
    assert tick(closed_at + dt.timedelta(seconds=20)) == 0, "the failures that opened it were before the close"
    minutes(acme, ago=0, failed=120, now=closed_at + dt.timedelta(minutes=1))
    assert tick(closed_at + dt.timedelta(minutes=1, seconds=10)) == 1, "new failures open it again"


def test_the_owners_hear_of_each_opening_once(acme, alice, django_user_model):
    alice.email = "alice@acme.test"
    alice.save()
    viewer = django_user_model.objects.create_user("vic", email="vic@acme.test")
    acme.members.add(viewer, through_defaults={"role": "viewer"})
    minutes(acme, ago=1, failed=100)
    tick(NOW)
    assert len(events.breaker_rows(NOW)) == 1
    events.record(NOW)
    events.record(NOW + dt.timedelta(seconds=5))
    sent = Notification.objects.get(kind="breaker_open")
    assert (sent.tenant_id, sent.job, sent.recipient) == (acme.pk, None, "alice@acme.test"), "owners only"
    assert "retries held, 100 % of 100 attempts failed" in sent.subject
    assert Notification.objects.filter(kind="breaker_open").count() == 1, "once per opening"


def test_the_breaker_mail_names_no_job(acme, alice):
    from notify import delivery

    alice.email = "alice@acme.test"
    alice.save()
    minutes(acme, ago=1, failed=100)
    tick(NOW)
    events.record(NOW)
    delivery.send_email(Notification.objects.get(kind="breaker_open"))
    assert mail.outbox[0].to == ["alice@acme.test"]
    assert "Job:" not in mail.outbox[0].body and "owners of this tenant" in mail.outbox[0].body
