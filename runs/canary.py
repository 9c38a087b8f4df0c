"""The canaries and the dead-man's switch: is the engine itself alive?

A canary is a built-in job per shard, every minute, under the system tenant
(`SYSTEM_TENANT`, left out of the tenants' portal lists): a scheduler must
materialise it and a run_worker serving DUETIME_CANARY_QUEUE must execute its
task (`ping`) for it to succeed. `ensure()` creates the tenant and the 64 jobs
(idempotent; run_scheduler calls it at start when DUETIME_CANARY is on). A
canary run that has not succeeded CANARY_GRACE after its minute is *missed*;
missed twice in a row on a shard is an alert (docs/operations.md).

The dead-man's switch: every scheduler pass that materialised (owned shards
and wrote for them) stamps the `last-pass` row (`beat`); each node's own
heartbeat is its `node:` lease row (runs.shards.live_nodes). When no node is
alive, or no pass stamped the row for DEADMAN_SECONDS, `status()` says "no
scheduler has materialised for N s". The portal's overview and the metrics
(runs.metrics.DatabaseCollector, through `collect`) read the same `status()`.
"""

import dataclasses
import datetime as dt

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.tasks import task
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from jobs.models import SHARDS, SYSTEM_TENANT, JobDefinition, Tenant
from runs import leases
from runs.models import Run

CANARY_PREFIX = "canary.shard-"
CANARY_TASK = "runs.canary.ping"
# A canary due at hh:mm:00 that has not succeeded by hh:mm:30 is missed (a claim takes milliseconds).
CANARY_GRACE = dt.timedelta(seconds=30)
MISSED_ALERT = 2
# The ShardLease row each materialising pass stamps: its expires_at is the instant of that pass.
LAST_PASS = "last-pass"
# A scheduler passes at most 1 s apart (runs.shards.RENEW_EVERY_SECONDS) and a
# busy pass of 500 jobs takes about a second: 5 s without one is an outage.
DEADMAN_SECONDS = 5.0


@task
def ping():
    """The canaries' task: it succeeds, so a run that did not is the engine's fault, not a handler's."""
    return "ok"


def canary_name(shard):
    return f"{CANARY_PREFIX}{shard:02d}"


def ensure(now=None):
    """Create the system tenant and one canary job per shard if missing; returns how many jobs it created.

    Safe to call from every scheduler at start (unique tenant name, unique
    (tenant, name)); moves existing canaries to DUETIME_CANARY_QUEUE.
    """
    now = now or timezone.now()
    first = now.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    with transaction.atomic():
        tenant, _ = Tenant.objects.get_or_create(
            name=SYSTEM_TENANT, defaults={"task_module_prefixes": "runs.canary", "max_definitions": SHARDS}
        )
        existing = set(JobDefinition.objects.filter(tenant=tenant).values_list("name", flat=True))
        missing = [canary_job(tenant, shard, first) for shard in range(SHARDS) if canary_name(shard) not in existing]
        JobDefinition.objects.bulk_create(missing, ignore_conflicts=True)
        # Minutes before `now` are never counted missed (missed_canaries reads created_at, on the same clock).
        JobDefinition.objects.filter(tenant=tenant, name__in=[job.name for job in missing]).update(created_at=now)
        queue = settings.DUETIME_CANARY_QUEUE
        JobDefinition.objects.filter(tenant=tenant, name__startswith=CANARY_PREFIX).exclude(queue=queue).update(
            queue=queue
        )
    return len(missing)


def canary_job(tenant, shard, first):
    # Built directly (not save_definition): the shard is chosen, not hashed, and the job is not a tenant's.
    return JobDefinition(
        tenant=tenant,
        name=canary_name(shard),
        cron_expr="* * * * *",
        time_zone="UTC",
        missed_run_policy=JobDefinition.MissedRunPolicy.SKIP,  # catching up on missed canaries proves nothing
        queue=settings.DUETIME_CANARY_QUEUE,
        priority=JobDefinition.Priority.CRITICAL,  # measures the engine, not the backlog
        timeout_seconds=60,
        max_attempts=1,
        retry_base_seconds=0,
        retry_max_seconds=0,
        target_kind=JobDefinition.TargetKind.PYTHON,
        target_ref=CANARY_TASK,
        next_due_at=first,
        shard=shard,
    )


