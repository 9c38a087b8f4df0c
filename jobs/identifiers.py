"""Identifiers that clients choose and Duetime logs: an `Idempotency-Key` and a worker's `worker_id`.

Both are written to the move log (runs.move_log), stored on runs and attempts
and shown in the portal and the API, so they are held to a short charset and
length (no spaces, quotes or control characters to forge a log line with) and
refused when they look like a credential (jobs.secrets): a client that puts a
token there would otherwise publish it to everyone who reads the logs. The
message never repeats the value.
"""

import re

from jobs import secrets

CHARSET = "A-Za-z0-9._:@/+=-"
MAX_LENGTH = 200
PATTERN = rf"^[{CHARSET}]{{1,{MAX_LENGTH}}}$"
RULE = f"1-{MAX_LENGTH} characters among letters, digits and . _ : @ / + = -"


def problem(value):
    """Why `value` cannot be an identifier (a sentence to follow "must be ..." or "is ..."), or None."""
    if not isinstance(value, str) or not re.fullmatch(PATTERN, value):
        return f"must be {RULE} (for example a UUID, or host:pid)"
    credential = secrets.find(value)
    if credential:
        return f"seems to carry {credential}: it is logged and shown as it is, so it must never hold a secret"
    return None
