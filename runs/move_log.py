"""The log of state moves: one JSON line per move of a run, and per stale completion, heartbeat or take-over refused.

Every line names the run (`run`), its `job` and `tenant` (names), the
`attempt`, the `fencing_token` of the lease it concerns, the run's
`idempotency_key` and the `worker` that held it, so that every execution of
one run (they share the key) can be lined up, each with its token: a
duplicate execution shows as two leases of one key, the first lost (expired,
cancelled) and its late completion refused. docs/operations.md shows a trace.

    {"ts":"2026-06-01T09:00:04.812Z","event":"completed","run":4812,"job":"billing.close","tenant":"acme",
     "attempt":1,"fencing_token":90211,"idempotency_key":"billing.close@2026-06-01T11:00:00+02:00",
     "worker":"web-1:4242","to":"succeeded","outcome":"succeeded"}

`event` is one of EVENTS. Moves are logged once committed (a rolled-back
claim or completion moved nothing); refusals at once. The batched moves (the
claim's lease_runs, complete_runs, expire_leases) log from the rows their
statement RETURNs, with no query of their own; an ORM move (cancel, skip,
release, replay) reads the rows it moves, locked, only while the log is on;
a refusal reads its run once, to say whose the lease is now. The canaries'
moves (the system tenant's) are left out; their refusals are not.

The logger is `duetime.moves`, formatted by scheduler_project.json_logs
(one record per batch, one line per move); DUETIME_MOVE_LOG routes it or
turns it off, and off costs one level check per batch (`enabled`).
"""

import json
import logging

from django.db import transaction

from jobs.models import SYSTEM_TENANT
from runs.metrics import tenant_names
from runs.models import Run

log = logging.getLogger("duetime.moves")

EVENTS = {
    "leased": "a claim leased the run (lease_runs): a new fencing token, attempt + 1",
    "completed": "its executor finished the attempt: `to` succeeded, retry_wait or dead, with the `outcome`",
    "lease_expired": "the reaper found the lease expired: `outcome` lease_expired or timed_out",
    "released": "given back unused (a worker shutting down, a publish refused)",
    "cancelled": "cancelled by an operator, a job's deletion or overlap replace (a lease is taken away)",
    "skipped": "skipped at claim time (overlap forbid)",
    "replayed": "a dead letter sent back to scheduled",
    "completion_refused": "a completion whose fencing token is no longer the run's (its lease was lost)",
    "heartbeat_refused": "a heartbeat whose fencing token is no longer the run's",
    "start_refused": "a Celery message for a lease already taken over or lost (runs.celery_task)",
}
# What an ORM move (transitions._move) reads of each run before it moves it.
ROW_FIELDS = ("id", "job__name", "tenant_id", "attempt", "fencing_token", "idempotency_key", "worker_id", "state")


def enabled():
    return log.isEnabledFor(logging.INFO)


def _emit(lines):
    if lines:
        log.info("%d moves", len(lines), extra={"lines": lines})


def _once_committed(lines):
    """Log `lines` when the transaction commits (at once outside one); a rollback drops them."""
    if lines:
        transaction.on_commit(lambda: _emit(lines))


# A line's JSON is written here, field by field, rather than built as a dict for json.dumps: on the claim
# and completion paths that is a third of the cost (scheduler_project.json_logs adds the time in front).
_text = json.encoder.encode_basestring  # '"..."' with JSON's escapes (C)


def _value(value):
    kind = type(value)
    if kind is str:
        return _text(value)
    if kind is int:
        return str(value)
    if value is None:
        return "null"
    return json.dumps(value, default=str)


def _line(event, run, job, tenant, attempt, token, key, worker, more=""):
    """One line's fields as JSON text (`"event":"leased","run":4812,...`); `more` is appended (see _fields)."""
    return (
        f'"event":"{event}","run":{_value(run)},"job":{_value(job)},"tenant":{_value(tenant)},'
        f'"attempt":{_value(attempt)},"fencing_token":{_value(token)},"idempotency_key":{_value(key)},'
        f'"worker":{_value(worker or None)}{more}'
    )


def _fields(**fields):
    """Further fields as JSON text to append to a line: `,"to":"succeeded",...`."""
    return "".join(f',"{name}":{_value(value)}' for name, value in fields.items())


