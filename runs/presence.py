"""Which consumers of runs are running, and what each takes: presence rows.

A consumer is whatever takes runs off the queues: a `run_worker` (the
`python` and `http` kinds), an external worker leasing over HTTP with its
token (`external`), the Celery dispatcher. Each `announce`s itself when it
starts and again every ANNOUNCE_SECONDS or so; its row counts for TTL_SECONDS
after the last announcement, so one that died without `forget` stops counting
by itself. The job page asks `serving(kind, queue)` and warns about a job
whose runs nothing running will take, and `soft_timeouts(...)` about a
python job whose timeout nothing running enforces (only `--pool threads`
workers serve it: a handler past its timeout keeps running). Rows expired for longer than
KEEP_SECONDS are pruned (until then they say when such a consumer was last
seen).
"""

import datetime as dt

from django.utils import timezone
from django.utils.timesince import timesince

from runs.models import Consumer

ANNOUNCE_SECONDS = 10  # how often a running consumer announces itself
TTL_SECONDS = 60  # a consumer not heard of for this long is no longer running
KEEP_SECONDS = 24 * 3600  # how long an expired row stays, for "last seen"
# runs.worker.POOL_THREADS: the pool whose handlers outlive their timeout. Only `python` handlers can:
# an `http` target's socket carries the timeout in either pool.
SOFT_TIMEOUT_POOL = "threads"
SOFT_TIMEOUT_KINDS = ("python",)


def announce(name, kinds, queues, now=None, *, tenant_id=None, pool=""):
    """Upsert `name`'s presence: it takes runs of `kinds` on `queues` (None: every queue), for TTL_SECONDS.

    `tenant_id` names the one tenant whose runs it takes (a worker token);
    None means every tenant. `pool` is a run_worker's pool (`threads` or
    `processes`), empty for other consumers. One statement, plus the pruning of rows long
    expired; safe to call from many processes at once.
    """
    now = now or timezone.now()
    row = Consumer(
        name=name,
        kinds=sorted(set(kinds)),
        queues=None if queues is None else sorted(set(queues)),
        tenant_id=tenant_id,
        pool=pool,
        last_seen=now,
        expires_at=now + dt.timedelta(seconds=TTL_SECONDS),
    )
    Consumer.objects.bulk_create(
        [row],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=["kinds", "queues", "tenant", "pool", "last_seen", "expires_at"],
    )
    prune(now)


def serving(kind, queue, now=None, *, tenant_id=None):
    """Whether a running consumer takes runs of `kind` on `queue` (of the tenant `tenant_id`, when given)."""
    return bool(running(kind, queue, now, tenant_id=tenant_id))


def running(kind, queue, now=None, *, tenant_id=None):
    """The running consumers that take runs of `kind` on `queue` (of the tenant `tenant_id`, when given)."""
    now = now or timezone.now()
    return [c for c in Consumer.objects.filter(expires_at__gt=now) if c.serves(kind, queue, tenant_id)]


def last_seen(kind, queue, *, tenant_id=None):
    """When a consumer of `kind` on `queue` was last heard of (running or not, within KEEP_SECONDS); None: never."""
    seen = [c.last_seen for c in Consumer.objects.all() if c.serves(kind, queue, tenant_id)]
    return max(seen, default=None)


def forget(name, now=None):
    """End `name`'s presence at once (a graceful stop); its row still says when it was last seen."""
    Consumer.objects.filter(name=name).update(expires_at=now or timezone.now())


def unserved(kind, queue, now=None, *, tenant_id=None):
    """None if a running consumer takes runs of `kind` on `queue`; else a warning that says so, for a job page."""
    now = now or timezone.now()
    if serving(kind, queue, now, tenant_id=tenant_id):
        return None
    seen = last_seen(kind, queue, tenant_id=tenant_id)
    when = "never" if seen is None else f"{timesince(seen, now)} ago"
    return f"No running consumer executes {kind!r} jobs on queue {queue!r} (last seen: {when}): its runs wait until one starts."


def soft_timeouts(kind, queue, timeout_seconds, now=None, *, tenant_id=None):
    """A warning for a job page when only thread-pool workers serve `kind` on `queue`; else None.

    There, a handler past `timeout_seconds` is recorded `timed_out` and its
    run retried, but the handler itself keeps running (and may keep writing).
    None when any running worker of the `processes` pool serves it, when
    nothing runs it at all (`unserved` says so), or for kinds whose timeout
    every pool enforces.
    """
    if kind not in SOFT_TIMEOUT_KINDS:
        return None
    pools = {c.pool for c in running(kind, queue, now, tenant_id=tenant_id)}
    if pools != {SOFT_TIMEOUT_POOL}:
        return None
    return (
        f"Only thread-pool workers (run_worker --pool threads) run this job's runs: a handler past its "
        f"{timeout_seconds} s timeout is recorded timed_out and retried, but keeps running. "
        f"Start workers on queue {queue!r} with --pool processes to stop it at its timeout."
    )


def prune(now=None):
    """Delete the rows expired for longer than KEEP_SECONDS; returns how many."""
    now = now or timezone.now()
    deleted, _ = Consumer.objects.filter(expires_at__lt=now - dt.timedelta(seconds=KEEP_SECONDS)).delete()
    return deleted
