"""Credentials Duetime refuses to store in payloads and redacts from errors and logs."""

import base64
import hashlib
import io
import json
import logging
import random
import uuid

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
    ("a Stripe secret key", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"),
    ("a Stripe secret key", "rk_live_" + "51H8abcDEFghiJKLmnoPQRst"),
    (
        "a JSON Web Token",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    ("an AWS secret access key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("an AWS secret access key", '"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"'),
    ("an AWS secret access key", "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("an AWS access key id", "akiaiosfodnn7example"),  # a lowered copy
    ("an AWS access key id", "aws_AKIAIOSFODNN7EXAMPLE"),  # after an underscore: no word boundary there
    ("a GitHub token", "token_ghp_" + "a1B2" * 9),
    ("a password, secret or token under a key named so", '{"password": "hunter2"}'),
    ("a password, secret or token under a key named so", '{"db_password": "correct horse battery staple"}'),
    ("a password, secret or token under a key named so", '{"client_secret": "k9Xq2mP0"}'),
    ("a password, secret or token under a key named so", "{'token': 'tok-8812-abc'}"),
    ("a password, secret or token under a key named so", '{"accessToken": "opaque-value"}'),
    ("a password, secret or token under a key named so", '{"api_key": "abcd1234efgh"}'),
    ("a password, secret or token under a key named so", "GET /export?apiKey=abcd1234&month=5"),
    ("a password, secret or token under a key named so", "PASSWORD=hunter2 ./deploy.sh"),
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
        "AsiaPacificNortheast",  # mixed case: not an access key id, nor its lowered copy (no digit)
        str(uuid.UUID(int=0x9F3A6C1E2B7D4F08A1C3E5B7D9F1A3C5)),
        hashlib.sha256(b"invoice-42").hexdigest(),
        hashlib.sha1(b"invoice-42").hexdigest(),  # 40 characters, like a secret access key, out of context
        "*/5 * * * *",
        "0 2 * * 1-5",
        "30 4 1,15 * 5",
        base64.b64encode(random.Random(7).randbytes(6000)).decode(),  # a long blob of data
        '{"dsn_secret": "billing/db"}',  # the name of a secret
        '{"token_name": "stripe-live"}',
        '{"page_token": "CgRiaWxsEAE"}',  # an id, under a key that only ends with token
        '"fencing_token":90211,"idempotency_key":"billing.close@2026-06-01T11:00:00+02:00"',
        "X-Duetime-Fencing-Token: 12",
        '{"password": "", "secret": null, "token": 12345}',
        '{"password": "${DB_PASSWORD}", "api_key": "{{ api_key }}", "secret": "vault://billing/stripe"}',
        '{"note": "rotate the token: weekly"}',  # prose: `key: value` unquoted is not a pair
    ],
)
def test_it_leaves_ordinary_text_alone(text):
    assert secrets.find(text) is None
    assert secrets.redact(text) == text


def test_it_keeps_the_key_and_drops_the_value_of_a_pair():
    assert secrets.redact('{"db": {"password": "hunter2", "host": "db.internal"}}') == (
        '{"db": {"password": "[REDACTED]", "host": "db.internal"}}'
    )
    assert secrets.redact("GET /export?api_key=abcd1234&month=5") == "GET /export?api_key=[REDACTED]&month=5"
    nested = json.dumps({"body": json.dumps({"password": "hunter2"})})
    assert "hunter2" not in secrets.redact(nested) and "password" in secrets.redact(nested)
    pair = "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert secrets.redact(pair) == "[REDACTED] [REDACTED]"


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


def test_it_is_on_every_handler_of_the_settings_the_move_log_included(settings):
    assert set(settings.LOGGING["handlers"]) >= {"console", "moves"}
    for name, handler in settings.LOGGING["handlers"].items():
        assert "redact_secrets" in handler.get("filters", []), name
    configured = logging.getLogger("duetime.moves").handlers[0]  # LOGGING's; pytest's own capture ones follow
    assert any(isinstance(f, RedactingFilter) for f in configured.filters)


def test_it_redacts_the_values_of_json_lines_and_keeps_them_json():
    line = (
        '"event":"leased","run":7,"fencing_token":41,"idempotency_key":"password=hunter2",'
        '"worker":"https://w:s3cret\\"@host/ghp_' + "a1B2" * 9 + '"'
    )
    clean = '"event":"leased","run":8,"fencing_token":42,"idempotency_key":"invoice-42","worker":"w-17"'
    lines = secrets.redact_lines([clean, line])
    assert lines[0] == clean
    decoded = json.loads("{" + lines[1] + "}")
    assert decoded["idempotency_key"] == "password=[REDACTED]"
    assert "s3cret" not in lines[1] and "a1B2a1B2" not in lines[1] and "hunter2" not in lines[1]
    assert (decoded["run"], decoded["fencing_token"]) == (7, 41)
    same = [clean] * 3
    assert secrets.redact_lines(same) is same  # nothing found: the same list, untouched
