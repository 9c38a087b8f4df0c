"""The one insert path of runs, and one-off and delayed runs.

`insert_runs` is the only code that inserts into the runs table: cron and
`at` occurrences and the missed-run summaries (runs.materialize), triggers
and API runs (`enqueue`, controls.trigger_many), backfills
(runs.backfill), the summaries of what a paused job passed over
(controls.resume) and the benchmark's runs (bench.setup) all come through
it; `insert_fresh_run` is its short form for one run under a key made fresh
for it (a Django task's enqueue, tasks_backend), which has no earlier run to
look for. So whatever every new run must obey belongs here, the tenants' quotas
(jobs.quotas) first: a door names the quota it obeys, and every door that
names one obeys it the same way.

`enqueue` creates one run now, at a time, or after a duration. A caller's
idempotency key makes the call repeatable: the same key (per tenant)
returns the run the first call created, whatever the second call asked.
"""

import contextlib
import datetime as dt
import enum
import json
import uuid
from collections import Counter

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs import audit, cron, jitter, permissions, quotas
from jobs.validation import check_payload
from runs import sql
from runs.models import Run

INSERT_CHUNK = 500  # runs per statement; `progress` is told after each


class Quota(enum.StrEnum):
    """The tenant quotas a door obeys (jobs/quotas.py); a door that names none obeys none."""

    ENQUEUE = "enqueue"  # the enqueue rate and the pending runs: a team's API runs and triggers
    PENDING = "pending"  # the pending runs only: a team's API backfills


def idempotency_key(job, due_at):
    """`<job name>@<due_at in the job's zone, ISO 8601 with offset>`: stable across attempts and replays."""
    return f"{job.name}@{due_at.astimezone(cron.get_zone(job.time_zone)).isoformat()}"


def build_runs(job, due_times, *, origin=Run.Origin.SCHEDULE, payload=None, key=None):
    """Unsaved Run rows for `job` at `due_times` (jitter applied to available_at)."""
    offset = dt.timedelta(seconds=jitter.stable_jitter(job.tenant.name, job.name, job.jitter_seconds))
    return [
        Run(
            job=job,
            tenant_id=job.tenant_id,
            origin=origin,
            due_at=due,
            available_at=due + offset,
            state=Run.State.SCHEDULED,
            max_attempts=job.max_attempts,
            timeout_seconds=job.timeout_seconds,
            idempotency_key=key or idempotency_key(job, due),
            queue=job.queue,
            priority=job.priority,
            shard=job.shard,
            payload=job.payload if payload is None else payload,
        )
        for due in due_times
    ]


def skipped_rows(job, skipped, now):
    """Unsaved `skipped` summary rows, one per (first, last, count, reason) of `skipped`."""
    return [
        Run(
            job=job,
            tenant_id=job.tenant_id,
            origin=Run.Origin.SCHEDULE,
            due_at=first,
            available_at=first,
            covers_until=last,
            state=Run.State.SKIPPED,
            finished_at=now,
            reason=reason,
            max_attempts=job.max_attempts,
            timeout_seconds=job.timeout_seconds,
            idempotency_key=idempotency_key(job, first),
            queue=job.queue,
            priority=job.priority,
            shard=job.shard,
            payload={},
        )
        for first, last, _count, reason in skipped
    ]


def insert_runs(rows, *, quota=None, now=None, progress=None):
    """Insert these unsaved runs (built by build_runs or skipped_rows); returns those inserted.

    The one insert path of runs (see the module docstring). `quota` (a Quota)
    is checked for each tenant with the number of its rows before anything is
    written; jobs.quotas.QuotaExceeded says which. A row that would repeat an
    occurrence (unique job and due_at) or an API key is passed over and left
    out of the result: inserting twice is harmless. The rows returned have
    their pk and created_at set. `progress(done, total)` is told after each
    statement of INSERT_CHUNK rows. All or nothing, in the caller's transaction if any.
    """
    if quota is not None:
        obey(quota, rows, now)  # before the transaction: a refusal leaves the caller's transaction usable
    created_at = timezone.now()
    inserted = []
    # One statement is all or nothing on its own: no transaction of ours, whose BEGIN and COMMIT would
    # be two more round trips for a lone run (a Django task's enqueue, bench tasks-drain). Several
    # statements share one, with no savepoint inside a caller's: a failure here fails the caller's.
    single = len(rows) <= INSERT_CHUNK
    with contextlib.nullcontext() if single else transaction.atomic(savepoint=False):
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            params = {"rows": json.dumps([_as_json(row) for row in chunk]), "created_at": created_at}
            inserted += _saved(chunk, sql.execute("insert_runs", params), created_at)
            if progress:
                progress(len(inserted), len(rows))
    return inserted


def insert_fresh_run(row):
    """Insert one unsaved scheduled run whose idempotency key no run can hold (the caller has just made it
    from a fresh uuid: a Django task's enqueue); returns it saved.

    insert_runs for that case: one single-row statement, without its probes of every day of history for
    a run that already had the key (one index probe per day partition kept, for a key that cannot be
    there). ON CONFLICT still guards the open partition's unique keys; a row it passes over raises
    IntegrityError.
    """
    if row.state != Run.State.SCHEDULED:
        raise ValueError(f"insert_fresh_run inserts a scheduled run, not a {row.state!r} one")
    created_at = timezone.now()
    params = {name: value for name, value in _as_json(row).items() if name not in ("finished_at", "covers_until")}
    args = None if row.args is None else json.dumps(row.args)  # SQL NULL, not JSON null, for "no positional ones"
    params.update(payload=json.dumps(row.payload), args=args, created_at=created_at)
    returned = sql.execute("insert_fresh_run", params)
    if not returned:
        raise IntegrityError(f"a run of key {row.idempotency_key!r} exists already")
    [(row.pk, _, _)] = returned
    row.created_at = created_at
    row._state.adding, row._state.db = False, Run.objects.db
    return row


