"""Prometheus metrics: every metric object of Duetime, and the gauges read from the database at scrape time.

Counters and histograms live in each process (scheduler, worker, dispatcher,
web) and move where the event happens, with a one-line call from the engine
module that makes it (`claimed`, `completed`, `expired`, ...): a counter
increment costs a lock and an addition, and a batch is counted with one
`inc(n)` per label set, never one per run. Labels are bounded: tenant (by
name), queue, priority, outcome, step; never a run or job id.

What the database knows (ready backlog and the age of its oldest run per
queue and priority, open dead letters, shard ownership, the dead-man's switch
and the canaries) is read by `DatabaseCollector` when Prometheus scrapes,
with a handful of indexed queries; only the web process registers it
(scheduler_project/metrics.py), so each gauge is exported once however many
engine processes run. docs/operations.md lists every metric.
"""

import bisect
import dataclasses
import threading
import time
from collections import Counter as Tally

from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.utils import timezone
from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from dlq.models import DeadLetter
from jobs.models import JobDefinition, Tenant
from runs import canary
from runs.models import ReadyMark, Run, ShardLease

PRIORITIES = {p.value: p.label for p in JobDefinition.Priority}
# Start minus available, first attempts: 5 s is the design's critical p99 target.
LATENESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600)
# Due minus now when a run is inserted: the look-ahead is 60 s by default.
LEAD_BUCKETS = (-60, -10, -1, 0, 1, 5, 10, 30, 60, 120, 300)
STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# --- the engine's events ---------------------------------------------------------

RUNS_MATERIALIZED = Counter(
    "duetime_runs_materialized", "Runs a scheduler inserted from cron and `at` schedules.", ["tenant"]
)
RUNS_SKIPPED = Counter(
    "duetime_runs_skipped",
    "Occurrences recorded skipped: missed (missed-run policy, starting deadline), quota, window (maintenance "
    "windows), overlap (forbid).",
    ["tenant", "cause"],
)
MATERIALIZE_LEAD = Histogram(
    "duetime_materialize_lead_seconds",
    "Due time minus the instant a run was materialised (negative: inserted late).",
    buckets=LEAD_BUCKETS,
)
RUNS_CLAIMED = Counter(
    "duetime_runs_claimed", "Runs leased to a worker or dispatcher.", ["tenant", "queue", "priority"]
)
LATENESS = Histogram(
    "duetime_run_lateness_seconds",
    "Start of a run's first attempt minus the instant it became available.",
    ["tenant", "priority"],
    buckets=LATENESS_BUCKETS,
)
RUNS_COMPLETED = Counter("duetime_runs_completed", "Attempts completed by their executor, by outcome.", ["outcome"])
COMPLETIONS_REFUSED = Counter(
    "duetime_stale_completions_refused", "Completions refused: the fencing token was no longer the run's."
)
HEARTBEATS_REFUSED = Counter(
    "duetime_stale_heartbeats_refused", "Heartbeats refused: the fencing token was no longer the run's."
)
LEASE_EXPIRIES = Counter(
    "duetime_lease_expiries", "Leases the reaper found expired (the worker died or stalled).", ["tenant", "queue"]
)
RETRIES = Counter(
    "duetime_retries", "Runs sent to retry_wait for another attempt.", ["cause"]
)  # cause: failed | lease_expired
DEAD_LETTERS = Counter(
    "duetime_dead_letters_created", "Runs that died into the dead-letter queue.", ["tenant", "queue", "priority"]
)
SHARD_HANDOVERS = Counter(
    "duetime_shard_handovers", "Shards this scheduler took over or gave back.", ["direction"]
)  # taken | released
LEDGER_MISSING = Counter(
    "duetime_ledger_missing_occurrences",
    "Occurrences a computed ledger found without any record (no run, no skipped row): each one is a bug.",
    ["tenant"],
)
SHARDS_HELD = Gauge("duetime_scheduler_shards_held", "Shards this scheduler process holds now.")
TICK_SECONDS = Histogram(
    "duetime_scheduler_tick_step_seconds", "Duration of each step of a scheduler pass.", ["step"], buckets=STEP_BUCKETS
)

_tenant_names = {}
_tenant_lock = threading.Lock()


def tenant_names(tenant_ids):
    """{tenant id: name}, read from the database once per tenant per process (names never change)."""
    missing = set(tenant_ids) - _tenant_names.keys()
    if missing:
        found = dict(Tenant.objects.filter(pk__in=missing).values_list("pk", "name"))
        with _tenant_lock:
            _tenant_names.update(found)
    return {pk: _tenant_names.get(pk, str(pk)) for pk in tenant_ids}


