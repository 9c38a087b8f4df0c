"""One scheduler pass: the time-driven work of the engine.

`tick(now, owner)` renews this node's shard leases, materialises the owned
shards' cron and `at` occurrences within the look-ahead, and reaps expired
leases (any node may reap: it is a compare-and-set with SKIP LOCKED). Each
step is bounded; `tick` returns what every step did, and the command loops
again at once while a step reports it hit its bound.
"""

import dataclasses

from django.utils import timezone

from jobs import idempotency
from runs import materialize, rollups, shards, transitions

REAP_BATCH = 1000
MATERIALIZE_BATCH = 500


@dataclasses.dataclass
class TickResult:
    shards: int = 0
    materialized_jobs: int = 0
    inserted: int = 0
    skipped: int = 0
    reaped: int = 0
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def busy(self):
        """True when a step hit its batch bound: there is more to do right now."""
        return self.materialized_jobs >= MATERIALIZE_BATCH or self.reaped >= REAP_BATCH


# Further periodic steps, each `step(now) -> int` (what it did), run every tick
# after materialising and reaping. Add a step here; keep each one bounded.
STEPS = [
    rollups.tick,  # the portal's lateness rollups (runs/rollups.py)
    idempotency.purge,  # API Idempotency-Key answers past their TTL (jobs/idempotency.py)
]


def tick(owner, now=None):
    """One bounded pass. A crash halfway is harmless: every step is idempotent."""
    clock = now or timezone.now()
    result = TickResult()
    owned = shards.own_shards(owner, clock)
    result.shards = len(owned)
    if owned:
        done = materialize.materialize(clock, shards=owned, limit=MATERIALIZE_BATCH)
        result.materialized_jobs, result.inserted, result.skipped = done.jobs, done.inserted, done.skipped
    # Lease expiry is judged by the database clock unless a test pins `now`.
    result.reaped = len(transitions.reap(now=now, limit=REAP_BATCH))
    for step in STEPS:
        result.extra[step.__module__] = step(clock)
    return result