def obey(quota, rows, now=None):
    """Raise QuotaExceeded unless each tenant of `rows` may have that many more runs under `quota`."""
    counts = Counter(row.job.tenant for row in rows)
    for tenant, count in counts.items():
        if quota == Quota.ENQUEUE:
            quotas.check_enqueue(tenant, count, now)
        else:
            quotas.check_pending(tenant, count)


def _saved(rows, returned, created_at):
    """The rows of `rows` that the insert returned (told apart by job and key), marked saved."""
    ids = {(job_id, key): pk for pk, job_id, key in returned}
    saved = []
    for row in rows:
        pk = ids.get((row.job_id, row.idempotency_key))
        if pk is not None:
            row.pk, row.created_at = pk, created_at
            row._state.adding, row._state.db = False, Run.objects.db
            saved.append(row)
    return saved


def _as_json(row):
    return {
        "job_id": row.job_id,
        "tenant_id": row.tenant_id,
        "origin": row.origin,
        "due_at": _utc(row.due_at),
        "available_at": _utc(row.available_at),
        "state": row.state,
        "max_attempts": row.max_attempts,
        "timeout_seconds": row.timeout_seconds,
        "idempotency_key": row.idempotency_key,
        "queue": row.queue,
        "priority": row.priority,
        "shard": row.shard,
        "payload": row.payload,
        "finished_at": _utc(row.finished_at),
        "reason": row.reason,
        "covers_until": _utc(row.covers_until),
    }


def _utc(value):
    """UTC wall time as text, the form both dialects read (and SQLite stores, as Django writes it)."""
    return None if value is None else str(value.astimezone(dt.UTC).replace(tzinfo=None))


def enqueue(
    job,
    *,
    run_at=None,
    delay_seconds=None,
    payload=None,
    idempotency_key=None,
    origin=Run.Origin.API,
    actor=None,
    note="",
    now=None,
    quota=None,
):
    """Create a run of `job`; returns (run, created). Raises ValidationError on bad input, and
    jobs.permissions.Revoked when the job's tenant may no longer run its target.

    `quota`: the Quota this door obeys (the API's: Quota.ENQUEUE).
    """
    now = now or timezone.now()
    due = _due(run_at, delay_seconds, payload, now)
    permissions.refuse_revoked([job])
    if idempotency_key is not None and origin == Run.Origin.API:
        existing = _keyed_run(job, idempotency_key)
        if existing and existing.job_id != job.pk:
            raise ValidationError({"idempotency_key": [f"'{idempotency_key}' was already used for another job's run"]})
        if existing:
            return existing, False
    key = idempotency_key or f"{job.name}@{origin}-{uuid.uuid4()}"
    rows = build_runs(job, [due], origin=origin, payload=payload, key=key)
    try:
        with transaction.atomic():
            inserted = insert_runs(rows, quota=quota, now=now)
            if inserted and idempotency_key is not None and origin == Run.Origin.API:
                _check_first(job, key, rows[0])
            if inserted and actor:
                audit.record(actor, origin, job, detail={"run": rows[0].pk, "due_at": due.isoformat()}, note=note)
    except _KeyTaken:
        inserted = []
    if not inserted:
        # A concurrent call with the same key won the insert: answer with its run.
        return _keyed_run(job, key), False
    return rows[0], True


def _due(run_at, delay_seconds, payload, now):
    """When the run is due; raises ValidationError on a bad combination."""
    if run_at is not None and delay_seconds is not None:
        raise ValidationError({"run_at": ["give run_at or delay_seconds, not both"]})
    if delay_seconds is not None and not 0 <= delay_seconds <= 366 * 86400:
        raise ValidationError({"delay_seconds": ["must be between 0 and 31622400 (366 days)"]})
    if run_at is not None and run_at.tzinfo is None:
        raise ValidationError({"run_at": ["must carry a UTC offset, e.g. 2026-12-01T09:00:00+01:00"]})
    if payload is not None:
        problem = check_payload(payload)
        if problem:
            raise ValidationError({"payload": [f"payload {problem}"]})
    return run_at or now + dt.timedelta(seconds=delay_seconds or 0)


def _keyed_run(job, key):
    return Run.objects.filter(tenant_id=job.tenant_id, origin=Run.Origin.API, idempotency_key=key).first()


class _KeyTaken(Exception):
    """An earlier run holds the key: the insert is undone (see _check_first)."""


def _check_first(job, key, run):
    """Raise _KeyTaken if a run other than `run` (just inserted) holds the key.

    PostgreSQL: the key's first run may have finished, and so moved to a day
    partition, while insert_runs ran; that statement's snapshot could not see it
    there, nor its unique index in the open partition once it left. This query
    is a new snapshot, taken after the insert's unique check waited for any such
    move to commit, so it sees the first run wherever it is. SQLite's unique
    constraint never lets it happen; the query then finds nothing.
    """
    first = _keyed_run(job, key)
    if first is not None and first.pk != run.pk:
        raise _KeyTaken
