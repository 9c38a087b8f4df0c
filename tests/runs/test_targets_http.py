"""An http target's call (runs/targets.py): its method, its headers, its signature and its bearer secret.

The receiver here verifies with the recipe docs/tasks.md gives, read from the
page itself: if the page and Duetime ever disagree, these tests fail.
"""

import http.server
import json
import re
import shutil
import subprocess
import threading
import types
from pathlib import Path

import pytest

from jobs import signing
from jobs.models import JobSigningSecret
from runs import targets
from tests.runs.test_targets import context

TASKS_MD = Path(__file__).parents[2] / "docs" / "tasks.md"
SECRET = "jsec_test-secret-of-billing-export"


def documented(language):
    """The code block of `language` under "Verifying Duetime's signature" in docs/tasks.md."""
    section = TASKS_MD.read_text().split("### Verifying Duetime's signature", 1)[1]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


class Recipe:
    """The documented Python `verify`, run in a namespace of its own, with a clock the test sets."""

    def __init__(self):
        self.namespace = {}
        exec(documented("python"), self.namespace)  # noqa: S102 - our own docs page
        self.now = None
        self.namespace["time"] = types.SimpleNamespace(time=lambda: self.now)

    def verify(self, secret, request, now):
        self.now = now
        return self.namespace["verify"](secret, request["headers"], request["body"])


