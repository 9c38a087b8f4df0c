"""One-off and delayed runs: now, at a time, or after a duration.

A caller's idempotency key makes the call repeatable: the same key (per
tenant) returns the run the first call created, whatever the second call asked.
"""

import datetime as dt
import uuid

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs import audit
from jobs.validation import check_payload
from runs.materialize import build_runs
from runs.models import Run


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
):
    """Create a run of `job`; returns (run, created). Raises ValidationError on bad input."""
    now = now or timezone.now()
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
    due = run_at or now + dt.timedelta(seconds=delay_seconds or 0)
    if idempotency_key is not None and origin == Run.Origin.API:
        existing = Run.objects.filter(
            tenant_id=job.tenant_id, origin=Run.Origin.API, idempotency_key=idempotency_key
        ).first()
        if existing and existing.job_id != job.pk:
            raise ValidationError({"idempotency_key": [f"'{idempotency_key}' was already used for another job's run"]})
        if existing:
            return existing, False
    key = idempotency_key or f"{job.name}@{origin}-{uuid.uuid4()}"
    (run,) = build_runs(job, [due], origin=origin, payload=payload, key=key)
    try:
        with transaction.atomic():
            run.save(force_insert=True)
            if actor:
                audit.record(actor, origin, job, detail={"run": run.pk, "due_at": due.isoformat()}, note=note)
    except IntegrityError:
        if idempotency_key is None:
            raise
        # A concurrent call with the same key won the insert: answer with its run.
        return Run.objects.get(tenant_id=job.tenant_id, origin=Run.Origin.API, idempotency_key=idempotency_key), False
    return run, True


def trigger(job, *, actor, note="", now=None, payload=None):
    """Run `job` now, outside its schedule (the portal's and the API's "trigger now")."""
    run, _ = enqueue(job, origin=Run.Origin.TRIGGER, actor=actor, note=note, now=now, payload=payload)
    return run
