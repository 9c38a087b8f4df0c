"""The scheduler step of owner notifications (runs.scheduler.STEPS): record, then send.

`tick(now)` records what happened since the last pass (notify.events) and sends what is
due (notify.delivery); both are bounded, and a crash between them loses nothing: the
rows are in the store and the next pass sends them. Returns rows recorded plus tries made.

run_scheduler sends from a `Courier` (`use_courier`): a thread of its own, one delivery
pass at a time, so that a slow webhook (each request may take DUETIME_NOTIFY_TIMEOUT_SECONDS,
a delivery pass its TIME_BUDGET plus one request) never holds the scheduler's pass, which
must renew its shard leases within DUETIME_SHARD_LEASE_SECONDS. Without one (tests, code
calling the step) the pass sends itself.
"""

import datetime as dt
import logging
import threading

from django.conf import settings
from django.db import connection

from notify import delivery, events
from notify.models import Notification

log = logging.getLogger("duetime.notify")
_last_prune = {"at": None}


def tick(now):
    done = events.record(now)
    done += _courier.send(now) if _courier is not None else delivery.deliver(now)
    prune(now)
    return done


class Courier:
    """Delivers in a thread, one pass at a time: a pass that finds the last delivery still running leaves it be."""

    def __init__(self):
        self.thread = None

    def send(self, now):
        """Start a delivery pass unless one is running; returns 0 (its tries are made in the thread)."""
        if self.thread is not None and self.thread.is_alive():
            return 0
        self.thread = threading.Thread(target=self._deliver, args=(now,), name="duetime-notify", daemon=True)
        self.thread.start()
        return 0

    def _deliver(self, now):
        try:
            delivery.deliver(now)
        except Exception:  # noqa: BLE001 - the next pass tries again; a claimed try is retried once its claim passes
            log.exception("notifications: a delivery pass failed")
        finally:
            connection.close()  # this thread's own connection

    def stop(self, timeout):
        """Wait up to `timeout` seconds for a delivery under way (a scheduler stopping)."""
        if self.thread is not None:
            self.thread.join(timeout)


_courier = None


def use_courier():
    """Send from a Courier from now on (run_scheduler); returns it, to stop it on the way out."""
    global _courier
    _courier = Courier()
    return _courier


def prune(now, *, every=dt.timedelta(minutes=10)):
    """Drop notifications older than DUETIME_NOTIFY_RETENTION_DAYS, at most every ten minutes."""
    if _last_prune["at"] and now - _last_prune["at"] < every:
        return 0
    _last_prune["at"] = now
    cutoff = now - dt.timedelta(days=settings.DUETIME_NOTIFY_RETENTION_DAYS)
    deleted, _ = Notification.objects.filter(created_at__lt=cutoff).exclude(status=Notification.Status.PENDING).delete()
    return deleted
