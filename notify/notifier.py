"""The scheduler step of owner notifications (runs.scheduler.STEPS): record, then send.

`tick(now)` records what happened since the last pass (notify.events) and sends what is
due (notify.delivery); both are bounded, and a crash between them loses nothing: the
rows are in the store and the next pass sends them. Returns rows recorded plus tries made.
"""

import datetime as dt

from django.conf import settings

from notify import delivery, events
from notify.models import Notification

_last_prune = {"at": None}


def tick(now):
    done = events.record(now) + delivery.deliver(now)
    prune(now)
    return done


def prune(now, *, every=dt.timedelta(minutes=10)):
    """Drop notifications older than DUETIME_NOTIFY_RETENTION_DAYS, at most every ten minutes."""
    if _last_prune["at"] and now - _last_prune["at"] < every:
        return 0
    _last_prune["at"] = now
    cutoff = now - dt.timedelta(days=settings.DUETIME_NOTIFY_RETENTION_DAYS)
    deleted, _ = Notification.objects.filter(created_at__lt=cutoff).exclude(status=Notification.Status.PENDING).delete()
    return deleted
