"""The run state machine: the table of allowed moves and every function that
changes Run.state, the lease and the dead-letter queue in and out included.

Every move is a compare-and-set on the expected state (and, for leased runs,
the fencing token): 0 rows changed means someone else moved the run first,
and the caller is told so (`StaleLease`, or a count smaller than asked).

TRANSITIONS is enforced, at no cost per row: each function that moves runs
declares its moves with `@moves(...)`, checked against the table when this
module is imported, and every ORM move goes through `_move`, which checks
its (from, to) pair once per statement. A move not in the table raises
`IllegalMove`.

On PostgreSQL a run goes into history (runs/partitions.py) as it finishes:
the move that finishes it sets its history_day, and the row, with its
attempts, moves to that day's partition. A statement that locks a row a
concurrent one just moved there gets a serialization error instead of 0 rows
(PostgreSQL cannot follow a row into another partition): a heartbeat, a
completion, the reaper or a cancel made on its own runs once more and then
finds the run gone from the open partition, so the caller is told what it
would have been told (a stale lease, nothing to reap); after_restore's
release, which moves a set of runs, tries up to RELEASE_TRIES times. Inside a caller's
transaction (the worker's tick) the error is the caller's: the worker tries
its whole tick again.
"""

import collections
import dataclasses
import datetime as dt
import json
import logging
import random

from django.db import OperationalError, connection, transaction
from django.db.models import F, Min, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from dlq.models import DeadLetter
from jobs import permissions, secrets
from jobs.models import JobDefinition
from runs import generations, metrics, move_log, partitions, sql
from runs.models import CLAIMABLE_STATES, HISTORY_STATES, OPEN_DAY, Attempt, ReadyMark, Run

S = Run.State
log = logging.getLogger("duetime.transitions")

# (from, to): who makes the move. Anything not listed never happens.
TRANSITIONS = {
    (S.SCHEDULED, S.LEASED): "lease_runs (claims.claim decides which)",
    (S.RETRY_WAIT, S.LEASED): "lease_runs (claims.claim decides which)",
    (S.SCHEDULED, S.CANCELLED): "cancel_run, cancel_waiting, cancel_future_runs",
    (S.RETRY_WAIT, S.CANCELLED): "cancel_run, cancel_waiting, cancel_future_runs",
    # Runs skipped by the missed-run policy are inserted skipped (enqueue.insert_runs), never moved.
    (S.SCHEDULED, S.SKIPPED): "skip_for_overlap (claims.claim, overlap forbid)",
    (S.RETRY_WAIT, S.SKIPPED): "skip_for_overlap (an occurrence waiting to retry while a later one runs)",
    (S.LEASED, S.SUCCEEDED): "complete_runs",
    (S.LEASED, S.DEAD): "complete_runs (no attempts left or permanent), expire_leases",
    (S.LEASED, S.CANCELLED): "cancel_run, cancel_leases_of_job (overlap replace)",
    (S.LEASED, S.SCHEDULED): "release (worker shutdown or a failed Celery publish, first attempt)",
    (S.LEASED, S.RETRY_WAIT): "complete_runs (failed, attempts left), expire_leases (lease expired), release",
    (S.DEAD, S.SCHEDULED): "replay_many",
}


class IllegalMove(Exception):
    """A move of Run.state that TRANSITIONS does not list."""


class StaleLease(Exception):
    """The fencing token is not the run's current one, or the run is no longer leased."""


def _check(pairs):
    unknown = [pair for pair in pairs if pair not in TRANSITIONS]
    if unknown:
        raise IllegalMove(f"not in runs.transitions.TRANSITIONS: {', '.join(f'{a} -> {b}' for a, b in unknown)}")


def moves(*pairs):
    """Declare the (from, to) moves a function makes; checked against TRANSITIONS at import."""
    _check(pairs)

    def declare(function):
        function.moves = frozenset(pairs)
        return function

    return declare


