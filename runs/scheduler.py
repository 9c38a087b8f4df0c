"""One scheduler pass: the time-driven work of the engine.

`tick(owner, now)` renews this node's shard leases, materialises the owned
shards' cron and `at` occurrences within the look-ahead (each shard fenced by
the epoch this node holds it with), and reaps expired
leases (any node may reap: it is a compare-and-set with SKIP LOCKED). Each
step is bounded; `tick` returns what every step did, and the command loops
again at once while a step reports it hit its bound.
"""

import dataclasses

from jobs import idempotency
from notify import notifier
from runs import breaker, canary, materialize, metrics, reproject, retention, rollups, shards, transitions

REAP_BATCH = 1000
MATERIALIZE_BATCH = 500  # due jobs of one shard a pass materialises at most (runs.materialize.materialize's limit)


@dataclasses.dataclass
class TickResult:
    shards: int = 0
    materialized_jobs: int = 0
    inserted: int = 0
    skipped: int = 0
    reaped: int = 0
    refused_shards: int = 0
    more: bool = False
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def busy(self):
        """True when a step hit its batch bound: there is more to do right now."""
        return self.more or self.materialized_jobs >= MATERIALIZE_BATCH or self.reaped >= REAP_BATCH


# Further periodic steps, each `step(now) -> int` (what it did), run every tick
# after materialising and reaping. Add a step here; keep each one bounded.
STEPS = [
    rollups.tick,  # the portal's lateness rollups (runs/rollups.py)
    breaker.tick,  # tenant failure breakers opened and closed from those rollups (runs/breaker.py)
    idempotency.purge,  # API Idempotency-Key answers past their TTL (jobs/idempotency.py)
    notifier.tick,  # owner notifications: dead letters, skip streaks, lateness (notify/)
    reproject.tick,  # future runs moved when the tz database changes (runs/reproject.py); a stat() per zone
    retention.tick,  # history partitions ahead and past the retention, on one scheduler (runs/retention.py)
]


def tick(owner, now=None):
    """One bounded pass. A crash halfway is harmless: every step is idempotent.

    Leases and the look-ahead are judged by the database clock unless a test pins `now`.
    """
    clock = now or shards.database_now()
    timer = metrics.StepTimer()  # duetime_scheduler_tick_step_seconds, one lap per step
    result = TickResult()
    owned = shards.own_shards(owner, now)
    result.shards = len(owned)
    metrics.shards_held(owner, owned)
    timer.lap("own_shards")
    if owned:
        # The next pass renews the leases: materialising must not hold it back for long.
        done = materialize.materialize(
            clock, shards=owned, owner=owner, limit=MATERIALIZE_BATCH, budget=shards.RENEW_EVERY_SECONDS
        )
        result.materialized_jobs, result.inserted, result.skipped = done.jobs, done.inserted, done.skipped
        result.refused_shards, result.more = done.refused_shards, done.more
        if done.refused_shards < len(owned):
            canary.beat(owner, clock)  # the dead-man's switch: a pass that materialised
        timer.lap("materialize")
    result.reaped = len(transitions.reap(now=now, limit=REAP_BATCH))
    timer.lap("reap")
    for step in STEPS:
        result.extra[step.__module__] = step(clock)
        timer.lap(step.__module__)
    return result
