"""The run state machine: the table of allowed moves and every function that
changes Run.state, the dead-letter queue in and out included.

Every move is a compare-and-set on the expected state (and, for leased runs,
the fencing token): 0 rows changed means someone else moved the run first,
and the caller is told so (`StaleLease`, or a count smaller than asked).
"""

import dataclasses
import datetime as dt
import random

from django.apps import apps
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from runs import sql
from runs.models import CLAIMABLE_STATES, Attempt, Run

S = Run.State

# (from, to): who makes the move. Anything not listed never happens.
TRANSITIONS = {
    (S.SCHEDULED, S.LEASED): "claims.claim",
    (S.RETRY_WAIT, S.LEASED): "claims.claim",
    (S.SCHEDULED, S.CANCELLED): "cancel_run, cancel_waiting, cancel_future_runs",
    (S.RETRY_WAIT, S.CANCELLED): "cancel_run, cancel_waiting, cancel_future_runs",
    (S.SCHEDULED, S.SKIPPED): "skip_for_overlap (claim), materialize (missed-run policy)",
    (S.LEASED, S.SUCCEEDED): "complete_many",
    (S.LEASED, S.DEAD): "complete_many (no attempts left or permanent), reap",
    (S.LEASED, S.CANCELLED): "cancel_run, cancel_leases_of_job (overlap replace)",
    (S.LEASED, S.SCHEDULED): "release (worker shutdown, first attempt)",
    (S.LEASED, S.RETRY_WAIT): "complete_many (failed, attempts left), reap (lease expired), release",
    (S.DEAD, S.SCHEDULED): "replay, replay_many",
}


class StaleLease(Exception):
    """The fencing token is not the run's current one, or the run is no longer leased."""


@dataclasses.dataclass(frozen=True)
class Completion:
    run_id: int
    fencing_token: int
    outcome: str  # succeeded | failed | timed_out
    error: str = ""
    retryable: bool = True


def backoff_seconds(attempt, base, most, rng=random):
    """Full jitter before retry `attempt` (1, 2, ...): uniform(0, min(most, base * 2**(attempt-1)))."""
    return rng.uniform(0, min(most, base * 2 ** (attempt - 1)))


def next_fencing_tokens(n):
    """`n` fresh, strictly increasing values of the one global fencing source."""
    with sql.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(sql.query("next_fencing_tokens"), {"n": n})
            return [row[0] for row in cursor.fetchall()]
        with transaction.atomic(savepoint=False):
            cursor.execute(sql.query("next_fencing_tokens"), {"n": n})
            last = cursor.fetchone()[0]
        return list(range(last - n + 1, last + 1))


def heartbeat(run_id, fencing_token, lease_seconds, *, now=None):
    """Extend a lease; returns the new expiry. Raises StaleLease if the caller lost it."""
    with sql.cursor() as cursor:
        if connection.vendor == "postgresql":
            params = {"id": run_id, "token": fencing_token, "lease": lease_seconds, "now": now}
        else:
            params = {
                "id": run_id,
                "token": fencing_token,
                "lease": lease_seconds,
                "now": sql.db_time(now or timezone.now()),
            }
        cursor.execute(sql.query("heartbeat"), params)
        row = cursor.fetchone()
    if row is None:
        raise StaleLease(f"run {run_id}: fencing token {fencing_token} is not the current lease")
    return sql.aware(row[0])


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
    if connection.vendor == "postgresql":
        params = {
            "ids": [c.run_id for c in completions],
            "tokens": [c.fencing_token for c in completions],
            "outcomes": [c.outcome for c in completions],
            "errors": [c.error[:10_000] for c in completions],
            "retryable": [bool(c.retryable) and c.outcome != "succeeded" for c in completions],
            "now": now,
        }
        with transaction.atomic(savepoint=False), sql.cursor() as cursor:
            cursor.execute(sql.query("complete_runs"), params)
            return {row[0]: row[1] for row in cursor.fetchall()}
    return _complete_sqlite(completions, now or timezone.now())


@transaction.atomic(savepoint=False)
def _complete_sqlite(completions, now):
    moved = {}
    for c in completions:
        run = (
            Run.objects.filter(pk=c.run_id, fencing_token=c.fencing_token, state=S.LEASED).select_related("job").first()
        )
        if run is None:
            continue
        if c.outcome == "succeeded":
            state = S.SUCCEEDED
        elif c.retryable and run.attempt < run.max_attempts:
            state = S.RETRY_WAIT
        else:
            state = S.DEAD
        moved[run.pk] = _finish_attempt(run, state, c.outcome, c.error[:10_000], now)
    return moved


