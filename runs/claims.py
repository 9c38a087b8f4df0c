"""Claiming due runs in batches: the worker's hot path.

One transaction per batch, race-free on both databases, the same steps on
both (runs/sql/ holds each dialect's form of the queries):

1. `lock_ready_tenants`: the tenants with due work on the wanted queues. On
   PostgreSQL their rows are locked, so claims for one tenant take turns and
   its caps are counted without races; on SQLite the IMMEDIATE transaction
   already holds the database's only write lock.
2. `claim_candidates`: up to `n` due runs per (tenant, queue, priority),
   locked with FOR UPDATE SKIP LOCKED on PostgreSQL, with the counts the
   caps need.
3. `choose` decides in Python which to lease, skip or replace, and
   runs/transitions.py makes those moves: `lease_runs` leases the chosen ones
   (fencing tokens from the one global source) in one statement.

`choose` is the one place that says what a batch gets: priorities split
70/25/5 with unused share flowing on, tenants served round-robin within a
priority, the tenant's concurrent cap, the job's `concurrency`, and the
overlap policy of scheduled occurrences.
"""

import dataclasses
import datetime as dt
import math
from collections import Counter, defaultdict

from django.conf import settings
from django.db import transaction

from runs import sql, transitions

PRIORITY_SHARES = (0.70, 0.25, 0.05)  # critical, default, bulk


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


@dataclasses.dataclass
class Decision:
    lease: list = dataclasses.field(default_factory=list)  # run ids
    skip: list = dataclasses.field(default_factory=list)  # run ids skipped by overlap `forbid`
    replace: list = dataclasses.field(default_factory=list)  # (job_id, new run id): cancel the job's leases


def priority_quotas(n, available):
    """Split `n` across priorities 70/25/5; share a priority cannot use flows on.

    `available[p]` is how many runs priority p could take. Unused share flows
    down first (critical -> default -> bulk), then what is still left goes to
    the highest priority with work, so a batch is never short while work waits.
    """
    quotas = [0, 0, 0]
    carry = 0
    for p, share in enumerate(PRIORITY_SHARES):
        want = (n - sum(math.floor(n * s) for s in PRIORITY_SHARES[1:])) if p == 0 else math.floor(n * share)
        quotas[p] = min(available[p], want + carry)
        carry = want + carry - quotas[p]
    for p in range(3):
        extra = min(carry, available[p] - quotas[p])
        quotas[p] += extra
        carry -= extra
    return quotas


def round_robin(candidates):
    """Order one priority's candidates: each tenant's oldest, then each one's second, ..."""
    turn = Counter()
    keyed = []
    for c in sorted(candidates, key=lambda c: (c.available_at, c.id)):
        keyed.append((turn[c.tenant_id], c.available_at, c.id, c))
        turn[c.tenant_id] += 1
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]


def choose(candidates, n):
    """Decide which locked candidates to lease (at most n), skip or replace."""
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
            if verdict == "skip":
                decision.skip.append(c.id)
            elif verdict == "lease":
                allowed[p].append(c)
                tenant_used[c.tenant_id] += 1
                job_used[c.job_id] += 1
    quotas = priority_quotas(n, [len(allowed[p]) for p in (0, 1, 2)])
    for p in (0, 1, 2):
        for c in allowed[p][: quotas[p]]:
            decision.lease.append(c.id)
            if c.origin == "schedule" and c.overlap_policy == "replace" and c.job_leased:
                decision.replace.append((c.job_id, c.id))
    return decision


def _gate(c, tenant_used, job_used, started_jobs):
    """'lease', 'skip' (overlap forbid) or 'wait' (a cap is full) for one candidate."""
    scheduled = c.origin == "schedule"
    running = c.job_leased + job_used[c.job_id]
    if scheduled and c.overlap_policy == "forbid" and c.job_leased:
        return "skip"  # one is running now: this occurrence is passed over, with the reason
    if tenant_used[c.tenant_id] >= c.room:
        return "wait"
    limit = c.concurrency
    if scheduled and c.overlap_policy == "replace":
        running = job_used[c.job_id]  # the leased ones are about to be cancelled
    if limit is not None and running >= limit:
        return "wait"
    if scheduled and c.overlap_policy != "allow":
        if c.job_id in started_jobs:
            # Its predecessor starts in this very batch (or may: quotas come
            # later). Wait: the next claim sees it running and applies the policy.
            return "wait"
        started_jobs.add(c.job_id)
    return "lease"


def claim(queues, n, worker_id, *, lease_seconds=None, tenant_id=None, now=None):
    """Lease up to `n` due runs of `queues` to `worker_id`; returns [transitions.Lease].

    `tenant_id` restricts the claim to one tenant (worker tokens). `now` is
    for tests; production uses the database clock. A crash before commit
    leaves every run as it was.
    """
    lease_seconds = lease_seconds or settings.DUETIME_LEASE_SECONDS
    if not queues or n <= 0:
        return []
    params = {"queues": list(queues), "tenant": tenant_id, "now": now, "n": n}
    # No savepoint when nested (the worker completes and claims in one
    # transaction): a failure aborts the whole tick, which is what it wants.
    with transaction.atomic(savepoint=False):
        tenants = lock_ready_tenants(params)
        if not tenants:
            return []
        decision = choose(claim_candidates({**params, "tenants": tenants}), n)
        _apply_policies(decision, now)
        if not decision.lease:
            return []
        return transitions.lease_runs(decision.lease, worker_id, lease_seconds, now=now)


def lock_ready_tenants(params):
    """The lock_ready_tenants query: ids of the tenants with due runs on the wanted queues."""
    return [row[0] for row in sql.execute("lock_ready_tenants", params)]


def claim_candidates(params):
    """The claim_candidates query: [Candidate], their runs locked until the transaction ends."""
    return [Candidate(*row[:5], sql.aware(row[5]), *row[6:]) for row in sql.execute("claim_candidates", params)]


def _apply_policies(decision, now):
    if decision.skip:
        transitions.skip_for_overlap(decision.skip, now=now)
    for job_id, run_id in decision.replace:
        transitions.cancel_leases_of_job(job_id, reason=f"replaced by run {run_id} (overlap policy replace)", now=now)
