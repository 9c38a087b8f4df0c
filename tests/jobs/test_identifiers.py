"""Identifiers clients choose (an Idempotency-Key, a worker_id): a short charset, and never a credential."""

import uuid

import pytest

from jobs import identifiers


@pytest.mark.parametrize(
    "value",
    [
        str(uuid.UUID(int=0x9F3A6C1E2B7D4F08A1C3E5B7D9F1A3C5)),
        "invoice-42",
        "invoice-42/attempt-1",
        "web-1:4242",
        "ci@billing.example.com",
        "rerun.2026-06-01T09:00:00+02:00",
        "b64:QmlsbGluZyBleHBvcnQ=",
        "x" * identifiers.MAX_LENGTH,
    ],
)
def test_it_accepts_ordinary_identifiers(value):
    assert identifiers.problem(value) is None


@pytest.mark.parametrize(
    "value",
    ["", "x" * (identifiers.MAX_LENGTH + 1), "two words", 'quote"d', "line\nbreak", "tab\t", "ümlaut", "a,b", 7],
)
def test_it_refuses_what_is_outside_the_charset_or_too_long(value):
    assert identifiers.problem(value).startswith("must be 1-200 characters")


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("ghp_" + "a1B2" * 9, "a GitHub token"),
        ("w-" + "AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
        ("password=hunter2", "a password, secret or token under a key named so"),
        ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "a Stripe secret key"),
        ("https://ci:hunter2@ci.example.com/", "a password in a URL"),
    ],
)
def test_it_refuses_a_credential_without_repeating_it(value, kind):
    problem = identifiers.problem(value)
    assert problem.startswith(f"seems to carry {kind}")
    assert value not in problem and "hunter2" not in problem