class Receiver(http.server.BaseHTTPRequestHandler):
    """Keeps each request as it arrived: method, headers (case-insensitive, as a framework's) and raw body."""

    seen = []

    def _keep(self):
        length = self.headers.get("Content-Length")
        body = self.rfile.read(int(length)) if length else b""
        Receiver.seen.append({"method": self.command, "headers": self.headers, "body": body})
        self.send_response(204)
        self.end_headers()

    do_POST = do_PUT = do_GET = _keep

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver(settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True  # the receiver listens on loopback
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    Receiver.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hooks/export"
    server.shutdown()
    server.server_close()


def call(url, **fields):
    """Execute one attempt of an http job called as `fields` say; returns (outcome, the request received)."""
    http_call = targets.HttpCall(**{"signing_secret": SECRET, "tenant_name": "acme", **fields})
    outcome = targets.execute("http", url, context(http=http_call), 10)
    return outcome, (Receiver.seen[-1] if Receiver.seen else None)


def stamp(request):
    return int(dict(p.split("=", 1) for p in request["headers"]["Duetime-Signature"].split(","))["t"])


# --- methods -------------------------------------------------------------------


def test_it_posts_the_payload_as_json_by_default(receiver):
    outcome, request = call(receiver)
    assert outcome.outcome == "succeeded"
    assert request["method"] == "POST"
    assert json.loads(request["body"]) == {"account": 1}
    assert request["headers"]["Content-Type"] == "application/json"


def test_it_puts_the_payload_as_json(receiver):
    outcome, request = call(receiver, method="PUT")
    assert (outcome.outcome, request["method"]) == ("succeeded", "PUT")
    assert json.loads(request["body"]) == {"account": 1}
    assert request["headers"]["Content-Type"] == "application/json"


def test_it_sends_no_body_with_a_get(receiver):
    outcome, request = call(receiver, method="GET")
    assert (outcome.outcome, request["method"]) == ("succeeded", "GET")
    assert request["body"] == b""
    assert "Content-Length" not in request["headers"] and "Content-Type" not in request["headers"]


# --- headers -------------------------------------------------------------------


def test_it_sends_the_jobs_own_headers_beside_duetimes(receiver):
    _, request = call(receiver, headers={"X-Team": "billing", "Accept": "application/json"})
    assert (request["headers"]["X-Team"], request["headers"]["Accept"]) == ("billing", "application/json")
    assert request["headers"]["Idempotency-Key"] == "billing.export@2026-06-01T11:00:00+02:00"
    assert request["headers"]["X-Duetime-Run-Id"] == "7"
    assert request["headers"]["User-Agent"] == "Duetime-Worker"


def test_a_job_may_name_its_own_user_agent(receiver):
    _, request = call(receiver, headers={"User-Agent": "billing-scheduler/2"})
    assert request["headers"].get_all("User-Agent") == ["billing-scheduler/2"]


def test_duetimes_headers_win_over_a_stored_header_of_the_same_name(receiver):
    """Validation refuses them at save; a definition stored before that rule still cannot forge them."""
    _, request = call(receiver, headers={"Idempotency-Key": "forged", "Duetime-Signature": "t=1,v1=00"})
    assert request["headers"].get_all("Idempotency-Key") == ["billing.export@2026-06-01T11:00:00+02:00"]
    assert Recipe().verify(SECRET, request, stamp(request))


def test_it_sends_the_named_bearer_secret_read_at_the_call(receiver, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-one"}}
    _, request = call(receiver, bearer_secret="billing-api")
    assert request["headers"]["Authorization"] == "Bearer tok-one"
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-two"}}
    _, request = call(receiver, bearer_secret="billing-api")
    assert request["headers"]["Authorization"] == "Bearer tok-two", "read at each call, not when the job was saved"


def test_it_sends_no_authorization_without_a_bearer_secret(receiver, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-one"}}
    _, request = call(receiver)
    assert "Authorization" not in request["headers"]


def test_a_bearer_secret_the_operator_removed_fails_for_good_without_calling_or_telling_other_values(
    receiver, settings
):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"crm": "tok-crm"}, "globex": {"billing-api": "tok-globex"}}
    outcome, request = call(receiver, bearer_secret="billing-api")
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "tenant acme has no http secret named 'billing-api' (configured: crm)" in outcome.error
    assert "tok-" not in outcome.error
    assert request is None, "nothing was sent"


def test_another_tenants_secret_of_that_name_is_not_sent(receiver, settings):
    settings.DUETIME_HTTP_SECRETS = {"globex": {"billing-api": "tok-globex"}}
    outcome, request = call(receiver, bearer_secret="billing-api", tenant_name="acme")
    assert (outcome.outcome, request) == ("failed", None)


# --- the signature, verified with the documented recipe only -------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "GET"])
def test_the_documented_recipe_accepts_duetimes_signature(receiver, method):
    _, request = call(receiver, method=method)
    assert Recipe().verify(SECRET, request, now=stamp(request))


def test_the_signature_covers_timestamp_run_id_key_and_body(receiver):
    _, request = call(receiver)
    t = stamp(request)
    expected = signing.signature(SECRET, t, 7, "billing.export@2026-06-01T11:00:00+02:00", request["body"])
    assert request["headers"]["Duetime-Signature"] == expected


def test_the_documented_recipe_refuses_a_replayed_request_with_an_old_timestamp(receiver):
    """A request captured and sent again later carries its old timestamp: refused past five minutes."""
    _, request = call(receiver)
    t, recipe = stamp(request), Recipe()
    assert recipe.verify(SECRET, request, now=t + 300), "within the tolerance"
    assert not recipe.verify(SECRET, request, now=t + 301), "replayed 301 s later"
    assert not recipe.verify(SECRET, request, now=t + 86400), "replayed a day later"


def test_the_documented_recipe_refuses_a_fresh_timestamp_on_an_old_signature(receiver):
    """Rewriting t to pass the freshness check breaks the HMAC: t is signed."""
    _, request = call(receiver)
    t = stamp(request)
    header = request["headers"]["Duetime-Signature"]
    request["headers"].replace_header("Duetime-Signature", header.replace(f"t={t}", f"t={t + 3600}"))
    assert not Recipe().verify(SECRET, request, now=t + 3600)


@pytest.mark.parametrize(
    "header, tampered",
    [
        ("body", b'{"account": 2}'),
        ("X-Duetime-Run-Id", "8"),
        ("Idempotency-Key", "billing.export@2026-06-02T11:00:00+02:00"),
    ],
)
def test_the_documented_recipe_refuses_a_changed_body_run_or_key(receiver, header, tampered):
    _, request = call(receiver)
    if header == "body":
        request["body"] = tampered
    else:
        request["headers"].replace_header(header, tampered)
    assert not Recipe().verify(SECRET, request, now=stamp(request))


def test_the_documented_recipe_refuses_another_jobs_secret(receiver):
    _, request = call(receiver)
    assert not Recipe().verify("jsec_another-jobs-secret", request, now=stamp(request))


def test_the_module_and_the_documented_recipe_agree(receiver):
    _, request = call(receiver)
    t = stamp(request)
    for now, fresh in ((t, True), (t + 301, False)):
        assert fresh == signing.verify(
            SECRET,
            request["headers"]["Duetime-Signature"],
            7,
            request["headers"]["Idempotency-Key"],
            request["body"],
            now,
        )


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_documented_node_recipe_accepts_the_signature_and_refuses_a_replay(receiver, tmp_path):
    _, request = call(receiver)
    t = stamp(request)
    script = tmp_path / "verify.js"
    headers = {name.lower(): value for name, value in request["headers"].items()}
    script.write_text(
        documented("javascript")
        + f"\nconst headers = {json.dumps(headers)};\nconst body = Buffer.from({json.dumps(request['body'].hex())}, 'hex');\n"
        + f"Date.now = () => {t} * 1000;\nconst fresh = verify({json.dumps(SECRET)}, headers, body);\n"
        + f"Date.now = () => ({t} + 301) * 1000;\nconst replayed = verify({json.dumps(SECRET)}, headers, body);\n"
        + "console.log(JSON.stringify([fresh, replayed]));\n"
    )
    printed = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=30, check=True).stdout
    assert json.loads(printed) == [True, False]


