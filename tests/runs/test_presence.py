"""Presence of consumers: announced, read by the clock, expired, forgotten, pruned."""

import pytest

from runs import presence
from runs.models import Consumer

pytestmark = pytest.mark.django_db


def test_it_serves_the_kinds_and_queues_a_consumer_announced(clock):
    presence.announce("host:1", ["python", "http"], ["default", "reports"], now=clock.now)
    assert presence.serving("python", "reports", now=clock.now)
    assert presence.serving("http", "default", now=clock.now)
    assert not presence.serving("external", "default", now=clock.now)
    assert not presence.serving("python", "billing", now=clock.now)


def test_a_consumer_without_queues_serves_every_queue(clock):
    presence.announce("dispatcher", ["celery"], None, now=clock.now)
    assert presence.serving("celery", "anything", now=clock.now)


def test_an_announcement_expires_by_the_clock_and_a_new_one_renews_it(clock):
    presence.announce("host:1", ["python"], ["default"], now=clock.now)
    assert presence.serving("python", "default", now=clock.advance(seconds=presence.TTL_SECONDS - 1))
    assert not presence.serving("python", "default", now=clock.advance(seconds=2))
    presence.announce("host:1", ["python"], ["default"], now=clock.now)
    assert presence.serving("python", "default", now=clock.now)
    assert Consumer.objects.count() == 1  # an upsert, not a row per announcement


def test_a_forgotten_consumer_stops_serving_at_once_but_is_remembered_as_last_seen(clock):
    presence.announce("host:1", ["python"], ["default"], now=clock.ago(minutes=5))
    presence.forget("host:1", now=clock.now)
    assert not presence.serving("python", "default", now=clock.now)
    assert presence.last_seen("python", "default") == clock.ago(minutes=5)


def test_it_prunes_rows_expired_for_longer_than_a_day(clock):
    presence.announce("gone", ["python"], ["default"], now=clock.ago(days=2))
    presence.announce("here", ["python"], ["default"], now=clock.now)
    assert list(Consumer.objects.values_list("name", flat=True)) == ["here"]


def test_a_tenants_consumer_serves_only_that_tenant(clock, acme, globex):
    presence.announce("token:abc@reports", ["external"], ["reports"], now=clock.now, tenant_id=acme.pk)
    assert presence.serving("external", "reports", now=clock.now, tenant_id=acme.pk)
    assert not presence.serving("external", "reports", now=clock.now, tenant_id=globex.pk)


def test_it_says_what_no_running_consumer_serves_and_when_one_was_last_seen(clock):
    assert presence.unserved("external", "reports", now=clock.now) == (
        "No running consumer executes 'external' jobs on queue 'reports' (last seen: never): "
        "its runs wait until one starts."
    )
    presence.announce("token:abc@reports", ["external"], ["reports"], now=clock.ago(minutes=6))
    assert "(last seen: 6\xa0minutes ago)" in presence.unserved("external", "reports", now=clock.now)
    presence.announce("token:abc@reports", ["external"], ["reports"], now=clock.now)
    assert presence.unserved("external", "reports", now=clock.now) is None


def test_it_warns_about_soft_timeouts_when_only_thread_pool_workers_run_a_python_job(clock):
    presence.announce("host:1", ["python", "http"], ["default"], now=clock.now, pool="threads")
    assert presence.soft_timeouts("python", "default", 900, now=clock.now) == (
        "Only thread-pool workers (run_worker --pool threads) run this job's runs: a handler past its 900 s "
        "timeout is recorded timed_out and retried, but keeps running. Start workers on queue 'default' with "
        "--pool processes to stop it at its timeout."
    )
    assert presence.soft_timeouts("http", "default", 900, now=clock.now) is None  # the socket carries it
    assert presence.soft_timeouts("python", "reports", 900, now=clock.now) is None  # unserved says that one


def test_one_processes_pool_worker_is_enough_to_stop_handlers_at_their_timeout(clock):
    presence.announce("host:1", ["python", "http"], ["default"], now=clock.now, pool="threads")
    presence.announce("host:2", ["python", "http"], ["default"], now=clock.now, pool="processes")
    assert presence.soft_timeouts("python", "default", 900, now=clock.now) is None
    clock.advance(seconds=presence.TTL_SECONDS + 1)
    presence.announce("host:1", ["python", "http"], ["default"], now=clock.now, pool="threads")
    assert presence.soft_timeouts("python", "default", 900, now=clock.now) is not None, "host:2 is gone"
