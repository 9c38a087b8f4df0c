"""Claiming due runs in batches: the worker's hot path.

One transaction per batch, race-free on both databases, the same steps on
both (runs/sql/ holds each dialect's form of the queries):

1. `lock_ready_tenants`: the tenants with due work on the wanted queues,
   found from the ready marks due now (runs.models.ReadyMark), so a claim's
   cost follows the tenants with due work, however many tenants exist or
   have runs scheduled ahead; the same statement settles the marks of a
   (tenant, queue) whose due work is all taken. On PostgreSQL their rows are locked, so claims for one
   tenant take turns and its caps are counted without races; a tenant another
   claim holds is passed over (SKIP LOCKED), so a claimer that stalls inside
   its transaction stalls no one else. On SQLite the IMMEDIATE transaction
   already holds the database's only write lock.
2. `claim_candidates`: the oldest due runs per (tenant, queue, priority),
   n / tenants of each (rounded up: a batch served round-robin needs no
   more; a tenant with fewer leaves the batch short, and the next claim
   follows at once), locked with FOR UPDATE SKIP LOCKED on PostgreSQL, with
   the counts the caps need.
3. `choose` decides in Python which to lease, skip or replace, and
   runs/transitions.py makes those moves: `lease_runs` leases the chosen ones
   (fencing tokens from the one global source) in one statement.

`choose` is the one place that says what a batch gets: priorities split
70/25/5 with unused share flowing on (the shares hold over many claims, not
per batch: see `PriorityShares`), tenants served round-robin within a
priority, the tenant's concurrent cap, the job's `concurrency`, and the
overlap policy of scheduled occurrences.
"""

import dataclasses
import datetime as dt
import threading
from collections import Counter, defaultdict

from django.conf import settings
from django.db import OperationalError, transaction

from runs import limits, metrics, sql, transitions

PRIORITY_SHARES = (0.70, 0.25, 0.05)  # critical, default, bulk
# PostgreSQL: how long a claim waits for a row lock (it waits only when every
# tenant with due work is held by other claims: wait_for_ready_tenants), and
# how long its transaction may sit idle before the server ends the session.
# A claimer frozen mid-claim (a GC pause, a stopped process, a debugger) then
# holds its tenants for at most that long; other tenants are served meanwhile,
# and the next claim of its tenants, waiting up to CLAIM_LOCK_TIMEOUT, takes
# them as the server cuts it off: under a second in all. The claim's own
# statements follow one another within milliseconds (its decisions are made
# in memory between them), so only a claimer that really stalls is cut off;
# its transaction is rolled back and the worker's next tick completes again.
# So a caller that claims inside its own transaction must commit right after
# (the worker's tick does; the dispatcher and the lease API claim on their own).
CLAIM_LOCK_TIMEOUT = "500ms"
CLAIM_IDLE_TIMEOUT = "500ms"
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's error code for a lock_timeout
EVERY_TENANT = {"only_tenants": None, "except_tenants": []}  # no dedicated pool


@dataclasses.dataclass(frozen=True)
class Candidate:
    id: int
    tenant_id: int
    job_id: int
    priority: int
    origin: str
    available_at: dt.datetime
    concurrency: int | None
    overlap_policy: str
    job_leased: int
    room: int
    queue: str = "default"
    group: str = ""  # the job's concurrency group ("" none) and its limit (runs.limits)
    group_limit: int = 1
    queue_limited: bool = True  # a queue limit may apply (claim_candidates says; runs.limits.gates reads them then)


@dataclasses.dataclass
class Decision:
    lease: list = dataclasses.field(default_factory=list)  # run ids
    skip: list = dataclasses.field(default_factory=list)  # run ids skipped by overlap `forbid`
    replace: list = dataclasses.field(default_factory=list)  # (job_id, new run id): cancel the job's leases
    capped: set = dataclasses.field(default_factory=set)  # (tenant_id, limit): due runs a limit held back


class PriorityShares:
    """How a worker splits its claims across priorities, 70/25/5 over time.

    Each claim of n runs adds n x share to every priority's credit; a run is
    granted to the priority with the most credit left (deficit round-robin),
    so a batch of 1 or 10 still gives bulk its 5 % over many claims instead of
    rounding it to nothing every time. A priority that runs out of work
    forfeits what it was owed (credit capped at 0), and the share it could not
    use flows on to the others, who are not made to pay it back (credit
    floored at -1). One object per claiming process and queue set; safe to
    share between threads.
    """

    def __init__(self, shares=PRIORITY_SHARES):
        self.shares = shares
        self.credit = [0.0] * len(shares)
        self._lock = threading.Lock()

    def split(self, n, available):
        """Quotas of a batch of `n`, where priority p could take `available[p]` runs."""
        with self._lock:
            credit = [c + n * s for c, s in zip(self.credit, self.shares)]
            quotas = [0] * len(credit)
            for _ in range(n):  # the runs each priority is owed, most credit first
                owed = [p for p in range(len(credit)) if quotas[p] < available[p] and credit[p] - quotas[p] > 0]
                if not owed:
                    break
                quotas[max(owed, key=lambda p: (credit[p] - quotas[p], -p))] += 1
            left = n - sum(quotas)
            for p in range(len(credit)):  # share nobody could use flows down: critical -> default -> bulk
                extra = min(left, available[p] - quotas[p])
                quotas[p] += extra
                left -= extra
            for p in range(len(credit)):
                rest = credit[p] - quotas[p]
                self.credit[p] = max(-1.0, min(rest, 0.0) if quotas[p] >= available[p] else rest)
            return quotas