# --- what the worker reads for a batch -------------------------------------------


def test_it_reads_the_calls_of_a_batch_of_http_jobs_and_makes_a_missing_secret(acme, make_job, clock):
    settings_job = make_job(
        acme, "billing.export", target_kind="http", target_ref="https://public.example/hook", http_method="PUT"
    )
    JobSigningSecret.objects.filter(job=settings_job).delete()  # saved before calls were signed
    other = make_job(acme, "billing.other", target_kind="python")
    Lease = types.SimpleNamespace
    calls = targets.http_calls(
        [Lease(job_id=settings_job.pk, target_kind="http"), Lease(job_id=other.pk, target_kind="python")], clock.now
    )
    made = JobSigningSecret.objects.get(job=settings_job)
    assert calls == {
        settings_job.pk: targets.HttpCall(method="PUT", headers={}, tenant_name="acme", signing_secret=made.secret)
    }
    assert made.secret.startswith("jsec_") and made.rotated_at == clock.now
    assert targets.http_calls([Lease(job_id=other.pk, target_kind="python")]) == {}


def test_a_hand_built_attempt_of_a_known_run_reads_its_jobs_call(receiver, acme, make_job, make_run, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-one"}}
    job = make_job(
        acme, target_kind="http", target_ref=receiver, http_method="PUT", http_bearer_secret="billing-api", payload={}
    )
    run = make_run(job)  # make_job saves the model directly: the job has no secret until its first call makes one
    ctx = context(run_id=run.pk, tenant_id=acme.pk, idempotency_key=run.idempotency_key, payload={})
    assert targets.execute("http", receiver, ctx, 10).outcome == "succeeded"
    secret = JobSigningSecret.objects.get(job=job).secret
    (request,) = Receiver.seen
    assert (request["method"], request["headers"]["Authorization"]) == ("PUT", "Bearer tok-one")
    recipe = Recipe()
    assert recipe.verify(secret, request, now=stamp(request))


class Echo(http.server.BaseHTTPRequestHandler):
    """Refuses every request, echoing its headers back: a receiver's error page that shows the request."""

    def do_POST(self):
        self.send_response(400)
        self.end_headers()
        self.wfile.write(str(self.headers).encode())

    def log_message(self, *args):
        pass


def test_a_receiver_echoing_the_request_does_not_put_the_bearer_value_into_the_runs_error(settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "short-tok"}}  # too short for the Bearer pattern
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        http_call = targets.HttpCall(tenant_name="acme", bearer_secret="billing-api", signing_secret=SECRET)
        outcome = targets.execute("http", f"http://127.0.0.1:{server.server_port}/", context(http=http_call), 10)
    finally:
        server.shutdown()
        server.server_close()
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "HTTP 400" in outcome.error and "Authorization: Bearer [REDACTED]" in outcome.error
    assert "short-tok" not in outcome.error
