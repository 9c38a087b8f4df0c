"""The `Duetime-Signature` of an http target's call: HMAC-SHA256 with the job's own secret.

    Duetime-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of the signed message>
    signed message:    "<t>\\n<run id>\\n<idempotency key>\\n" + raw body

The same header, hash and tolerance as owner webhooks (notify/signing.py), over
more of the request: the run id (header X-Duetime-Run-Id) and the idempotency
key (header Idempotency-Key) are signed with the body, so a receiver that
dedupes by key can trust it. The fields are joined by newlines, which no HTTP
header value can hold, so no two different (run id, key, body) sign the same
message. A GET has no body: the message ends after the key's newline.

The receiver recomputes the HMAC over the raw bytes with its copy of the
secret, compares in constant time and refuses a timestamp more than
TOLERANCE_SECONDS from its clock (a replayed request): docs/tasks.md shows it
in Python and Node. The secret (JobSigningSecret) is made when an http job is
saved and shown once, then only when it is rotated.
"""

import hashlib
import hmac
import secrets

HEADER = "Duetime-Signature"
TOLERANCE_SECONDS = 300
SECRET_PREFIX = "jsec_"  # what a job's signing secret starts with (a webhook's is whsec_)


def new_secret():
    """A fresh signing secret: 256 random bits."""
    return f"{SECRET_PREFIX}{secrets.token_urlsafe(32)}"


def message(timestamp, run_id, idempotency_key, body):
    """The bytes the signature covers (see the module's docstring)."""
    return f"{timestamp}\n{run_id}\n{idempotency_key}\n".encode() + body


def signature(secret, timestamp, run_id, idempotency_key, body):
    """The header value for a call of run `run_id` sending `body` (bytes) at `timestamp` (int unix seconds)."""
    digest = hmac.new(secret.encode(), message(timestamp, run_id, idempotency_key, body), hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify(secret, header, run_id, idempotency_key, body, now_timestamp, tolerance=TOLERANCE_SECONDS):
    """True when `header` signs this call with `secret` and its timestamp is within `tolerance` of now."""
    return checks(header, now_timestamp, tolerance, lambda t: signature(secret, t, run_id, idempotency_key, body))


def checks(header, now_timestamp, tolerance, sign):
    """True when `header` (t=...,v1=...) has a timestamp within `tolerance` of now and the v1 that
    `sign(timestamp)` gives, compared in constant time: the check of webhooks and http targets alike."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now_timestamp - timestamp) > tolerance:
        return False
    return hmac.compare_digest(sign(timestamp).rpartition("v1=")[2], fields.get("v1", ""))
