"""Credentials that Duetime must not store: refused in payloads, redacted in errors and logs.

A payload is stored, shown in the portal and sent to every attempt, so a
credential in it leaks to everyone who can read the job: `find_in` names the
first obvious one (jobs.validation refuses the payload). Errors and
tracebacks come from handlers Duetime does not control, so they are kept
but `redact`ed where they enter the engine (runs.transitions.complete_runs)
and in every log record (`RedactingFilter`, installed in settings.LOGGING).

The patterns are the unmistakable ones (a fixed prefix or shape); a random
password in a free-text field cannot be told from other text and is not caught.
"""

import json
import logging
import re

REDACTED = "[REDACTED]"

# name -> (pattern, replacement). A replacement keeps the context that helps
# debugging (the scheme and user of a URL, the word Bearer) and drops the secret.
PATTERNS = {
    "a private key": (
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
        "[REDACTED PRIVATE KEY]",
    ),
    "an AWS access key id": (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    "a GitHub token": (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"), REDACTED),
    "a Slack token": (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    "a Duetime API token": (re.compile(r"\bdt_[tw]_[A-Za-z0-9_-]{20,}"), REDACTED),
    "a bearer token": (re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=-]{20,}", re.I), rf"\g<1>{REDACTED}"),
    "a password in a URL": (
        re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)(?!\[REDACTED\]@)[^\s@/]+(@)", re.I),
        rf"\g<1>{REDACTED}\g<2>",
    ),
}


def find(text):
    """The name of the first kind of credential in `text` (e.g. "an AWS access key id"), or None."""
    for name, (pattern, _) in PATTERNS.items():
        if pattern.search(text):
            return name
    return None


def find_in(payload):
    """`find` over a JSON payload, its keys and values alike."""
    return find(json.dumps(payload, ensure_ascii=False))


def redact(text):
    """`text` with every known credential replaced by [REDACTED]."""
    if not text:
        return text
    for pattern, replacement in PATTERNS.values():
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts credentials from a record's message and traceback.

    It formats the record once (message with its arguments, and the
    traceback) and keeps only the redacted text, so no handler after it sees
    the secret. Installed on the handlers in settings.LOGGING.
    """

    def filter(self, record):
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