def _priority(value):
    return PRIORITIES.get(value, str(value))


def materialized(job, due_times, skipped, now):
    """A scheduler inserted runs at `due_times` for `job` and recorded `skipped` summary rows (materialize_job)."""
    if due_times:
        RUNS_MATERIALIZED.labels(job.tenant.name).inc(len(due_times))
        for due in due_times:
            MATERIALIZE_LEAD.observe((due - now).total_seconds())
    for _first, _last, count, reason in skipped:
        cause = "quota" if reason.startswith("quota") else "window" if reason.startswith("window") else "missed"
        RUNS_SKIPPED.labels(job.tenant.name, cause).inc(count)


def ledger_missing(tenant_name, count):
    """A ledger (runs/ledger.py) found `count` occurrences of a job of this tenant without any record."""
    if count:
        LEDGER_MISSING.labels(tenant_name).inc(count)


def skipped_for_overlap(candidates, run_ids):
    """claims.choose passed these scheduled occurrences over (overlap forbid)."""
    if not run_ids:
        return
    skipped = set(run_ids)
    by_tenant = Tally(c.tenant_id for c in candidates if c.id in skipped)
    names = tenant_names(by_tenant)
    for tenant_id, n in by_tenant.items():
        RUNS_SKIPPED.labels(names[tenant_id], "overlap").inc(n)


def claimed(leases, candidates):
    """A claim leased `leases`; `candidates` (claims.Candidate) carry each run's priority."""
    if not leases:
        return
    priority = {c.id: c.priority for c in candidates}
    counts, late = Tally(), {}
    for lease in leases:  # grouped by raw ids here; names and labels once per group below
        key = (lease.tenant_id, priority.get(lease.run_id))
        counts[(*key, lease.queue)] += 1
        if lease.attempt == 1:
            late.setdefault(key, []).append((lease.started_at - lease.available_at).total_seconds())
    names = tenant_names({tenant_id for tenant_id, _, _ in counts})
    for (tenant_id, prio, queue), n in counts.items():
        RUNS_CLAIMED.labels(names[tenant_id], queue, _priority(prio)).inc(n)
    for (tenant_id, prio), values in late.items():
        observe_all(LATENESS.labels(names[tenant_id], _priority(prio)), values)


TENANT_CAPPED = Counter(
    "duetime_tenant_capped_seconds",
    "Seconds a claimer found a tenant's due runs held back by one of its limits (max_concurrent_runs, "
    "job_concurrency, ...): each claiming process adds the time since its previous claim, at most "
    "CAPPED_INTERVAL_MAX, so max by (tenant, limit) of its rate is the share of time the tenant was held.",
    ["tenant", "limit"],
)
CAPPED_INTERVAL_MAX = 1.0
_last_claim = {"at": None}
_claim_lock = threading.Lock()


def capped(held):
    """A claim held back due runs: `held` is a set of (tenant id, limit name). Called once per claim."""
    now = time.monotonic()
    with _claim_lock:
        last, _last_claim["at"] = _last_claim["at"], now
    if not held or last is None:
        return
    seconds = min(now - last, CAPPED_INTERVAL_MAX)
    names = tenant_names({tenant_id for tenant_id, _limit in held})
    for tenant_id, limit in held:
        TENANT_CAPPED.labels(names[tenant_id], limit).inc(seconds)


def observe_all(child, values):
    """Histogram.observe for each of `values`, with one lock per bucket touched instead of two per value.

    A claim of 100 runs is 100 lateness observations: on the hot path this
    is the difference between a few and a dozen microseconds per run. It
    adds to the child's own (non-cumulative) bucket and sum values, as
    observe() does in the pinned prometheus_client; without them it falls back to observe().
    """
    buckets, total = getattr(child, "_buckets", None), getattr(child, "_sum", None)
    bounds = getattr(child, "_upper_bounds", None)
    if buckets is None or total is None or bounds is None:
        for value in values:
            child.observe(value)
        return
    for index, n in Tally(bisect.bisect_left(bounds, value) for value in values).items():
        buckets[index].inc(n)
    total.inc(sum(values))