def _move(runs, source, target, **values):
    """UPDATE the rows of `runs` that are in `source` (a state or a tuple of states) to `target`.

    Returns how many moved. Raises IllegalMove, before touching anything, if
    a (source, target) pair is not in TRANSITIONS.
    """
    sources = (source,) if isinstance(source, str) else tuple(source)
    _check([(s, target) for s in sources])
    if target in CLAIMABLE_STATES:
        # Claimable again: the runs need their ready marks. Named by id, locked first: `runs` may
        # filter on a column the move changes (an attempt given back), so it cannot name them after.
        with transaction.atomic(savepoint=False):
            ids = list(runs.filter(state__in=sources).select_for_update().values_list("pk", flat=True))
            moved = 0
            for i in range(0, len(ids), 5000):
                chunk = ids[i : i + 5000]
                moved += _update(Run.objects.filter(pk__in=chunk, state__in=sources), target, values)
                _mark_ready(Run.objects.filter(pk__in=chunk, state=target, history_day=OPEN_DAY))
        return moved
    if target not in HISTORY_STATES:
        return _update(runs.filter(state__in=sources), target, values)
    # Into history (cancelled, skipped): the runs move to the day's partition, and their attempts follow.
    # `runs` names runs, never their state (the state condition is this function's), so the runs moved
    # are those of `runs` now in `target` on that day; their attempts still open go there too.
    day = values.setdefault("history_day", partitions.history_day(values["finished_at"]))
    with transaction.atomic(savepoint=False):
        moved = _update(runs.filter(state__in=sources), target, values)
        if moved:
            there = runs.filter(state=target, history_day=day).values("pk")
            Attempt.objects.filter(history_day=OPEN_DAY, run_id__in=there).update(history_day=day)
    return moved


def _mark_ready(runs):
    """The ready marks of runs just made claimable (runs.models.ReadyMark): one per (tenant, queue), at the earliest."""
    earliest = runs.values("tenant_id", "queue").annotate(due_at=Min("available_at")).order_by()
    ReadyMark.objects.bulk_create(ReadyMark(**row) for row in earliest)


def _update(runs, target, values):
    if not move_log.enabled():
        return runs.update(state=target, **values)
    # The move log names each run moved: lock them, move exactly those, log them once committed.
    with transaction.atomic(savepoint=False):
        rows = move_log.locked_rows(runs)
        ids = [row[0] for row in rows]
        moved = sum(
            Run.objects.filter(pk__in=ids[i : i + 5000]).update(state=target, **values)
            for i in range(0, len(ids), 5000)
        )
        move_log.moved(rows, target)
    return moved


def _attempts_follow(run_ids, day):
    """Move the attempts of these runs to the partition their runs are moving to (an attempt lives with its run)."""
    attempts = Attempt.objects.filter(run_id__in=run_ids)
    if day == OPEN_DAY:
        return attempts.exclude(history_day=OPEN_DAY).update(history_day=day)
    return attempts.filter(history_day=OPEN_DAY).update(history_day=day)


def _moved_away(error):
    """PostgreSQL's refusal to lock or update a row that a concurrent transaction moved to another partition."""
    cause = error.__cause__
    return getattr(cause, "sqlstate", None) == "40001" and "moved to another partition" in str(cause)


def _again_if_moved(step, *args, tries=2, **kwargs):
    """`step(...)`, again if a row it locked was moved to history under it (see the module docstring), `tries` in all.

    A step on one run needs one more try: the run is gone from the open
    partition by then. A step on a set of runs may meet another moved one each
    time; each try has fewer left. Only on its own: inside a caller's
    transaction the error is the caller's to retry.
    """
    if connection.in_atomic_block:
        return step(*args, **kwargs)
    for _ in range(tries - 1):
        try:
            return step(*args, **kwargs)
        except OperationalError as error:
            if not _moved_away(error):
                raise
            log.info("a run was moved to history under this move (%s); trying again", error.__cause__)
    return step(*args, **kwargs)


# For a caller that owns the transaction around several moves (runs.controls): the same retry, around it all.
again_if_moved = _again_if_moved


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
    args: list | None = None  # a Django task's positional arguments (Run.args)
    task_module_prefixes: str | None = None  # the tenant's, read with the lease (runs.targets.task_prefixes)

    @classmethod
    def from_row(cls, row):
        """A Lease from a lease_runs row (SQLite returns times as text and the payload and args as JSON)."""
        values = list(row)
        for i in (11, 17):  # payload, args
            if i < len(values) and isinstance(values[i], str):
                values[i] = json.loads(values[i])
        for i in (12, 13, 14, 15):  # due_at, available_at, started_at, lease_expires_at
            values[i] = sql.aware(values[i])
        return cls(*values)


# A row that complete_runs and expire_leases RETURN for each run they moved (outcome: expire_leases only),
# read by the metrics and the move log without another query.
MovedRun = collections.namedtuple(
    "MovedRun",
    "run_id state available_at job_id tenant_id attempt fencing_token idempotency_key worker_id queue priority "
    "job_name outcome",
    defaults=(None,),
)


