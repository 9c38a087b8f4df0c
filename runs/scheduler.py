"""One scheduler pass: the time-driven work of the engine.

`tick(now, owner)` renews this node's shard leases, materialises the owned
shards' cron and `at` occurrences within the look-ahead, and reaps expired
leases (any node may reap: it is a compare-and-set with SKIP LOCKED). Each
step is bounded; `tick` returns what every step did, and the command loops
again at once while a step reports it hit its bound.
"""

import dataclasses

from django.utils import timezone

from runs import materialize, shards, transitions

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


def _step_extra():
    """Further periodic steps, each `step(now) -> int` (rollups, idempotency purge)."""
    steps = []
    try:
        from runs import rollups

        steps.append(("rollups", rollups.tick))
    except ImportError:
        pass
    try:
        from jobs import idempotency

        steps.append(("idempotency_purge", idempotency.purge))
    except ImportError:
        pass
    return steps


STEPS = None


def tick(owner, now=None):
    """One bounded pass. A crash halfway is harmless: every step is idempotent."""
    global STEPS
    if STEPS is None:
        STEPS = _step_extra()
    clock = now or timezone.now()
    result = TickResult()
    owned = shards.own_shards(owner, clock)
    result.shards = len(owned)
    if owned:
        done = materialize.materialize(clock, shards=owned, limit=MATERIALIZE_BATCH)
        result.materialized_jobs, result.inserted, result.skipped = done.jobs, done.inserted, done.skipped
    # Lease expiry is judged by the database clock unless a test pins `now`.
    result.reaped = len(transitions.reap(now=now, limit=REAP_BATCH))
    for name, step in STEPS:
        result.extra[name] = step(clock)
    return result