def is_system_tenant(name):
    return name == SYSTEM_TENANT


def beat(owner, now):
    """Stamp the dead-man's switch: `owner` finished a pass that materialised its shards at `now`."""
    leases.stamp(LAST_PASS, owner, until=now)


@dataclasses.dataclass
class Status:
    nodes_alive: int
    last_pass_at: dt.datetime | None
    seconds_since_pass: float | None  # None: no scheduler ever materialised
    missed: dict  # shard -> canary occurrences missed in a row (0, 1 or 2), for the shards that have a canary

    @property
    def dead(self):
        """The dead-man's switch fired: no scheduler alive, or none materialised for DEADMAN_SECONDS."""
        return self.nodes_alive == 0 or self.seconds_since_pass is None or self.seconds_since_pass > DEADMAN_SECONDS

    @property
    def missed_twice(self):
        return sorted(shard for shard, n in self.missed.items() if n >= MISSED_ALERT)

    def messages(self):
        """What the portal's overview says, plainly; [] when all is well."""
        said = []
        if self.dead:
            if self.seconds_since_pass is None:
                said.append("No scheduler has materialised yet: start run_scheduler.")
            else:
                said.append(f"No scheduler has materialised for {self.seconds_since_pass:.0f} s.")
        shards = self.missed_twice
        if len(shards) == 1:
            said.append(f"Canary on shard {shards[0]} missed twice.")
        elif shards:
            said.append(f"Canaries on {len(shards)} shards missed twice (shards {_ranges(shards)}).")
        return said


def _ranges(numbers):
    """'0-3, 7, 9-10' for [0, 1, 2, 3, 7, 9, 10]."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def status(now=None):
    """The dead-man's switch and the canaries at `now`: three indexed queries (node rows, last pass, canaries)."""
    now = now or timezone.now()
    nodes = leases.alive("node:", clock=now)
    last = leases.stamped_at(LAST_PASS)
    since = None if last is None else max(0.0, (now - last).total_seconds())
    return Status(nodes, last, since, missed_canaries(now))


def missed_canaries(now):
    """{shard: canary minutes missed in a row, of the last MISSED_ALERT} for every canary job.

    A minute counts only if the canary existed before it; a run missed is one
    not `succeeded` CANARY_GRACE after its minute (absent, waiting, failed, dead).
    Probes run_unique_occurrence (job, due_at) once per canary and minute.
    """
    latest = (now - CANARY_GRACE).replace(second=0, microsecond=0)
    minutes = [latest - dt.timedelta(minutes=i) for i in range(MISSED_ALERT)]
    jobs = list(
        JobDefinition.objects.filter(
            tenant__name=SYSTEM_TENANT, name__startswith=CANARY_PREFIX, status=JobDefinition.Status.ACTIVE
        ).values_list("pk", "shard", "created_at")
    )
    if not jobs:
        return {}
    done = set(
        Run.objects.filter(
            Q(job_id__in=[pk for pk, _, _ in jobs]),
            origin=Run.Origin.SCHEDULE,
            due_at__in=minutes,
            state=Run.State.SUCCEEDED,
        ).values_list("job_id", "due_at")
    )
    missed = {}
    for pk, shard, created in jobs:
        streak = 0
        for minute in minutes:  # newest first
            if minute <= created or (pk, minute) in done:
                break
            streak += 1
        missed[shard] = streak
    return missed


def collect(now):
    """The dead-man and canary gauges for runs.metrics.DatabaseCollector."""
    state = status(now)
    nodes = GaugeMetricFamily("duetime_scheduler_nodes_alive", "Scheduler nodes whose heartbeat row is current.")
    nodes.add_metric([], state.nodes_alive)
    yield nodes
    since = GaugeMetricFamily(
        "duetime_scheduler_last_pass_age_seconds",
        "Seconds since a scheduler last finished a pass that materialised (the dead-man's switch).",
    )
    since.add_metric([], float("inf") if state.seconds_since_pass is None else state.seconds_since_pass)
    yield since
    missed = GaugeMetricFamily(
        "duetime_canary_missed_in_a_row", "Canary minutes missed in a row on each shard (2: alert).", labels=["shard"]
    )
    for shard, n in sorted(state.missed.items()):
        missed.add_metric([str(shard)], n)
    yield missed