@dataclasses.dataclass(frozen=True)
class Completion:
    run_id: int
    fencing_token: int
    outcome: str  # succeeded | failed | timed_out
    error: str = ""
    retryable: bool = True
    return_value: object = None  # stored on the attempt as JSON (checked by targets.check_return_value)


def backoff_seconds(attempt, base, most, rng=random):
    """Full jitter before retry `attempt` (1, 2, ...): uniform(0, min(most, base * 2**(attempt-1))).

    The formula complete_runs and expire_leases compute in SQL, for each run they retry.
    """
    return rng.uniform(0, min(most, base * 2 ** (attempt - 1)))


# --- the lease ---------------------------------------------------------------


@moves((S.SCHEDULED, S.LEASED), (S.RETRY_WAIT, S.LEASED))
def lease_runs(run_ids, worker_id, lease_seconds, *, now=None):
    """Lease these runs (chosen and locked by claims.claim) to `worker_id`; returns [Lease] in `run_ids`' order.

    Each gets a new fencing token from the one global source, `attempt + 1`,
    and a lease of `lease_seconds` capped by the job's timeout. The order is
    the claim's (priority, round-robin, due), in which a worker starts them and
    a dispatcher publishes them: the statement returns its rows in its plan's
    order, which the planner may change (another join returns them in its own).
    """
    ids = list(run_ids)
    rows = sql.execute("lease_runs", {"ids": ids, "worker": worker_id, "now": now, "lease": lease_seconds})
    position = {run_id: i for i, run_id in enumerate(ids)}
    leases = sorted((Lease.from_row(row) for row in rows), key=lambda lease: position[lease.run_id])
    move_log.leased(leases, worker_id)
    return leases


def heartbeat(run_id, fencing_token, lease_seconds, *, now=None):
    """Extend a lease; returns the new expiry. Raises StaleLease if the caller lost it."""
    params = {"id": run_id, "token": fencing_token, "lease": lease_seconds, "now": now}
    rows = _again_if_moved(lambda: sql.execute("heartbeat", params))
    if not rows:
        metrics.heartbeat_refused()
        move_log.refused("heartbeat_refused", {run_id: (fencing_token, "")})
        raise StaleLease(f"run {run_id}: fencing token {fencing_token} is not the current lease")
    return sql.aware(rows[0][0])


def start_attempt(run_id, fencing_token, worker_id, lease_seconds, *, dispatched_by, now=None):
    """Take over a lease that `dispatched_by` (a run_dispatcher) claimed and published; returns the new expiry.

    The Celery task calls it before the handler: it records `worker_id` (the
    Celery worker and task id, shown on the attempt) and the real start, once
    per lease. Raises StaleLease if the token is no longer current or the lease
    was already taken over (a message delivered twice): that message must not run.
    """
    params = {"id": run_id, "token": fencing_token, "worker": worker_id, "dispatched_by": dispatched_by}
    rows = _again_if_moved(lambda: sql.execute("start_attempt", {**params, "lease": lease_seconds, "now": now}))
    if not rows:
        move_log.refused("start_refused", {run_id: (fencing_token, "")}, worker=worker_id)
        raise StaleLease(f"run {run_id}: fencing token {fencing_token} is not a lease waiting for its executor")
    return sql.aware(rows[0][0])


def start_attempts(leases, worker_id, lease_seconds, *, dispatched_by, now=None):
    """Take over many leases at once (a Celery batch message); returns {run_id: new expiry} of those taken.

    `leases` are (run_id, fencing_token) pairs; each is taken on
    start_attempt's terms, in one statement. The ones left out were stale
    (cancelled, reaped, taken over already) and must not run; they are
    logged as refused. With `dispatched_by` equal to `worker_id` it stamps
    the caller's own runs again: their start and lease count from now.
    """
    leases = list(leases)
    if not leases:
        return {}
    params = {
        "ids": [run_id for run_id, _ in leases],
        "tokens": [token for _, token in leases],
        "worker": worker_id,
        "dispatched_by": dispatched_by,
        "lease": lease_seconds,
        "now": now,
    }
    rows = _again_if_moved(lambda: sql.execute("start_attempts", params))
    taken = {run_id: sql.aware(expiry) for run_id, expiry in rows}
    if len(taken) < len(leases):
        stale = {run_id: (token, "") for run_id, token in leases if run_id not in taken}
        move_log.refused("start_refused", stale, worker=worker_id)
    return taken


