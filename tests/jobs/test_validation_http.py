"""An http target's method, headers and bearer secret (jobs/validation.py): refused at save, with the fix."""

import pytest

from jobs.definitions import save_definition
from jobs.models import JobDefinition, JobSigningSecret
from tests.jobs.test_validation import definition, errors_of

URL = "https://public.example/hooks/export"


def http_job(tenant, **fields):
    return definition(tenant, **{"target_kind": "http", "target_ref": URL, "payload": {}, **fields})


@pytest.mark.parametrize("method", ["POST", "PUT", "GET"])
def test_it_accepts_each_method(acme, method):
    job, _ = save_definition(http_job(acme, http_method=method), "user:alice")
    assert JobDefinition.objects.get(pk=job.pk).http_method == method


def test_it_refuses_another_method(acme):
    messages = errors_of(http_job(acme, http_method="DELETE"))["http_method"]
    assert "'DELETE' is not a method Duetime calls with: use POST, PUT or GET" in messages


def test_it_refuses_a_payload_with_a_get_which_sends_no_body(acme):
    errors = errors_of(http_job(acme, http_method="GET", payload={"account": 1}))
    assert errors["payload"] == ["a GET sends no body: clear the payload (or {}), or call with POST or PUT"]


def test_it_accepts_headers_of_the_jobs_own(acme):
    headers = {"X-Team": "billing", "Accept": "application/json", "User-Agent": "billing-scheduler/2"}
    job, _ = save_definition(http_job(acme, http_headers=headers), "user:alice")
    assert JobDefinition.objects.get(pk=job.pk).http_headers == headers


@pytest.mark.parametrize(
    "name",
    ["Connection", "keep-alive", "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade"]
    + ["Proxy-Authenticate", "Proxy-Authorization"],
)
def test_it_refuses_a_hop_by_hop_header(acme, name):
    (message,) = errors_of(http_job(acme, http_headers={name: "x"}))["http_headers"]
    assert message.startswith(f"{name} is a hop-by-hop header")


@pytest.mark.parametrize(
    "name, says",
    [
        ("Host", "is set from the URL"),
        ("content-length", "is set from the body Duetime sends"),
        ("Expect", "is not supported"),
        ("Content-Type", "is set by Duetime"),
        ("Idempotency-Key", "is set by Duetime on every call"),
        ("Duetime-Signature", "is set by Duetime on every call"),
        ("X-Duetime-Run-Id", "is set by Duetime on every call"),
        (
            "Authorization",
            "would store a credential in the job: name an operator-configured secret in bearer_secret instead",
        ),
        ("Cookie", "would store a credential in the job: name an operator-configured secret in bearer_secret instead"),
    ],
)
def test_it_refuses_host_framing_duetimes_own_and_credential_headers(acme, name, says):
    (message,) = errors_of(http_job(acme, http_headers={name: "x"}))["http_headers"]
    assert message == f"{name} {says}" or message.startswith(f"{name} {says}")


@pytest.mark.parametrize(
    "headers, says",
    [
        ({"X Team": "billing"}, "'X Team' is not a header name"),
        ({"": "billing"}, "'' is not a header name"),
        ({"X-" + "a" * 63: "x"}, "is not a header name"),
        ({"X-Team": "billing\r\nX-Injected: yes"}, "X-Team: the value must be visible ASCII and spaces"),
        ({"X-Team": "bill\x00ing"}, "X-Team: the value must be visible ASCII and spaces"),
        ({"X-Team": "bïlling"}, "X-Team: the value must be visible ASCII and spaces"),
        ({"X-Team": " billing"}, "X-Team: the value must be visible ASCII and spaces"),
        ({"X-Team": ""}, "X-Team: the value must be visible ASCII and spaces"),
        ({"X-Team": 42}, "X-Team: the value must be a string of at most 1000 characters"),
        ({"X-Team": "a" * 1001}, "X-Team: the value must be a string of at most 1000 characters"),
        ({"X-Team": "a", "x-team": "b"}, "x-team is given twice (header names ignore case)"),
        ({"X-Api": "Bearer abcdefghijklmnopqrstuvwxyz0123"}, "X-Api: seems to carry a bearer token"),
        ({"X-Key": "AKIAABCDEFGHIJKLMNOP"}, "X-Key: seems to carry an AWS access key id"),
        ({f"X-{i}": "x" for i in range(21)}, "21 headers: at most 20"),
        ({f"X-{i}": "a" * 300 for i in range(14)}, "bytes as sent: at most 4096"),
        (["X-Team", "billing"], "the headers must be a JSON object of names and values"),
    ],
)
def test_it_refuses_bad_names_values_and_sizes(acme, headers, says):
    messages = errors_of(http_job(acme, http_headers=headers))["http_headers"]
    assert any(says in message for message in messages), messages
    assert not JobDefinition.objects.exists()