def _finish_attempt(run, state, outcome, error, now):
    """SQLite: end `run`'s current attempt (run locked by the IMMEDIATE transaction)."""
    values = {
        "state": state,
        "lease_expires_at": None,
        "last_error": error,
        "finished_at": None if state == S.RETRY_WAIT else now,
    }
    if state == S.RETRY_WAIT:
        job = run.job
        values["available_at"] = now + dt.timedelta(
            seconds=backoff_seconds(run.attempt, job.retry_base_seconds, job.retry_max_seconds)
        )
    updated = Run.objects.filter(pk=run.pk, fencing_token=run.fencing_token, state=S.LEASED).update(**values)
    assert updated == 1, "the IMMEDIATE transaction holds the write lock"
    _record_attempt(run, outcome, error, now)
    if state == S.DEAD:
        _dead_letter(run, error, now)
    return state


def _record_attempt(run, outcome, error, now):
    """The attempt row of `run`'s current lease, ended now (the ORM paths; SQL writes its own)."""
    return Attempt.objects.create(
        run=run,
        attempt=run.attempt,
        fencing_token=run.fencing_token,
        worker_id=run.worker_id,
        available_at=run.available_at,
        started_at=run.started_at,
        ended_at=max(now, run.started_at),
        outcome=outcome,
        error=error,
    )


def _dead_letter(run, error, now):
    apps.get_model("dlq", "DeadLetter").objects.create(
        run=run, job_id=run.job_id, tenant_id=run.tenant_id, last_error=error, dead_at=now
    )


def reap(*, now=None, limit=1000):
    """Move runs whose lease expired to retry_wait (attempts left) or dead.

    Returns {run_id: new state}. A crash halfway leaves each run either
    untouched or fully moved (one transaction); the next pass continues.
    """
    if connection.vendor == "postgresql":
        with transaction.atomic(), sql.cursor() as cursor:
            cursor.execute(sql.query("expire_leases"), {"now": now, "n": limit})
            return {row[0]: row[1] for row in cursor.fetchall()}
    now = now or timezone.now()
    with transaction.atomic():
        expired = Run.objects.filter(state=S.LEASED, lease_expires_at__lt=now).select_related("job")
        moved = {}
        for run in expired.order_by("lease_expires_at")[:limit]:
            timed_out = run.lease_expires_at >= run.started_at + dt.timedelta(seconds=run.timeout_seconds)
            outcome = Attempt.Outcome.TIMED_OUT if timed_out else Attempt.Outcome.LEASE_EXPIRED
            state = S.RETRY_WAIT if run.attempt < run.max_attempts else S.DEAD
            error = "timed out" if timed_out else "lease expired"
            moved[run.pk] = _finish_attempt(run, state, outcome, error, now)
        return moved


def release(run_id, fencing_token, *, now=None):
    """Give a lease back unused (a worker shutting down): the attempt does not count.

    The run is claimable again at once. Returns 1 if released, 0 if stale.
    """
    now = now or timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, fencing_token=fencing_token, state=S.LEASED).first()
        if run is None:
            return 0
        return Run.objects.filter(pk=run_id, fencing_token=fencing_token, state=S.LEASED).update(
            state=S.SCHEDULED if run.attempt <= 1 else S.RETRY_WAIT,
            attempt=run.attempt - 1,
            lease_expires_at=None,
            available_at=max(now, run.available_at),
            last_error="released unfinished by a worker shutting down",
        )


def skip_for_overlap(run_ids, *, now=None):
    """Claim-time overlap `forbid`: record these scheduled occurrences skipped."""
    return Run.objects.filter(pk__in=run_ids, state__in=CLAIMABLE_STATES).update(
        state=S.SKIPPED,
        finished_at=now or timezone.now(),
        reason="overlap: the previous run was still running (overlap policy forbid)",
    )


def cancel_leases_of_job(job_id, *, reason, now=None):
    """Take the leases of a job's running runs away (overlap `replace`).

    Their next heartbeat or completion is refused as stale; each lost
    attempt is recorded with outcome `stale`.
    """
    now = now or timezone.now()
    with transaction.atomic():
        runs = list(Run.objects.select_for_update().filter(job_id=job_id, state=S.LEASED))
        for run in runs:
            _cancel_leased(run, reason, now)
    return len(runs)


def _cancel_leased(run, reason, now):
    moved = Run.objects.filter(pk=run.pk, fencing_token=run.fencing_token, state=S.LEASED).update(
        state=S.CANCELLED, lease_expires_at=None, finished_at=now, reason=reason
    )
    if moved:
        _record_attempt(run, Attempt.Outcome.STALE, reason, now)
    return moved