# --- completion and expiry ---------------------------------------------------


def complete(run_id, fencing_token, outcome, error="", retryable=True, *, now=None):
    """Finish one attempt; returns the run's new state. Raises StaleLease."""
    moved = complete_many([Completion(run_id, fencing_token, outcome, error, retryable)], now=now)
    if run_id not in moved:
        raise StaleLease(f"run {run_id}: fencing token {fencing_token} is not the current lease")
    return moved[run_id]


def complete_many(completions, *, now=None):
    """Finish many attempts in one transaction; returns {run_id: new state}.

    Runs whose token is stale (or that are no longer leased) are left alone
    and missing from the result. Writes the attempt rows, and a dead letter
    for each run that died, in the same transaction.
    """
    if not completions:
        return {}
    return _again_if_moved(_complete_in_transaction, completions, now)


def _complete_in_transaction(completions, now):
    with transaction.atomic(savepoint=False):
        return complete_runs(completions, now=now)


@moves((S.LEASED, S.SUCCEEDED), (S.LEASED, S.RETRY_WAIT), (S.LEASED, S.DEAD))
def complete_runs(completions, *, now=None):
    """The complete_runs query for these completions; returns {run_id: new state}."""
    params = {
        "ids": [c.run_id for c in completions],
        "tokens": [c.fencing_token for c in completions],
        "outcomes": [c.outcome for c in completions],
        # Handlers' errors enter the engine here (worker and API alike): redacted before they are stored.
        "errors": [secrets.redact(c.error)[:10_000] for c in completions],
        "retryable": [bool(c.retryable) and c.outcome != "succeeded" for c in completions],
        "results": [None if c.return_value is None else json.dumps(c.return_value) for c in completions],
        "now": now,
    }
    rows = [MovedRun(*row) for row in sql.execute("complete_runs", params)]
    metrics.completed(completions, rows)
    move_log.completed(completions, rows)
    return {row.run_id: row.state for row in rows}


def reap(*, now=None, limit=1000):
    """Move runs whose lease expired to retry_wait (attempts left) or dead.

    Returns {run_id: new state}. A crash halfway leaves each run either
    untouched or fully moved (one transaction); the next pass continues.
    """
    return _again_if_moved(_reap_in_transaction, now, limit)


def _reap_in_transaction(now, limit):
    with transaction.atomic():
        return expire_leases(now=now, limit=limit)


@moves((S.LEASED, S.RETRY_WAIT), (S.LEASED, S.DEAD))
def expire_leases(*, now=None, limit=1000):
    """The expire_leases query: at most `limit` expired leases; returns {run_id: new state}."""
    rows = [MovedRun(*row) for row in sql.execute("expire_leases", {"now": now, "n": limit})]
    metrics.expired(rows)
    move_log.expired(rows)
    return {row.run_id: row.state for row in rows}


@moves((S.LEASED, S.SCHEDULED), (S.LEASED, S.RETRY_WAIT))
def release(run_id, fencing_token, *, why="released unfinished by a worker shutting down", held_by=None, now=None):
    """Give a lease back unused (a worker shutting down, a publish the broker refused): the attempt does not count.

    The run is claimable again at once; `why` is recorded as its last error.
    `held_by`: only while that worker still holds it (a dispatcher releases
    nothing a Celery worker has taken over). Returns 1 if released, 0 if stale.
    """
    now = now or timezone.now()
    holder = {} if held_by is None else {"worker_id": held_by}
    with transaction.atomic():
        held = (
            Run.objects.select_for_update()
            .filter(pk=run_id, fencing_token=fencing_token, state=S.LEASED, **holder)
            .first()
        )
        if held is None or fencing_token < generations.first_token(generations.current()):
            return 0
        return _move(
            Run.objects.filter(pk=run_id, fencing_token=fencing_token),
            S.LEASED,
            S.SCHEDULED if held.attempt <= 1 else S.RETRY_WAIT,
            attempt=held.attempt - 1,
            lease_expires_at=None,
            available_at=max(now, held.available_at),
            last_error=why,
        )


RELEASE_TRIES = 10  # release_older_generations: how often it meets a moved run before it gives up


