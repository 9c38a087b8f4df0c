"""The one insert path of runs, and one-off and delayed runs.

This module is the only code that inserts into the runs table. `insert_runs` is
its one path for the engine and every door: cron and
`at` occurrences and the missed-run summaries (runs.materialize), triggers
and API runs (`enqueue`, controls.trigger_many), backfills
(runs.backfill), the summaries of what a paused job passed over
(controls.resume) and the benchmark's runs (bench.setup) all come through
it; `insert_fresh_run` is its short form for one run under a key made fresh
for it (a Django task's enqueue, tasks_backend), which has no earlier run to
look for. So whatever every new run must obey belongs here, the tenants' quotas
(jobs.quotas) first: a door names the quota it obeys, and every door that
names one obeys it the same way.

`insert_selected` is the bulk path beside them, for rows too many to build in
Python (millions): the runs a caller's SELECT makes in the database (PostgreSQL,
generate_series), placed in history and given their ready marks by the same rules
as `insert_runs`. It obeys no quota and probes no history: it is for a tenant
whose rows the caller made up whole (the benches' fills: bench.history,
bench.portal, bench.setup.design_tenants), not for a door.

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
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from jobs import audit, cron, jitter, permissions, quotas
from jobs.validation import check_payload
from runs import sql
from runs.models import CLAIMABLE_STATES, HISTORY_STATES, OPEN_DAY, Run

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


# insert_selected: what a column the caller's SELECT leaves out holds (what a new run holds, as SQL), and the
# columns it must give. history_day is the path's own: the rule of insert_runs (runs/sql), never the caller's.
SELECTED_DEFAULTS = {
    "origin": "'schedule'",
    "state": "'scheduled'",
    "attempt": "0",
    "max_attempts": "5",
    "timeout_seconds": "900",
    "fencing_token": "NULL::bigint",
    "worker_id": "''",
    "lease_expires_at": "NULL::timestamptz",
    "priority": "1",
    "shard": "0",
    "payload": "'{}'::jsonb",
    "args": "NULL::jsonb",
    "started_at": "NULL::timestamptz",
    "finished_at": "NULL::timestamptz",
    "last_error": "''",
    "reason": "''",
    "covers_until": "NULL::timestamptz",
    "created_at": "now()",
}
SELECTED_REQUIRED = ("job_id", "tenant_id", "due_at", "available_at", "idempotency_key", "queue")

# A finished run goes into history on the newest listed day on or before the day it finished, or the oldest
# listed (as runs/sql insert_runs places it: here by one search of the listed days, read once, not a query
# per row); the claimable ones get a ready mark per (tenant, queue) at their earliest available_at, in the
# same statement (runs.models.ReadyMark: RETURNING names only those, so a million finished runs leave
# nulls to count, not a million rows to spill to disk). Returns how many runs went in.
INSERT_SELECTED = """
WITH listed AS (SELECT array_agg(day ORDER BY day) AS days FROM runs_history_day),
inserted AS (
    INSERT INTO runs_run ({columns}, history_day)
    SELECT {picked},
           CASE WHEN g.state IN ({history_states})
                THEN listed.days[greatest(1, width_bucket((g.finished_at AT TIME ZONE 'UTC')::date, listed.days))]
                ELSE DATE '{open_day}' END
    FROM (SELECT {values} FROM ({select}) AS s) AS g, listed
    RETURNING CASE WHEN state IN ({claimable_states}) THEN tenant_id END AS ready_tenant,
              CASE WHEN state IN ({claimable_states}) THEN queue END AS ready_queue,
              CASE WHEN state IN ({claimable_states}) THEN available_at END AS ready_at
),
marked AS (
    INSERT INTO runs_readymark (tenant_id, queue, due_at)
    SELECT ready_tenant, ready_queue, min(ready_at) FROM inserted WHERE ready_tenant IS NOT NULL
    GROUP BY ready_tenant, ready_queue
)
SELECT count(*) FROM inserted
"""


def insert_selected(select, params=None):
    """Insert the runs that the SQL query `select` yields, one a row; returns how many went in. PostgreSQL only.

    The bulk path of runs (see the module docstring): `select` names its columns
    after runs_run's (`SELECT j.id AS job_id, ...`); job_id, tenant_id, due_at,
    available_at, idempotency_key and queue it must give, any other it leaves
    out holds what a new run holds (SELECTED_DEFAULTS: scheduled, no attempt,
    lease or error, created now), and history_day is never its own: a finished
    run (runs.models.HISTORY_STATES) goes to the newest day partition listed on
    or before its finished_at (create the days first: runs.partitions.create),
    any other to the open partition. The claimable rows get their ready marks.
    No quota is obeyed and history is not probed for a repeated occurrence or
    key (the open partition's unique indexes still raise on one): for rows the
    caller made up whole, in one statement, in the caller's transaction if any.
    """
    if connection.vendor != "postgresql":
        raise NotImplementedError("insert_selected is PostgreSQL's bulk path (use insert_runs)")
    with connection.cursor() as cursor:
        params = params or {}
        cursor.execute(f"SELECT * FROM ({select}) AS s LIMIT 0", params)
        given = [column.name for column in cursor.description]
        unknown = set(given) - set(SELECTED_DEFAULTS) - set(SELECTED_REQUIRED)
        missing = set(SELECTED_REQUIRED) - set(given)
        if unknown or missing:
            raise ValueError(f"insert_selected: columns not runs_run's {sorted(unknown)}, missing {sorted(missing)}")
        columns = [*SELECTED_REQUIRED, *SELECTED_DEFAULTS]
        values = ", ".join(f"s.{c}" if c in given else f"{SELECTED_DEFAULTS[c]} AS {c}" for c in columns)
        statement = INSERT_SELECTED.format(
            columns=", ".join(columns),
            values=values,
            picked=", ".join(f"g.{c}" for c in columns),
            select=select,
            history_states=", ".join(f"'{state}'" for state in HISTORY_STATES),
            claimable_states=", ".join(f"'{state}'" for state in CLAIMABLE_STATES),
            open_day=OPEN_DAY.isoformat(),
        )
        cursor.execute(statement, params)
        return cursor.fetchone()[0]


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
