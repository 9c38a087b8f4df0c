"""Unique enqueues (tasks_backend.unique, tasks_backend.holds): a second enqueue under a held key returns the
first result; a hold expires after its TTL; two enqueues at once, in threads or processes, make one run."""

import datetime as dt
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection, transaction
from django.tasks.exceptions import InvalidTask

from runs.models import Run
from tasks_backend import holds
from tasks_backend.models import UniqueEnqueue
from tasks_backend.unique import unique_key
from tests.conftest import engine_env
from tests.tasks_backend import tasks


def test_a_task_unique_by_its_arguments_answers_a_repeat_with_the_first_result(initech):
    first = tasks.refresh_prices.enqueue(7, currency="EUR")
    again = tasks.refresh_prices.enqueue(7, currency="EUR")
    other = tasks.refresh_prices.enqueue(8, currency="EUR")

    assert again.id == first.id and (again.args, again.kwargs) == ([7], {"currency": "EUR"})
    assert other.id != first.id
    assert Run.objects.count() == 2


def test_it_logs_the_enqueue_as_django_does_and_a_repeat_not_at_all(initech, caplog):
    with caplog.at_level("DEBUG", logger="django.tasks"):
        first = tasks.refresh_prices.enqueue(7, currency="EUR")
        tasks.refresh_prices.enqueue(7, currency="EUR")

    enqueued = [r.getMessage() for r in caplog.records if "enqueued" in r.getMessage()]
    assert len(enqueued) == 1 and f"id={first.id}" in enqueued[0]


def test_a_block_key_answers_every_enqueue_of_the_task_with_the_first_result(initech):
    with unique_key("invoice-42", ttl=600):
        first = tasks.add.enqueue(1, b=2)
        again = tasks.add.enqueue(40, b=2)  # other arguments, same key
        elsewhere = tasks.noop_task.enqueue()  # the key belongs to each task apart
    after = tasks.add.enqueue(1, b=2)  # outside the block: not unique

    assert again.id == first.id and (again.args, again.kwargs) == ([1], {"b": 2})
    assert len({first.id, elsewhere.id, after.id}) == 3


def test_the_block_key_comes_before_the_tasks_own_option(initech):
    with unique_key("nightly", ttl=60):
        first = tasks.refresh_prices.enqueue(1, currency="EUR")
        again = tasks.refresh_prices.enqueue(2, currency="USD")

    assert again.id == first.id


def test_a_repeat_after_the_ttl_makes_a_new_run(initech):
    first = tasks.refresh_prices.enqueue(7, currency="EUR")
    UniqueEnqueue.objects.update(expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))  # the hold ran out

    again = tasks.refresh_prices.enqueue(7, currency="EUR")
    still = tasks.refresh_prices.enqueue(7, currency="EUR")

    assert again.id != first.id and still.id == again.id
    assert UniqueEnqueue.objects.get().run_id == int(again.id)


def test_a_rolled_back_enqueue_leaves_the_key_free(initech):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.refresh_prices.enqueue(7, currency="EUR")
        raise RuntimeError("the caller's work failed")

    kept = tasks.refresh_prices.enqueue(7, currency="EUR")
    assert Run.objects.get().pk == int(kept.id) and UniqueEnqueue.objects.get().run_id == int(kept.id)


def test_a_hold_whose_run_is_gone_is_taken_over(initech):
    first = tasks.refresh_prices.enqueue(7, currency="EUR")
    Run.objects.filter(pk=first.id).delete()  # retention dropped it before the key expired

    again = tasks.refresh_prices.enqueue(7, currency="EUR")
    assert again.id != first.id and UniqueEnqueue.objects.get().run_id == int(again.id)


def test_a_hold_lasts_its_ttl_by_the_clock(initech, clock):
    holds.hold(initech.pk, "t:key:k", 101, dt.timedelta(minutes=10), clock.now)

    assert holds.holder(initech.pk, "t:key:k", clock.ahead(minutes=9, seconds=59)) == 101
    with pytest.raises(holds.Held) as held:
        holds.hold(initech.pk, "t:key:k", 102, dt.timedelta(minutes=10), clock.ahead(minutes=5))
    assert held.value.run_id == 101
    assert holds.holder(initech.pk, "t:key:k", clock.ahead(minutes=10)) is None
    holds.hold(initech.pk, "t:key:k", 103, dt.timedelta(minutes=10), clock.ahead(minutes=10))
    assert holds.holder(initech.pk, "t:key:k", clock.ahead(minutes=11)) == 103


def test_it_prunes_holds_expired_for_longer_than_a_day(initech, clock):
    holds.hold(initech.pk, "t:key:old", 1, dt.timedelta(seconds=1), clock.ago(days=2))
    holds.hold(initech.pk, "t:key:recent", 2, dt.timedelta(seconds=1), clock.ago(hours=1))

    assert holds.prune(clock.now) == 1
    assert list(UniqueEnqueue.objects.values_list("key", flat=True)) == ["t:key:recent"]


@pytest.mark.parametrize("ttl", [0, -5, dt.timedelta(days=367), "60", True])
def test_it_refuses_a_ttl_that_is_not_a_positive_duration_up_to_a_year(ttl):
    with pytest.raises(InvalidTask):
        with unique_key("k", ttl=ttl):
            pass


@pytest.mark.parametrize("key", ["", "x" * 201, 42])
def test_it_refuses_a_key_that_is_not_a_short_string(key):
    with pytest.raises(ValueError, match="1-200 characters"):
        with unique_key(key, ttl=60):
            pass


def test_the_task_option_is_checked_when_the_task_is_declared():
    from django.tasks import task

    with pytest.raises(InvalidTask, match="unique_for must be more than 0"):
        task(backend="duetime", unique_for=0)(tasks.not_a_task)


# Two enqueues at once: one run. Real threads and processes on the real database.


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_threads_enqueueing_one_key_at_once_make_one_run(initech):
    barrier, ids, errors = threading.Barrier(6), [], []

    def enqueue():
        try:
            barrier.wait(timeout=30)
            with transaction.atomic():  # each thread its own connection and transaction
                result = tasks.refresh_prices.enqueue(7, currency="EUR")
                time.sleep(0.05)  # hold the transaction open while the others try
            ids.append(result.id)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=enqueue) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == [] and len(ids) == 6
    assert len(set(ids)) == 1 and Run.objects.count() == 1


ENQUEUE_WHEN_TOLD = """
import pathlib, sys, time
import django
django.setup()
from tests.tasks_backend import tasks
go = pathlib.Path(sys.argv[1])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
print(tasks.refresh_prices.enqueue(7, currency="EUR").id, flush=True)
"""


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_processes_enqueueing_one_key_at_once_make_one_run(initech, tmp_path):
    go = tmp_path / "go"
    env = engine_env(DJANGO_SETTINGS_MODULE="scheduler_project.settings")
    procs = [
        subprocess.Popen([sys.executable, "-c", ENQUEUE_WHEN_TOLD, str(go)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    assert [p.stdout.readline().strip() for p in procs] == ["ready"] * 4  # Django is up in every one
    go.touch()
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]

    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    assert len(set(outputs)) == 1 and Run.objects.count() == 1