@moves((S.LEASED, S.SCHEDULED), (S.LEASED, S.RETRY_WAIT))
def release_older_generations(*, why, now=None):
    """After a restore (manage.py after_restore): give back every lease of an earlier restore generation.

    Their holders are refused from now on (their tokens are stale), and what
    the restored rows say about those attempts cannot be trusted: each run is
    claimable again at once with the attempt uncounted, as `release` does, and
    runs again with its idempotency key. Returns how many runs were released.
    """
    # The worker and the scheduler keep running through a restore: a completion that began before the bump
    # may move one of these runs to history under this statement's lock, so it tries again (fewer left each time).
    return _again_if_moved(_release_older_generations, why, now or timezone.now(), tries=RELEASE_TRIES)


def _release_older_generations(why, now):
    older = Run.objects.filter(history_day=OPEN_DAY, fencing_token__lt=generations.first_token(generations.current()))
    values = {"attempt": F("attempt") - 1, "lease_expires_at": None, "last_error": why}
    values["available_at"] = Greatest(Value(now), F("available_at"))
    with transaction.atomic():
        first = _move(older.filter(attempt__lte=1), S.LEASED, S.SCHEDULED, **values)
        later = _move(older.filter(attempt__gt=1), S.LEASED, S.RETRY_WAIT, **values)
    return first + later


# --- policies and operators ----------------------------------------------------


@moves((S.SCHEDULED, S.SKIPPED), (S.RETRY_WAIT, S.SKIPPED))
def skip_for_overlap(run_ids, *, now=None):
    """Claim-time overlap `forbid`: record these scheduled occurrences skipped."""
    return _move(
        Run.objects.filter(pk__in=run_ids),
        CLAIMABLE_STATES,
        S.SKIPPED,
        finished_at=now or timezone.now(),
        reason="overlap: the previous run was still running (overlap policy forbid)",
    )


@moves((S.LEASED, S.CANCELLED))
def cancel_leases_of_job(job_id, *, reason, now=None):
    """Take the leases of a job's running runs away (overlap `replace`).

    Their next heartbeat or completion is refused as stale; each lost
    attempt is recorded with outcome `stale`.
    """
    now = now or timezone.now()
    with transaction.atomic():
        runs = list(Run.objects.select_for_update().filter(job_id=job_id, state=S.LEASED, history_day=OPEN_DAY))
        for run in runs:
            _cancel_leased(run, reason, now)
    return len(runs)


def _cancel_leased(run, reason, now):
    moved = _move(
        Run.objects.filter(pk=run.pk, fencing_token=run.fencing_token),
        S.LEASED,
        S.CANCELLED,
        lease_expires_at=None,
        finished_at=now,
        reason=reason,
    )
    if moved:
        Attempt.objects.create(
            run=run,
            attempt=run.attempt,
            fencing_token=run.fencing_token,
            worker_id=run.worker_id,
            available_at=run.available_at,
            started_at=run.started_at,
            ended_at=max(now, run.started_at),
            outcome=Attempt.Outcome.STALE,
            error=reason,
        )
    return moved


@moves((S.SCHEDULED, S.CANCELLED), (S.RETRY_WAIT, S.CANCELLED), (S.LEASED, S.CANCELLED))
def cancel_run(run, *, reason, now=None):
    """Cancel one run that has not finished. Returns True if this call cancelled it."""
    return _again_if_moved(_cancel_run, run, reason, now or timezone.now())


def _cancel_run(run, reason, now):
    with transaction.atomic():
        current = Run.objects.select_for_update().filter(pk=run.pk).first()
        if current is None or current.is_terminal:
            return False
        if current.state == S.LEASED:
            return bool(_cancel_leased(current, reason, now))
        runs = Run.objects.filter(pk=run.pk)
        return bool(_move(runs, current.state, S.CANCELLED, finished_at=now, reason=reason))


@moves((S.SCHEDULED, S.CANCELLED), (S.RETRY_WAIT, S.CANCELLED))
def cancel_future_runs(job_ids, *, reason, now=None):
    """Cancel the runs of these jobs that have not started (jobs deleted); returns how many."""
    runs = Run.objects.filter(job_id__in=job_ids)
    return _move(runs, CLAIMABLE_STATES, S.CANCELLED, finished_at=now or timezone.now(), reason=reason)