def leased(leases, worker_id):
    """lease_runs leased these (transitions.Lease): one line each, from the rows the statement returned."""
    if not leases or not enabled():
        return
    names = _logged_tenants({lease.tenant_id for lease in leases})
    _once_committed(
        [
            _line(
                "leased",
                lease.run_id,
                lease.job_name,
                names[lease.tenant_id],
                lease.attempt,
                lease.fencing_token,
                lease.idempotency_key,
                worker_id,
                ',"to":"leased"',
            )
            for lease in leases
            if lease.tenant_id in names
        ]
    )


def completed(completions, rows):
    """complete_runs moved `rows` (transitions.MovedRun) of `completions`; the others were refused as stale."""
    if not completions or not enabled():
        return
    outcomes = {c.run_id: c.outcome for c in completions}
    names = _logged_tenants({row.tenant_id for row in rows})
    _once_committed(
        [
            _line(
                "completed",
                row.run_id,
                row.job_name,
                names[row.tenant_id],
                row.attempt,
                row.fencing_token,
                row.idempotency_key,
                row.worker_id,
                f',"to":{_value(row.state)},"outcome":{_value(outcomes.get(row.run_id))}',
            )
            for row in rows
            if row.tenant_id in names
        ]
    )
    done = {row.run_id for row in rows}
    stale = [c for c in completions if c.run_id not in done]
    if stale:
        refused("completion_refused", {c.run_id: (c.fencing_token, _fields(outcome=c.outcome)) for c in stale})


def expired(rows):
    """expire_leases moved `rows` (transitions.MovedRun) out of their expired leases."""
    if not rows or not enabled():
        return
    names = _logged_tenants({row.tenant_id for row in rows})
    _once_committed(
        [
            _line(
                "lease_expired",
                row.run_id,
                row.job_name,
                names[row.tenant_id],
                row.attempt,
                row.fencing_token,
                row.idempotency_key,
                row.worker_id,
                f',"to":{_value(row.state)},"outcome":{_value(row.outcome)}',
            )
            for row in rows
            if row.tenant_id in names
        ]
    )


def locked_rows(runs):
    """The ROW_FIELDS of the runs of `runs`, locked (their own rows only) until the move commits."""
    return list(runs.select_for_update(of=("self",)).order_by("pk").values_list(*ROW_FIELDS))


def moved(rows, target):
    """An ORM move took `rows` (locked_rows) to `target`."""
    names = _logged_tenants({row[2] for row in rows})
    _once_committed(
        [
            _line(
                _orm_event(state, target),
                run,
                job,
                names[tenant],
                attempt,
                token,
                key,
                worker,
                _fields(**{"from": state, "to": target}),
            )
            for run, job, tenant, attempt, token, key, worker, state in rows
            if tenant in names
        ]
    )


def _logged_tenants(tenant_ids):
    """{id: name} of these tenants but the system tenant: the canaries' moves (two lines a shard a minute,
    128 a minute) trace nothing a tenant runs; their health is in the metrics and the portal."""
    return {pk: name for pk, name in tenant_names(tenant_ids).items() if name != SYSTEM_TENANT}


def _orm_event(source, target):
    if target in (Run.State.CANCELLED, Run.State.SKIPPED):
        return str(target)
    return "replayed" if source == Run.State.DEAD else "released"


def refused(event, tokens, worker=None):
    """Stale callers were refused: `tokens` is {run id: (the fencing token they presented, more fields: _fields)}.

    `worker` is the refused caller when it is known (a Celery take-over names
    it; a completion or heartbeat does not: the `leased` line of its token
    does). One query reads each run as it is now, so the line also says whose
    lease is current: `current_fencing_token`, `current_worker`, `state`.
    """
    if not enabled():
        return
    found = {row[0]: row for row in Run.objects.filter(pk__in=list(tokens)).values_list(*ROW_FIELDS)}
    names = tenant_names({row[2] for row in found.values()})
    lines = []
    for run_id, (token, more) in tokens.items():
        _run, job, tenant, attempt, current, key, holder, state = found.get(run_id, (run_id,) + (None,) * 7)
        now_held = _fields(current_fencing_token=current, current_worker=holder or None, state=state)
        tenant = names.get(tenant) if tenant is not None else None
        lines.append(_line(event, run_id, job, tenant, attempt, token, key, worker, now_held + more))
    _emit(lines)
