"""The `Duetime-Signature` header of owner webhooks: HMAC-SHA256 with the tenant's secret.

    Duetime-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + raw body>

The receiver recomputes the HMAC over the timestamp, a dot and the raw request body
with its secret, compares in constant time, and refuses a timestamp older than a few
minutes (a replayed request). docs/operations.md shows it in a few lines of Python.
"""

import hashlib
import hmac

from jobs.signing import HEADER, TOLERANCE_SECONDS, checks  # one header and tolerance for webhooks and http targets

__all__ = ["HEADER", "TOLERANCE_SECONDS", "signature", "verify"]


def signature(secret, body, timestamp):
    """The header value for `body` (bytes) sent at `timestamp` (int unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret, body, header, now_timestamp, tolerance=TOLERANCE_SECONDS):
    """True when `header` signs `body` with `secret` and its timestamp is within `tolerance` of now."""
    return checks(header, now_timestamp, tolerance, lambda timestamp: signature(secret, body, timestamp))
