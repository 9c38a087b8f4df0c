"""Executing targets: python callables and http endpoints, classified as a worker must."""

import datetime as dt
import http.server
import json
import threading

import pytest

from runs import targets
from runs.targets import Attempt


def context(**fields):
    values = dict(
        run_id=7,
        job_name="billing.export",
        attempt=1,
        idempotency_key="billing.export@2026-06-01T11:00:00+02:00",
        fencing_token=42,
        payload={"account": 1},
        due_at=dt.datetime(2026, 6, 1, 9, tzinfo=dt.UTC),
    )
    values.update(fields)
    return Attempt(**values)


class Endpoint(http.server.BaseHTTPRequestHandler):
    status = 200
    seen = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Endpoint.seen.append({"headers": dict(self.headers), "body": json.loads(body)})
        self.send_response(Endpoint.status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    Endpoint.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hooks/export"
    server.shutdown()


def test_it_succeeds_when_a_python_handler_returns():
    assert targets.execute("python", "tests.handlers.noop", context(), 10).outcome == "succeeded"


def test_it_carries_what_a_task_returns():
    outcome = targets.execute("python", "tests.handlers.add", context(payload={"a": 2, "b": 3}), 10)
    assert (outcome.outcome, outcome.return_value) == ("succeeded", {"sum": 5})


def test_it_runs_an_async_task_to_completion():
    outcome = targets.execute("python", "tests.handlers.add_later", context(payload={"a": 2, "b": 3}), 10)
    assert (outcome.outcome, outcome.return_value) == ("succeeded", {"sum": 5})


def test_it_fails_without_retries_a_return_value_that_is_not_json():
    outcome = targets.execute("python", "tests.handlers.returns_a_set", context(payload={}), 10)
    assert (outcome.outcome, outcome.retryable, outcome.return_value) == ("failed", False, None)
    assert "the task's return value cannot be stored: it is not JSON" in outcome.error


def test_it_fails_without_retries_a_return_value_larger_than_a_payload(settings):
    settings.DUETIME_MAX_PAYLOAD_BYTES = 100
    outcome = targets.execute("python", "tests.handlers.returns", context(payload={"value": "x" * 100}), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "102 bytes of JSON, more than DUETIME_MAX_PAYLOAD_BYTES (100)" in outcome.error


def test_it_fails_with_a_retry_when_a_python_handler_raises():
    outcome = targets.execute("python", "tests.handlers.fail", context(), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", True)
    assert outcome.error.startswith("RuntimeError: always fails")


def test_it_skips_the_retries_on_a_permanent_error():
    outcome = targets.execute("python", "examples.demo_handlers.rejects_bad_input", context(payload={}), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)


def test_it_fails_without_retries_a_target_that_is_not_a_registered_task():
    outcome = targets.execute("python", "tests.handlers.missing", context(), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert outcome.error.startswith("not a registered task: 'tests.handlers.missing' is not a Django task")


def test_it_does_not_import_a_module_the_operator_no_longer_lists(settings):
    settings.DUETIME_TASK_MODULES = []
    outcome = targets.execute("python", "tests.handlers.noop", context(), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "is not a registered task module" in outcome.error


def test_it_passes_the_payload_as_keyword_arguments_and_the_duetime_context(tmp_path):
    report = tmp_path / "seen.json"
    run = context(payload={"report": str(report), "account": 1}, attempt=2)
    assert targets.execute("python", "tests.handlers.echo", run, 10).outcome == "succeeded"
    assert json.loads(report.read_text()) == {
        "payload": {"account": 1},
        "run_id": 7,
        "attempt": 2,
        "idempotency_key": "billing.export@2026-06-01T11:00:00+02:00",
        "fencing_token": 42,
        "due_at": "2026-06-01T09:00:00+00:00",
        "lease_lost": False,
        "task_name": "echo",
        "django_context": True,
        "result_id": "7",
    }


def test_it_fails_without_retries_a_payload_the_task_does_not_take():
    outcome = targets.execute("python", "tests.handlers.sleep", context(payload={"hours": 1}), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "the payload does not match tests.handlers.sleep(seconds)" in outcome.error


def test_it_posts_the_payload_with_the_idempotency_key_and_fencing_token(endpoint, settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    assert targets.execute("http", endpoint, context(), 10).outcome == "succeeded"
    (request,) = Endpoint.seen
    assert request["body"] == {"account": 1}
    assert request["headers"]["Idempotency-Key"] == "billing.export@2026-06-01T11:00:00+02:00"
    assert request["headers"]["X-Duetime-Fencing-Token"] == "42"


@pytest.mark.parametrize(
    "status, retryable", [(500, True), (503, True), (429, True), (408, True), (400, False), (404, False)]
)
def test_it_classifies_http_failures(endpoint, settings, status, retryable):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    Endpoint.status = status
    try:
        outcome = targets.execute("http", endpoint, context(), 10)
    finally:
        Endpoint.status = 200
    assert (outcome.outcome, outcome.retryable) == ("failed", retryable)
    assert f"HTTP {status}" in outcome.error


def test_it_refuses_a_loopback_target_unless_allowed(endpoint, settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = False
    outcome = targets.execute("http", endpoint, context(), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "non-public address 127.0.0.1" in outcome.error
    assert Endpoint.seen == [], "nothing was sent"


def test_it_tells_the_handler_when_the_lease_is_lost():
    ctx = context(_heartbeat=lambda: False)
    with pytest.raises(targets.LeaseLost):
        ctx.heartbeat()
    assert ctx.lease_lost
