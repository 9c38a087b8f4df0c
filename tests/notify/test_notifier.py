"""The scheduler step with run_scheduler's courier: a slow webhook holds no pass (without one the pass sends
itself: tests/notify/test_delivery.py, a scheduler tick)."""

import threading

import pytest

from notify import events, notifier
from notify.models import Notification
from tests.notify.conftest import bury
from tests.notify.receiver import Receiver
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)  # the courier's thread reads what the test committed


@pytest.fixture
def courier(monkeypatch):
    made = notifier.Courier()
    monkeypatch.setattr(notifier, "_courier", made)
    yield made
    if Receiver.gate is not None:
        Receiver.gate.set()
    made.stop(30)


def test_with_a_courier_a_pass_does_not_wait_for_a_slow_webhook(watched_job, make_run, receiver, courier, clock):
    Receiver.gate = threading.Event()  # the owner's receiver answers only when the test says so
    events.record(clock.now)
    bury(make_run(watched_job(webhook=receiver), due_at=clock.ago(minutes=5)), clock.now)

    assert notifier.tick(clock.advance(seconds=5)) == 2  # recorded; the sending is the courier's
    wait_until(lambda: len(Receiver.seen) == 1, message="the webhook to be posted")
    assert notifier.tick(clock.advance(seconds=1)) == 0  # a pass while the receiver still holds its answer
    assert courier.thread.is_alive(), "the first delivery is still waiting for the receiver"

    Receiver.gate.set()
    courier.stop(30)
    assert set(Notification.objects.values_list("status", flat=True)) == {"sent"}
    assert len(Receiver.seen) == 1