def completed(completions, rows):
    """complete_runs moved `rows` (transitions.MovedRun) of `completions`; the rest were stale."""
    moved = {row.run_id for row in rows}
    outcomes = Tally(c.outcome for c in completions if c.run_id in moved)
    for outcome, n in outcomes.items():
        RUNS_COMPLETED.labels(outcome).inc(n)
    if len(moved) < len(completions):
        COMPLETIONS_REFUSED.inc(len(completions) - len(moved))
    _retried_or_dead(rows, "failed")


def heartbeat_refused():
    HEARTBEATS_REFUSED.inc()


def expired(rows):
    """The reaper moved these runs (transitions.MovedRun) out of an expired lease."""
    if not rows:
        return
    by_label = Tally((row.tenant_id, row.queue) for row in rows)
    names = tenant_names({tenant_id for tenant_id, _ in by_label})
    for (tenant_id, queue), n in by_label.items():
        LEASE_EXPIRIES.labels(names[tenant_id], queue).inc(n)
    _retried_or_dead(rows, "lease_expired")


def _retried_or_dead(rows, cause):
    """Retries and dead letters among `rows`, labelled from the rows themselves (no query)."""
    retried = sum(1 for row in rows if row.state == "retry_wait")
    if retried:
        RETRIES.labels(cause).inc(retried)
    dead = Tally((row.tenant_id, row.queue, row.priority) for row in rows if row.state == "dead")
    if dead:
        names = tenant_names({tenant_id for tenant_id, _, _ in dead})
        for (tenant_id, queue, priority), n in dead.items():
            DEAD_LETTERS.labels(names[tenant_id], queue, _priority(priority)).inc(n)


_held = {}


def shards_held(owner, owned):
    """A scheduler pass of `owner` ends holding `owned` (shard numbers): count what it took and gave back."""
    before, now_held = _held.get(owner), set(owned)
    if before is not None:
        if now_held - before:
            SHARD_HANDOVERS.labels("taken").inc(len(now_held - before))
        if before - now_held:
            SHARD_HANDOVERS.labels("released").inc(len(before - now_held))
    else:
        SHARD_HANDOVERS.labels("taken").inc(len(now_held))
    _held[owner] = now_held
    SHARDS_HELD.set(len(now_held))


class StepTimer:
    """Times the steps of one scheduler pass: `lap(step)` records the time since the previous lap."""

    def __init__(self):
        self.last = time.perf_counter()

    def lap(self, step):
        now = time.perf_counter()
        TICK_SECONDS.labels(step).observe(now - self.last)
        self.last = now


# --- serving an engine process's metrics ---------------------------------------------

# With DUETIME_METRICS_PORT=P, the engine commands listen on P + their offset, so
# run_all's children (or one host's scheduler, worker and dispatcher) never collide.
PORT_OFFSETS = {"run_scheduler": 0, "run_worker": 1, "run_dispatcher": 2}


def add_port_argument(parser):
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="Serve Prometheus metrics on this port (default DUETIME_METRICS_PORT plus this command's offset; 0: off).",
    )


def engine_port(option, command):
    """The port `command` serves /metrics on: --metrics-port if given, else DUETIME_METRICS_PORT + offset; 0: off."""
    if option is not None:
        return option
    base = settings.DUETIME_METRICS_PORT
    return base + PORT_OFFSETS[command] if base else 0


def serve(port, log):
    """Serve this process's metrics on http://DUETIME_METRICS_ADDR:port/metrics from a daemon thread.

    Returns the server, or None when `port` is 0 or taken: a process without
    its metrics still does its work (the error is logged, and Prometheus sees it down).
    """
    if not port:
        return None
    try:
        server, _ = start_http_server(port, addr=settings.DUETIME_METRICS_ADDR)
    except OSError as error:
        log.error(
            "metrics: cannot listen on %s:%d (%s); running without /metrics", settings.DUETIME_METRICS_ADDR, port, error
        )
        return None
    log.info("metrics on http://%s:%d/metrics", settings.DUETIME_METRICS_ADDR, port)
    return server


# --- the database's gauges, read at scrape time ------------------------------------


@dataclasses.dataclass
class Snapshot:
    """What DatabaseCollector reads in one scrape (also the portal's dead-man banner: runs.canary)."""

    backlog: list  # (queue, priority name, ready runs, oldest ready age in seconds)
    open_dead_letters: dict  # tenant name -> open dead letters
    shards_owned: dict  # owner -> shards whose lease has not expired
    open_breakers: list = dataclasses.field(default_factory=list)  # names of tenants whose failure breaker is open


