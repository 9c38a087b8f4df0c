"""Credentials Duetime refuses to store in payloads and redacts from errors and logs."""

import io
import logging

import pytest

from jobs import secrets
from jobs.secrets import RedactingFilter

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1c2...\n-----END RSA PRIVATE KEY-----"
CREDENTIALS = [
    ("a private key", PEM),
    ("an AWS access key id", "AKIAIOSFODNN7EXAMPLE"),
    ("a GitHub token", "ghp_" + "a1B2" * 9),
    ("a Slack token", "xoxb-123456789012-abcdefABCDEF"),
    ("a Duetime API token", "dt_t_aTsGr1qbJqE5rIZbSlrLvvzFz1KO5GSwyOU08e7fQrg"),
    ("a bearer token", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhY21lIn0.c2lnbmF0dXJl"),
    ("a password in a URL", "postgres://billing:hunter2-secret@db.internal:5432/billing"),
]


@pytest.mark.parametrize(("name", "text"), CREDENTIALS)
def test_it_names_each_kind_of_credential_and_redacts_it(name, text):
    assert secrets.find(f"context {text} more") == name
    redacted = secrets.redact(f"context {text} more")
    assert secrets.find(redacted) is None, redacted
    assert redacted.startswith("context ") and redacted.endswith(" more") and "[REDACTED" in redacted


def test_it_keeps_what_helps_debugging_and_drops_the_secret():
    assert secrets.redact("connect postgres://billing:hunter2@db.internal/x failed") == (
        "connect postgres://billing:[REDACTED]@db.internal/x failed"
    )
    assert secrets.redact("sent Bearer abcdefghijklmnopqrstuvwxyz123") == "sent Bearer [REDACTED]"


@pytest.mark.parametrize(
    "text",
    [
        "https://billing.internal/hooks/export",
        "user@example.com",
        "Bearer short",
        "AKIA is a prefix",
        "the key id is stored in vault at billing/aws",
    ],
)
def test_it_leaves_ordinary_text_alone(text):
    assert secrets.find(text) is None
    assert secrets.redact(text) == text


def test_it_finds_a_credential_in_a_nested_payload_key_or_value():
    assert secrets.find_in({"jobs": [{"env": {"AWS_KEY": "AKIAIOSFODNN7EXAMPLE"}}]}) == "an AWS access key id"
    assert secrets.find_in({"month": 5, "report": "https://reports.internal/x"}) is None


def test_it_redacts_log_messages_their_arguments_and_tracebacks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tests.secrets")
    logger.addHandler(handler)
    try:
        logger.warning("connecting to %s", "postgres://billing:hunter2@db.internal/x")
        try:
            raise ValueError("refused token ghp_" + "a1B2" * 9)
        except ValueError:
            logger.exception("handler failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "hunter2" not in text and "a1B2a1B2" not in text
    assert "postgres://billing:[REDACTED]@db.internal/x" in text
    assert "ValueError: refused token [REDACTED]" in text


def test_it_is_installed_on_the_log_handlers_of_the_settings():
    handlers = logging.getLogger().handlers
    assert any(isinstance(f, RedactingFilter) for handler in handlers for f in handler.filters)