def cancel_run(run, *, reason, now=None):
    """Cancel one run that has not finished. Returns True if this call cancelled it."""
    now = now or timezone.now()
    with transaction.atomic():
        current = Run.objects.select_for_update().filter(pk=run.pk).first()
        if current is None or current.is_terminal or current.state == S.DEAD:
            return False
        if current.state == S.LEASED:
            return bool(_cancel_leased(current, reason, now))
        return bool(
            Run.objects.filter(pk=run.pk, state=current.state).update(state=S.CANCELLED, finished_at=now, reason=reason)
        )


def cancel_future_runs(job_ids, *, reason, now=None):
    """Cancel the runs of these jobs that have not started (jobs deleted); returns how many."""
    return Run.objects.filter(job_id__in=job_ids, state__in=CLAIMABLE_STATES).update(
        state=S.CANCELLED, finished_at=now or timezone.now(), reason=reason
    )


def locked(queryset, **expected):
    """The rows of `queryset` in their expected state, locked (their own table only), tenant loaded."""
    rows = queryset.model.objects.select_for_update(of=("self",)).filter(
        pk__in=queryset.order_by().values("pk"), **expected
    )
    return list(rows.select_related("tenant").order_by("pk"))


def replay_many(dead_letters, *, actor, now=None):
    """Send the dead runs of these open dead letters back to `scheduled`; returns the letters replayed.

    Same idempotency key, a fresh attempt budget (the job's max_attempts more).
    A letter already replayed or discarded, or whose run is no longer dead, is left alone.
    """
    DeadLetter = apps.get_model("dlq", "DeadLetter")
    now = now or timezone.now()
    with transaction.atomic():
        letters = locked(dead_letters, replayed_at=None, discarded_at=None)
        dead = set(
            Run.objects.select_for_update()
            .filter(pk__in=[d.run_id for d in letters], state=S.DEAD)
            .values_list("pk", flat=True)
        )
        letters = [d for d in letters if d.run_id in dead]
        DeadLetter.objects.filter(pk__in=[d.pk for d in letters]).update(replayed_at=now, resolved_by=actor)
        budgets = dict(
            apps.get_model("jobs", "JobDefinition")
            .objects.filter(pk__in={d.job_id for d in letters})
            .values_list("pk", "max_attempts")
        )
        by_budget = {}
        for d in letters:
            by_budget.setdefault(budgets[d.job_id], []).append(d.run_id)
        for budget, run_ids in by_budget.items():
            Run.objects.filter(pk__in=run_ids, state=S.DEAD).update(
                state=S.SCHEDULED, available_at=now, finished_at=None, max_attempts=F("attempt") + budget, last_error=""
            )
    return letters


def replay(dead_letter, *, actor, now=None):
    """replay_many for one dead letter; False if it was already closed or its run is not dead."""
    DeadLetter = apps.get_model("dlq", "DeadLetter")
    return bool(replay_many(DeadLetter.objects.filter(pk=dead_letter.pk), actor=actor, now=now))


def discard_many(dead_letters, *, actor, now=None):
    """Close these open dead letters without running them again; returns those discarded."""
    DeadLetter = apps.get_model("dlq", "DeadLetter")
    with transaction.atomic():
        letters = locked(dead_letters, replayed_at=None, discarded_at=None)
        DeadLetter.objects.filter(pk__in=[d.pk for d in letters]).update(
            discarded_at=now or timezone.now(), resolved_by=actor
        )
    return letters


def discard(dead_letter, *, actor, now=None):
    """discard_many for one dead letter; False if it was already closed."""
    DeadLetter = apps.get_model("dlq", "DeadLetter")
    return bool(discard_many(DeadLetter.objects.filter(pk=dead_letter.pk), actor=actor, now=now))


def cancel_waiting(runs, *, reason, now=None, limit=100_000):
    """Cancel the runs of `runs` that wait to be claimed (scheduled, retry_wait); returns them.

    Leased runs are cancelled one by one with cancel_run (each records its attempt).
    """
    now = now or timezone.now()
    with transaction.atomic():
        waiting = locked(runs.filter(state__in=CLAIMABLE_STATES))[:limit]
        for state in {run.state for run in waiting}:
            ids = [run.pk for run in waiting if run.state == state]
            Run.objects.filter(pk__in=ids, state=state).update(state=S.CANCELLED, finished_at=now, reason=reason)
    return waiting
