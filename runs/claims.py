"""Claiming due runs in batches: the worker's hot path.

One transaction per batch, race-free on both databases:

- PostgreSQL: lock the tenants that have due work (claims for one tenant take
  turns, so its caps are counted without races), lock up to `n` due runs per
  (tenant, queue, priority) with FOR UPDATE SKIP LOCKED, decide in Python
  which to lease (`choose`), and lease them in one UPDATE ... RETURNING with
  fencing tokens from the global sequence.
- SQLite: the same decision inside an IMMEDIATE transaction, which holds the
  database's only write lock; each lease is a conditional update.

`choose` is the one place that says what a batch gets: priorities split
70/25/5 with unused share flowing on, tenants served round-robin within a
priority, the tenant's concurrent cap, the job's `concurrency`, and the
overlap policy of scheduled occurrences.
"""

import dataclasses
import datetime as dt
import json
import math
from collections import Counter, defaultdict

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

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


@dataclasses.dataclass(frozen=True)
class Lease:
    """What a worker needs to execute one claimed attempt and complete it."""

    run_id: int
    tenant_id: int
    job_id: int
    job_name: str
    target_kind: str
    target_ref: str
    queue: str
    attempt: int
    max_attempts: int
    idempotency_key: str
    fencing_token: int
    payload: object
    due_at: dt.datetime
    available_at: dt.datetime
    started_at: dt.datetime
    lease_expires_at: dt.datetime
    timeout_seconds: int


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
    """Lease up to `n` due runs of `queues` to `worker_id`; returns [Lease].

    `tenant_id` restricts the claim to one tenant (worker tokens). `now` is
    for tests; production uses the database clock. A crash before commit
    leaves every run as it was.
    """
    lease_seconds = lease_seconds or settings.DUETIME_LEASE_SECONDS
    if not queues or n <= 0:
        return []
    # No savepoint when nested (the worker completes and claims in one
    # transaction): a failure aborts the whole tick, which is what it wants.
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            return _claim_postgres(list(queues), n, worker_id, lease_seconds, tenant_id, now)
        return _claim_sqlite(list(queues), n, worker_id, lease_seconds, tenant_id, now or timezone.now())


def _claim_postgres(queues, n, worker_id, lease_seconds, tenant_id, now):
    params = {"queues": queues, "tenant": tenant_id, "now": now, "n": n}
    with sql.cursor() as cursor:
        cursor.execute(sql.query("lock_ready_tenants"), params)
        tenants = [row[0] for row in cursor.fetchall()]
        if not tenants:
            return []
        cursor.execute(sql.query("claim_candidates"), {**params, "tenants": tenants})
        candidates = [Candidate(*row) for row in cursor.fetchall()]
        decision = choose(candidates, n)
        _apply_policies(decision, now)
        if not decision.lease:
            return []
        cursor.execute(
            sql.query("lease_runs"),
            {"ids": decision.lease, "worker": worker_id, "now": now, "lease": lease_seconds},
        )
        return [_lease(row) for row in cursor.fetchall()]


def _claim_sqlite(queues, n, worker_id, lease_seconds, tenant_id, now):
    """The IMMEDIATE transaction already holds SQLite's one write lock."""
    params = {"queues": json.dumps(queues), "tenant": tenant_id, "now": sql.db_time(now), "n": n}
    with connection.cursor() as cursor:
        cursor.execute(sql.query("claim_candidates"), params)
        candidates = [Candidate(*row[:5], sql.aware(row[5]), *row[6:]) for row in cursor.fetchall()]
        decision = choose(candidates, n)
        _apply_policies(decision, now)
        if not decision.lease:
            return []
        tokens = transitions.next_fencing_tokens(len(decision.lease))
        leased = []
        for run_id, token in zip(sorted(decision.lease), tokens):
            cursor.execute(
                sql.query("lease_runs"),
                {"id": run_id, "token": token, "worker": worker_id, "now": params["now"], "lease": lease_seconds},
            )
            leased.extend(cursor.fetchall())
        return [_lease(_aware_row(row)) for row in leased]


def _aware_row(row):
    row = list(row)
    for i in (12, 13, 14, 15):  # due_at, available_at, started_at, lease_expires_at
        row[i] = sql.aware(row[i])
    return row


def _apply_policies(decision, now):
    if decision.skip:
        transitions.skip_for_overlap(decision.skip, now=now)
    for job_id, run_id in decision.replace:
        transitions.cancel_leases_of_job(job_id, reason=f"replaced by run {run_id} (overlap policy replace)", now=now)


def _lease(row):
    values = list(row)
    if isinstance(values[11], str):  # payload: jsonb may arrive as text
        values[11] = json.loads(values[11])
    return Lease(*values)