def priority_quotas(n, available):
    """Split one batch of `n` 70/25/5 on its own (no history); share a priority cannot use flows on."""
    return PriorityShares().split(n, available)


def round_robin(candidates):
    """Order one priority's candidates: each tenant's oldest, then each one's second, ..."""
    turn = Counter()
    keyed = []
    for c in sorted(candidates, key=lambda c: (c.available_at, c.id)):
        keyed.append((turn[c.tenant_id], c.available_at, c.id, c))
        turn[c.tenant_id] += 1
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]


def choose(candidates, n, shares=None, gates=None):
    """Decide which locked candidates to lease (at most n), skip or replace.

    `shares` carries the priority split from claim to claim (a fresh split
    per batch when None); `gates` (runs.limits.Gates) the queue limits and
    concurrency groups that apply (None: none).
    """
    decision = Decision()
    tenant_used, job_used = Counter(), Counter()
    started_jobs = set()
    eligible = defaultdict(list)
    for c in round_robin(candidates):
        eligible[c.priority].append(c)
    # Gate pass: what each priority could take, honouring caps and overlap.
    allowed = defaultdict(list)
    for p in (0, 1, 2):
        for c in eligible[p]:
            verdict = _gate(c, tenant_used, job_used, started_jobs)
            if verdict == "lease" and gates is not None:
                verdict = gates.verdict(c) or "lease"
                if verdict == "lease":
                    gates.take(c)
            if verdict == "skip":
                decision.skip.append(c.id)
            elif verdict == "lease":
                allowed[p].append(c)
                tenant_used[c.tenant_id] += 1
                job_used[c.job_id] += 1
            elif verdict != "wait":  # a limit held it back: runs.metrics counts the time
                decision.capped.add((c.tenant_id, verdict))
    quotas = (shares or PriorityShares()).split(n, [len(allowed[p]) for p in (0, 1, 2)])
    for p in (0, 1, 2):
        for c in allowed[p][: quotas[p]]:
            decision.lease.append(c.id)
            if c.origin == "schedule" and c.overlap_policy == "replace" and c.job_leased:
                decision.replace.append((c.job_id, c.id))
    return decision


def _gate(c, tenant_used, job_used, started_jobs):
    """'lease', 'skip' (overlap forbid), the name of the limit that holds it back, or 'wait' (overlap order)."""
    scheduled = c.origin == "schedule"
    running = c.job_leased + job_used[c.job_id]
    if scheduled and c.overlap_policy == "forbid" and c.job_leased:
        return "skip"  # one is running now: this occurrence is passed over, with the reason
    if tenant_used[c.tenant_id] >= c.room:
        return "max_concurrent_runs"
    limit = c.concurrency
    if scheduled and c.overlap_policy == "replace":
        running = job_used[c.job_id]  # the leased ones are about to be cancelled
    if limit is not None and running >= limit:
        return "job_concurrency"
    if scheduled and c.overlap_policy != "allow":
        if c.job_id in started_jobs:
            # Its predecessor starts in this very batch (or may: quotas come
            # later). Wait: the next claim sees it running and applies the policy.
            return "wait"
        started_jobs.add(c.job_id)
    return "lease"


