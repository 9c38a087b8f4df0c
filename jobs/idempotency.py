"""The Idempotency-Key layer (IETF httpapi draft, Stripe's practice).

A POST that creates runs may carry `Idempotency-Key: <key>`: 1-200 letters,
digits and `. _ : @ / + = -`, never a credential (jobs.identifiers).
Keys are scoped to the tenant. The first request inserts an in-flight
IdempotencyRecord (committed at once, so a concurrent duplicate sees it),
runs, and stores its answer:

- same key, same request (method, path and JSON body, key order ignored):
  the first answer is replayed, status and body, with `Idempotent-Replayed: true`;
- same key, different request: `KeyReused` (the API answers 422 `idempotency-key-reused`);
- same key while the first request is still running: `KeyInFlight` (409 `idempotency-key-in-use`).

Only successful (2xx) answers are kept. An error answer releases the key, so
the client can fix the request and retry with the same key. A record left
in flight by a crashed process is taken over after IN_FLIGHT_TIMEOUT.

Records are kept DUETIME_IDEMPOTENCY_TTL_HOURS (24 h by default) and then
treated as absent; `purge(now)` deletes them (for the scheduler's periodic maintenance).

This module is the store and its rules; reading the header and replaying an
answer over HTTP is scheduler_project/api/idempotent.py.
"""

import datetime as dt
import hashlib
import json

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs import identifiers
from jobs.models import IdempotencyRecord

HEADER = "Idempotency-Key"
# The charset and length of every client-chosen identifier (a UUID, "invoice-42/attempt-1", ...).
MAX_KEY_LENGTH = identifiers.MAX_LENGTH
KEY_PATTERN = identifiers.PATTERN
IN_FLIGHT_TIMEOUT = dt.timedelta(minutes=5)
IN_FLIGHT_RETRY_AFTER = 1  # seconds: the first request is usually about to answer


class KeyReused(Exception):
    """The key already belongs to a different request of the tenant; `key` is the key."""

    def __init__(self, key, message=None):
        super().__init__(
            message or f"{HEADER} {key!r} was used for a different request; use a new key for a new request."
        )
        self.key = key


class KeyInFlight(Exception):
    """The first request with `key` has not answered yet; retry after `retry_after` seconds to get its answer."""

    retry_after = IN_FLIGHT_RETRY_AFTER

    def __init__(self, key, message=None):
        super().__init__(
            message or f"A request with {HEADER} {key!r} is still being processed; retry in a moment to get its answer."
        )
        self.key = key


def ttl():
    return dt.timedelta(hours=settings.DUETIME_IDEMPOTENCY_TTL_HOURS)


def fingerprint(method, path, data):
    """What makes two requests "the same": method, path and the JSON body, canonicalised."""
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{method} {path}\n{body}".encode()).hexdigest()


def begin(tenant, key, request_hash, now=None):
    """Reserve `key` for this request: returns `(record, replay)`.

    `replay` False: the caller runs the request and passes `record` to `finish`.
    `replay` True: `record` holds the first answer to send again. Raises
    KeyReused (the key answered a different request) or KeyInFlight.
    """
    now = now or timezone.now()
    for _ in range(3):
        try:
            with transaction.atomic():
                return IdempotencyRecord.objects.create(tenant=tenant, key=key, request_hash=request_hash), False
        except IntegrityError:
            pass
        found = IdempotencyRecord.objects.filter(tenant=tenant, key=key).first()
        if found is None:
            continue  # finished with an error and released meanwhile: try again
        if found.created_at < now - ttl():
            # Expired and not yet purged: the key is free again.
            IdempotencyRecord.objects.filter(pk=found.pk, created_at=found.created_at).delete()
            continue
        if found.request_hash != request_hash:
            raise KeyReused(key)
        if not found.in_flight:
            return found, True
        if found.created_at < now - IN_FLIGHT_TIMEOUT and _take_over(found, now):
            found.refresh_from_db()
            return found, False
        raise KeyInFlight(key)
    raise KeyInFlight(key, f"{HEADER} {key!r} is contended; retry in a moment.")


def _take_over(record, now):
    """A crashed request left the key in flight: claim it by compare-and-set on created_at."""
    return IdempotencyRecord.objects.filter(pk=record.pk, in_flight=True, created_at=record.created_at).update(
        created_at=now
    )


def finish(record, status, body):
    """Store a 2xx answer for replay; release the key after an error."""
    if 200 <= status < 300:
        IdempotencyRecord.objects.filter(pk=record.pk).update(
            in_flight=False, response_status=status, response_body=body
        )
    else:
        IdempotencyRecord.objects.filter(pk=record.pk, in_flight=True).delete()


def purge(now=None):
    """Delete records older than the TTL; returns how many. Safe to call from any process, any time."""
    now = now or timezone.now()
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=now - ttl()).delete()
    return deleted