@moves((S.SCHEDULED, S.CANCELLED), (S.RETRY_WAIT, S.CANCELLED))
def cancel_waiting(runs, *, reason, now=None, limit=100_000):
    """Cancel the runs of `runs` that wait to be claimed (scheduled, retry_wait); returns them.

    Leased runs are cancelled one by one with cancel_run (each records its attempt).
    """
    now = now or timezone.now()
    with transaction.atomic():
        waiting = locked(runs.filter(state__in=CLAIMABLE_STATES))[:limit]
        for state in {run.state for run in waiting}:
            ids = [run.pk for run in waiting if run.state == state]
            _move(Run.objects.filter(pk__in=ids), state, S.CANCELLED, finished_at=now, reason=reason)
    return waiting


def locked(queryset, **expected):
    """The rows of `queryset` in their expected state, locked (their own table only), tenant loaded."""
    rows = queryset.model.objects.select_for_update(of=("self",)).filter(
        pk__in=queryset.order_by().values("pk"), **expected
    )
    return list(rows.select_related("tenant").order_by("pk"))


# --- the dead-letter queue -------------------------------------------------------


@moves((S.DEAD, S.SCHEDULED))
def replay_many(dead_letters, *, actor, now=None):
    """Send the dead runs of these open dead letters back to `scheduled`; returns the letters replayed.

    Same idempotency key, a fresh attempt budget (the job's max_attempts more).
    A letter already replayed or discarded, or whose run is no longer dead, is left alone.
    Raises jobs.permissions.Revoked, replaying none, when a letter's job may no longer run
    (its tenant lost the module prefix or the network its target needs).
    """
    now = now or timezone.now()
    with transaction.atomic():
        letters = locked(dead_letters, replayed_at=None, discarded_at=None)
        dead = set(
            Run.objects.select_for_update()
            .filter(pk__in=[d.run_id for d in letters], state=S.DEAD)
            .values_list("pk", flat=True)
        )
        letters = [d for d in letters if d.run_id in dead]
        jobs = JobDefinition.objects.filter(pk__in={d.job_id for d in letters}).select_related("tenant")
        permissions.refuse_revoked(jobs)
        resolved = {"resolved_by": actor, "history_day": partitions.history_day(now)}  # the letters go into history
        DeadLetter.objects.filter(pk__in=[d.pk for d in letters]).update(replayed_at=now, **resolved)
        budgets = dict(
            JobDefinition.objects.filter(pk__in={d.job_id for d in letters}).values_list("pk", "max_attempts")
        )
        by_budget = {}
        for d in letters:
            by_budget.setdefault(budgets[d.job_id], []).append(d.run_id)
        # Pending again, so open (a dead run stays open while its letter is; one from before the
        # partitions may not have), its attempts with it.
        fresh = {"available_at": now, "finished_at": None, "last_error": "", "history_day": OPEN_DAY}
        for budget, run_ids in by_budget.items():
            runs = Run.objects.filter(pk__in=run_ids)
            _move(runs, S.DEAD, S.SCHEDULED, max_attempts=F("attempt") + budget, **fresh)
            _attempts_follow(run_ids, OPEN_DAY)
    return letters


def replay(dead_letter, *, actor, now=None):
    """replay_many for one dead letter; False if it was already closed or its run is not dead."""
    return bool(replay_many(DeadLetter.objects.filter(pk=dead_letter.pk), actor=actor, now=now))


def discard_many(dead_letters, *, actor, now=None):
    """Close these open dead letters without running them again; returns those discarded (runs stay dead).

    Letters and their dead runs (with their attempts) go into history, the partition of today: retention
    drops them once the retention has passed since the discard, never while a letter was open.
    """
    now = now or timezone.now()
    with transaction.atomic():
        letters = locked(dead_letters, replayed_at=None, discarded_at=None)
        day = partitions.history_day(now)
        DeadLetter.objects.filter(pk__in=[d.pk for d in letters]).update(
            discarded_at=now, resolved_by=actor, history_day=day
        )
        # A dead run changes only through its open letter, which is locked here (replay locks it too).
        dead = Run.objects.filter(pk__in=[d.run_id for d in letters], state=S.DEAD, history_day=OPEN_DAY)
        run_ids = list(dead.values_list("pk", flat=True))
        _attempts_follow(run_ids, day)
        Run.objects.filter(pk__in=run_ids).update(history_day=day)
    return letters


def discard(dead_letter, *, actor, now=None):
    """discard_many for one dead letter; False if it was already closed."""
    return bool(discard_many(DeadLetter.objects.filter(pk=dead_letter.pk), actor=actor, now=now))