def test_it_refuses_http_settings_on_a_job_that_is_not_http(acme):
    errors = errors_of(
        definition(acme, http_method="PUT", http_headers={"X-Team": "billing"}, http_bearer_secret="billing-api")
    )
    assert errors["http_method"] == [
        "only an http target takes a method: leave it POST, or set the target kind to http"
    ]
    assert errors["http_headers"] == ["only an http target takes headers: clear them, or set the target kind to http"]
    assert errors["http_bearer_secret"] == ["only an http target takes a bearer secret: clear it"]


def test_it_accepts_a_bearer_secret_the_operator_configured_for_the_tenant(acme, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-acme"}}
    job, _ = save_definition(http_job(acme, http_bearer_secret="billing-api"), "user:alice")
    stored = JobDefinition.objects.filter(pk=job.pk).values()[0]
    assert stored["http_bearer_secret"] == "billing-api"
    assert "tok-acme" not in str(stored), "the name is stored, never the value"


def test_it_refuses_an_unknown_bearer_secret_and_another_tenants(acme, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"crm": "tok-crm"}, "globex": {"billing-api": "tok-globex"}}
    errors = errors_of(http_job(acme, http_bearer_secret="billing-api"))
    assert errors["http_bearer_secret"] == [
        "tenant acme has no http secret named 'billing-api' (configured: crm); "
        "the operator sets them in DUETIME_HTTP_SECRETS"
    ]
    assert "tok-" not in str(errors)


def test_saving_an_http_job_issues_its_signing_secret_once(acme, clock):
    job, _ = save_definition(http_job(acme), "user:alice", now=clock.now)
    issued = job.issued_signing_secret
    stored = JobSigningSecret.objects.get(job=job)
    assert issued.startswith("jsec_") and stored.secret == issued
    assert (stored.prefix, stored.rotated_at) == (issued[:12], clock.now)
    job.http_method = "PUT"
    job, _ = save_definition(job, "user:alice", now=clock.advance(minutes=1))
    assert job.issued_signing_secret is None, "shown once: a later save does not show it again"
    assert JobSigningSecret.objects.get(job=job).secret == issued


def test_a_job_that_becomes_http_gets_its_secret_then(acme, clock):
    job, _ = save_definition(definition(acme), "user:alice", now=clock.now)
    assert job.issued_signing_secret is None and not JobSigningSecret.objects.exists()
    job.target_kind, job.target_ref, job.payload = "http", URL, {}
    job, _ = save_definition(job, "user:alice", now=clock.now)
    assert JobSigningSecret.objects.get(job=job).secret == job.issued_signing_secret


def test_rotating_replaces_the_secret_at_once(acme, clock):
    job, _ = save_definition(http_job(acme), "user:alice", now=clock.now)
    rotated = JobSigningSecret.rotate(job, clock.advance(days=1))
    stored = JobSigningSecret.objects.get(job=job)
    assert rotated != job.issued_signing_secret and stored.secret == rotated and stored.rotated_at == clock.now