def claim(
    queues,
    n,
    worker_id,
    *,
    lease_seconds=None,
    tenant_id=None,
    kinds=None,
    only_tenants=None,
    except_tenants=(),
    shares=None,
    now=None,
):
    """Lease up to `n` due runs of `queues` to `worker_id`; returns [transitions.Lease] (a `Claimed`).

    `tenant_id` restricts the claim to one tenant (worker tokens); `kinds` to
    jobs of those target kinds (None: every kind). `only_tenants` (ids; None:
    every tenant) and `except_tenants` are a dedicated pool's tenants
    (run_worker --tenants / --exclude-tenants). `shares` carries the
    priority split between claims; by default this process keeps one per
    (queues, tenant, kinds), so the 70/25/5 split holds across its claims.
    `now` is for tests; production uses the database clock. A crash before
    commit leaves every run as it was.
    """
    lease_seconds = lease_seconds or settings.DUETIME_LEASE_SECONDS
    if not queues or n <= 0:
        return Claimed()
    kinds = sorted(kinds) if kinds is not None else None
    only_tenants = sorted(only_tenants) if only_tenants is not None else None
    except_tenants = sorted(except_tenants)
    shares = shares or shares_for(queues, tenant_id, kinds, only_tenants, except_tenants)
    params = {
        "queues": list(queues),
        "tenant": tenant_id,
        "kinds": kinds,
        "only_tenants": only_tenants,
        "except_tenants": except_tenants,
        "now": now,
        "n": n,
    }
    # No savepoint when nested (the worker completes and claims in one
    # transaction): a failure aborts the whole tick, which is what it wants.
    with transaction.atomic(savepoint=False):
        tenants = lock_ready_tenants(params) or wait_for_ready_tenants(params)
        if not tenants:
            return Claimed()
        # A batch of n served round-robin takes about n / len(tenants) from each:
        # locking n per tenant would lock (and read) len(tenants) times the batch.
        per_tenant = -(-n // len(tenants))
        candidates = claim_candidates({**params, "tenants": tenants, "per_tenant": per_tenant})
        bounds = limits.gates(candidates, now)
        decision = choose(candidates, n, shares, bounds)
        _apply_policies(decision, now)
        metrics.skipped_for_overlap(candidates, decision.skip)
        metrics.capped(decision.capped)
        held = held_at_limit(candidates, decision, n, per_tenant)
        if not decision.lease:
            return Claimed(held=held)
        leases = transitions.lease_runs(decision.lease, worker_id, lease_seconds, now=now)
        bounds.record(leases)
        metrics.claimed(leases, candidates)
        return Claimed(leases, held=held)


class Claimed(list):
    """What a claim leased ([transitions.Lease]), and whether it stopped short at a limit (`held`).

    `held`: the claim took fewer than it asked for because a limit (a tenant's
    cap, a job's concurrency, a queue limit, a group) held due runs back, and
    no (tenant, queue, priority) it read to the end of its share has more
    behind it. Claiming again at once would find the same limits full: the
    worker claims again when one of its runs completes (which may free the
    limit) or after its poll (another worker's may have).
    """

    def __init__(self, leases=(), *, held=False):
        super().__init__(leases)
        self.held = held


def held_at_limit(candidates, decision, n, per_tenant):
    """True when a limit held some of `candidates` back and nothing else is left for a claim at once to take."""
    if not decision.capped or len(decision.lease) >= n:
        return False
    taken = {*decision.lease, *decision.skip}
    heads = defaultdict(list)
    for c in candidates:
        heads[(c.tenant_id, c.queue, c.priority)].append(c)
    # A (tenant, queue, priority) read to its share and taken whole may have more due behind it.
    return not any(len(group) >= per_tenant and all(c.id in taken for c in group) for group in heads.values())


_shares = {}
_shares_lock = threading.Lock()


def shares_for(queues, tenant_id=None, kinds=None, only_tenants=None, except_tenants=()):
    """This process's PriorityShares for one kind of claim (a worker's queues and tenants, a worker token's tenant)."""
    only = tuple(only_tenants) if only_tenants is not None else None
    key = (tuple(sorted(queues)), tenant_id, tuple(kinds) if kinds is not None else None, only, tuple(except_tenants))
    with _shares_lock:
        return _shares.setdefault(key, PriorityShares())


def lock_ready_tenants(params):
    """The lock_ready_tenants query: ids of the tenants with due runs on the wanted queues.

    On PostgreSQL it first bounds the claim transaction's lock waits and idle
    time (CLAIM_LOCK_TIMEOUT, CLAIM_IDLE_TIMEOUT), then locks the tenants it
    returns, passing over those another claim holds.
    """
    limits = {"lock_timeout": CLAIM_LOCK_TIMEOUT, "idle_timeout": CLAIM_IDLE_TIMEOUT}
    return [row[0] for row in sql.execute("lock_ready_tenants", {**EVERY_TENANT, **params, **limits})]


def wait_for_ready_tenants(params):
    """The wait_for_ready_tenants query: lock_ready_tenants, waiting for tenants other claims hold.

    Up to CLAIM_LOCK_TIMEOUT; then [] (in a savepoint, so the timeout undoes
    nothing else of the caller's transaction).
    """
    try:
        with transaction.atomic():
            return [row[0] for row in sql.execute("wait_for_ready_tenants", {**EVERY_TENANT, **params})]
    except OperationalError as error:
        if getattr(error.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        return []


def claim_candidates(params):
    """The claim_candidates query: [Candidate], their runs locked until the transaction ends."""
    return [Candidate(*row[:5], sql.aware(row[5]), *row[6:]) for row in sql.execute("claim_candidates", params)]


def _apply_policies(decision, now):
    if decision.skip:
        transitions.skip_for_overlap(decision.skip, now=now)
    for job_id, run_id in decision.replace:
        transitions.cancel_leases_of_job(job_id, reason=f"replaced by run {run_id} (overlap policy replace)", now=now)
