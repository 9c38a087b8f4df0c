"""Retention: history kept DUETIME_RETENTION_DAYS, audit entries a year; a scheduler step.

`tick(now)` runs every scheduler pass and does its work at most every
EVERY, on one scheduler at a time: the `retention` row of runs.ShardLease,
taken by compare-and-set with an epoch from the fencing sequence, like the
shards (runs/shards.py). Its cost does not grow with the tables:

- PostgreSQL: it creates the partitions of the next AHEAD_DAYS days and
  drops the days past the retention whole (runs/partitions.py: DETACH ...
  CONCURRENTLY, then DROP), so claims never wait behind it and nothing is
  deleted row by row. Drops need autocommit: inside a transaction (a test's)
  it only creates.
- SQLite: it deletes at most BATCH rows of each table per pass, by history_day.
- Both: at most BATCH audit entries older than AUDIT_DAYS.

What is kept: a run, its attempts and its dead letters are history from the
day the run finished (or its letter was resolved); retention removes them
once that day is more than DUETIME_RETENTION_DAYS old (up to one day later on
PostgreSQL, where a day goes as a whole). A dead run with an open dead letter
is not history (runs.models.HISTORY_STATES): it is kept until the letter is
replayed or discarded, and for the retention after that.

A crash halfway leaves nothing inconsistent: each partition change is
atomic or finished on the next pass (partitions.leftovers), each batch a
statement of its own.
"""

import datetime as dt
import logging
import os
import socket

from django.conf import settings
from django.db import DatabaseError, connection

from dlq.models import DeadLetter
from jobs.models import AuditEntry
from runs import leases, partitions, shards
from runs.models import Attempt, Run

log = logging.getLogger("duetime.retention")

LEASE_NAME = "retention"
EVERY = dt.timedelta(minutes=5)
LEASE = dt.timedelta(minutes=15)  # a holder that died is replaced after this
BATCH = 5_000
AUDIT_DAYS = 365
OWNER = f"{socket.gethostname()}:{os.getpid()}"


def tick(now, *, owner=OWNER):
    """One retention pass if it is due and this process holds the lease; returns what it did.

    The count of partitions created and dropped plus rows deleted (0 when
    not due, or when another scheduler holds the lease).
    """
    if not take_lease(owner, now):
        return 0
    today = now.astimezone(dt.UTC).date()
    done = 0
    if partitions.partitioned():
        done += len(partitions.ensure_ahead(today))
        if not connection.in_atomic_block:
            done += drop_expired(today)
    else:
        done += delete_expired(today)
    done += delete_old_audit(now)
    return done


def take_lease(owner, now):
    """True when `owner` may do a pass now: it holds the lease (or took it) and EVERY passed since its last.

    The holder renews the row at each pass (expires_at = now + LEASE), so the
    pass is due once expires_at is within LEASE - EVERY of now; another node
    takes the lease, with a new epoch, only once it expired.
    """
    leases.ensure([LEASE_NAME])
    if leases.renew([LEASE_NAME], owner, until=now + LEASE, due=now + LEASE - EVERY):
        return True
    (epoch,) = shards.next_fencing_tokens(1)
    return leases.take(LEASE_NAME, owner, clock=now, until=now + LEASE, epoch=epoch)


def drop_expired(today):
    """PostgreSQL: drop the days past the retention, and finish any drop cut short; returns days dropped."""
    dropped = 0
    for day in partitions.leftovers() + partitions.expired(today, settings.DUETIME_RETENTION_DAYS):
        try:
            partitions.drop(day)
        except DatabaseError:
            # A lock it waited for too long (partitions.LOCK_TIMEOUT): the next pass finishes it.
            log.warning("retention: dropping the partitions of %s did not finish; next pass", day, exc_info=True)
            break
        log.info("retention: dropped the history of %s", day)
        dropped += 1
    return dropped


def delete_expired(today):
    """SQLite: delete up to BATCH rows of each table past the retention; returns rows deleted.

    Letters and attempts first, by their own history_day (never later than
    their run's), so a run is never deleted before them.
    """
    cutoff = today - dt.timedelta(days=settings.DUETIME_RETENTION_DAYS)
    deleted = 0
    for model in (DeadLetter, Attempt, Run):
        ids = list(model.objects.filter(history_day__lt=cutoff).values_list("pk", flat=True)[:BATCH])
        if ids:
            deleted += model.objects.filter(pk__in=ids).delete()[0]
    return deleted


def delete_old_audit(now):
    """Up to BATCH audit entries older than AUDIT_DAYS (index on `at`); returns how many."""
    old = AuditEntry.objects.filter(at__lt=now - dt.timedelta(days=AUDIT_DAYS))
    ids = list(old.order_by("at").values_list("pk", flat=True)[:BATCH])
    return AuditEntry.objects.filter(pk__in=ids).delete()[0] if ids else 0