def ready_backlog(now):
    """[(queue, priority name, ready runs, oldest ready age in seconds)] at `now`, summed from backlog_probes."""
    totals = {}
    for row in backlog_probes(now):
        for value in PRIORITIES:
            n, oldest = row[f"n_{value}"], row[f"oldest_{value}"]
            if not n:
                continue
            key = (row["queue"], _priority(value))
            total, first = totals.get(key, (0, oldest))
            totals[key] = (total + n, min(first, oldest))
    return [(q, p, n, max(0.0, (now - oldest).total_seconds())) for (q, p), (n, oldest) in sorted(totals.items())]


def backlog_probes(now):
    """The ready-backlog gauges' one query: per (tenant, queue) with due work, each priority's count and oldest.

    Driven by the ready marks due now (runs.models.ReadyMark: every ready run's
    tenant and queue has one), so a scrape's cost follows the (tenant, queue)
    pairs with due work, not the job definitions nor the runs scheduled ahead.
    Each pair gets two index-only probes of run_claimable per priority (the
    oldest: one descent; the count: a range scan of that tenant's ready runs),
    so a scrape reads the ready runs' index entries, never the finished runs.
    Grouped, so each pair is probed once however many due marks it has (the
    probes run per group). bench tenants explains it.
    """
    ready = Run.objects.ready(now).filter(tenant_id=OuterRef("tenant_id"), queue=OuterRef("queue"))
    probes = {}
    for value in PRIORITIES:
        of_priority = ready.filter(priority=value)
        probes[f"oldest_{value}"] = Subquery(of_priority.order_by("available_at").values("available_at")[:1])
        probes[f"n_{value}"] = Subquery(
            of_priority.order_by().values("tenant_id").annotate(c=Count("*")).values("c")[:1],
            output_field=IntegerField(),
        )
    pairs = ReadyMark.objects.filter(due_at__lte=now).order_by().values("tenant_id", "queue").annotate(Count("pk"))
    return pairs.annotate(**probes)


def snapshot(now=None):
    now = now or timezone.now()
    backlog = ready_backlog(now)
    letters = DeadLetter.objects.filter(replayed_at=None, discarded_at=None).order_by().values("tenant_id")
    letters = {r["tenant_id"]: r["n"] for r in letters.annotate(n=Count("id"))}
    names = tenant_names(letters)
    leases = ShardLease.objects.filter(name__startswith="shard-", expires_at__gt=now).exclude(owner="")
    owned = {r["owner"]: r["n"] for r in leases.order_by().values("owner").annotate(n=Count("name"))}
    # tenant_breaker_open: the few tenants whose breaker is open.
    breakers = sorted(Tenant.objects.filter(breaker_opened_at__isnull=False).values_list("name", flat=True))
    return Snapshot(backlog, {names[k]: v for k, v in letters.items()}, owned, breakers)


class DatabaseCollector:
    """Gauges read from the database when Prometheus scrapes (registered by the web process only)."""

    def describe(self):
        return []  # no describe-time query at registration

    def collect(self):
        return self.collect_at(timezone.now())

    def collect_at(self, now):
        snap = snapshot(now)
        ready = GaugeMetricFamily("duetime_ready_runs", "Runs ready to claim now.", labels=["queue", "priority"])
        oldest = GaugeMetricFamily(
            "duetime_oldest_ready_age_seconds", "Age of the oldest ready run.", labels=["queue", "priority"]
        )
        for queue, priority, n, age in snap.backlog:
            ready.add_metric([queue, priority], n)
            oldest.add_metric([queue, priority], age)
        yield ready
        yield oldest
        dlq = GaugeMetricFamily(
            "duetime_dead_letters_open", "Dead letters not replayed or discarded.", labels=["tenant"]
        )
        for tenant, n in snap.open_dead_letters.items():
            dlq.add_metric([tenant], n)
        yield dlq
        breakers = GaugeMetricFamily(
            "duetime_tenant_breaker_open",
            "1 for each tenant whose failure breaker is open (its retries wait; runs.breaker); others are absent.",
            labels=["tenant"],
        )
        for tenant in snap.open_breakers:
            breakers.add_metric([tenant], 1)
        yield breakers
        owned = GaugeMetricFamily("duetime_shards_owned", "Shards whose lease each scheduler holds.", labels=["owner"])
        for owner, n in snap.shards_owned.items():
            owned.add_metric([owner], n)
        yield owned
        yield from canary.collect(now)
