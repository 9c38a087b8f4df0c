"""Executing targets: python callables and http endpoints, classified as a worker must."""

import collections
import datetime as dt
import http.server
import json
import socket
import threading

import pytest

from runs import claims, enqueue, targets
from runs.models import Attempt as AttemptRow
from runs.targets import Attempt
from tasks_backend import results
from tests.fixtures.network import Listener


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


Lease = collections.namedtuple("Lease", "tenant_id target_kind")  # what targets.allowances reads of a lease


class Redirect(http.server.BaseHTTPRequestHandler):
    location = "/"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(302)
        self.send_header("Location", Redirect.location)
        self.end_headers()

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


def test_it_fails_without_retries_a_return_value_that_is_not_json_as_a_type_error_with_its_traceback():
    outcome = targets.execute("python", "tests.handlers.returns_a_set", context(payload={}), 10)
    assert (outcome.outcome, outcome.retryable, outcome.return_value) == ("failed", False, None)
    assert outcome.error.startswith("TypeError: the task's return value is not JSON: Object of type set")
    assert "Traceback (most recent call last)" in outcome.error
    assert exception_class_path(outcome) == "builtins.TypeError"


def test_it_fails_without_retries_a_return_value_the_database_cannot_hold():
    outcome = targets.execute("python", "tests.handlers.returns_nul", context(payload={}), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "the task's return value cannot be stored: it contains the NUL character" in outcome.error


@pytest.mark.parametrize("what", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
def test_it_fails_an_attempt_whose_task_raises_what_is_not_an_exception_with_its_class_and_traceback(what):
    outcome = targets.execute("python", "tests.handlers.raises", context(payload={"what": what, "message": "3"}), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", True)
    assert outcome.error.startswith(f"{what}: 3")
    assert "Traceback (most recent call last)" in outcome.error and "tests/handlers.py" in outcome.error
    assert exception_class_path(outcome) == f"builtins.{what}"


def test_it_describes_an_exception_whose_str_fails():
    outcome = targets.execute("python", "tests.handlers.raises_unprintable", context(payload={}), 10)
    assert outcome.outcome == "failed"
    assert outcome.error.startswith("Unprintable: <the exception's str() failed>")


def test_it_fails_without_retries_a_task_whose_module_fails_as_it_is_imported(settings):
    settings.DUETIME_TASK_MODULES = [*settings.DUETIME_TASK_MODULES, "tests.broken_handlers"]
    outcome = targets.execute("python", "tests.broken_handlers.export", context(payload={}), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert outcome.error == (
        "not a registered task: the task module 'tests.broken_handlers' cannot be imported: "
        "RuntimeError: billing settings are missing: set BILLING_URL"
    )


def exception_class_path(outcome):
    """The class path Django's TaskResult would show for this outcome (tasks_backend.results)."""
    return results.exception_class_path(AttemptRow(outcome=outcome.outcome, error=outcome.error))


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
    assert outcome.error.startswith("permanent: refused: not a public address")
    assert "127.0.0.1" not in outcome.error, "the address and its class are for the operator's log only"
    assert Endpoint.seen == [], "nothing was sent"


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_it_sends_no_byte_to_a_refused_address_not_even_a_connection(listener, scheme):
    outcome = targets.execute("http", f"{scheme}://127.0.0.1:{listener.port}/hooks/export", context(), 2)
    assert listener.connections() == 0, "no TCP connection reached the port"
    assert listener.received() == b"", "no TLS ClientHello, no request line"
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert outcome.error.startswith("permanent: refused: not a public address")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_it_tells_the_tenant_the_same_for_an_open_and_a_closed_port(listener, closed_port, scheme):
    """Were the errors different, a tenant could scan the worker's network port by port."""
    open_port = targets.execute("http", f"{scheme}://127.0.0.1:{listener.port}/", context(), 10)
    shut_port = targets.execute("http", f"{scheme}://127.0.0.1:{closed_port}/", context(), 10)
    assert open_port == shut_port
    assert open_port.error.startswith("permanent: refused: not a public address")


def test_it_calls_a_private_address_inside_the_tenants_networks_and_stops_when_one_is_removed(endpoint, acme):
    acme.private_networks = "127.0.0.1/32  # the billing sidecar"
    acme.save()
    assert targets.execute("http", endpoint, context(tenant_id=acme.pk), 10).outcome == "succeeded"
    acme.private_networks = ""
    acme.save()  # read again at the next call: no restart, no cache
    outcome = targets.execute("http", endpoint, context(tenant_id=acme.pk), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert outcome.error == (
        "permanent: refused: not a public address "
        "(Duetime calls public addresses only, unless an operator allows private networks of tenant acme)"
    )
    assert len(Endpoint.seen) == 1, "only the call made while it was allowed"


def test_it_names_the_tenants_networks_when_the_address_is_outside_them(endpoint, acme):
    acme.private_networks = "10.20.0.0/16\nfd00:20::/64"
    acme.save()
    outcome = targets.execute("http", endpoint, context(tenant_id=acme.pk), 10)
    assert outcome.error == (
        "permanent: refused: not a public address, "
        "nor in the allowed private networks of tenant acme (10.20.0.0/16, fd00:20::/64)"
    )


def test_it_connects_to_the_checked_address_with_the_urls_name_in_the_host_header(endpoint, dns, settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    dns.add("billing.test", "127.0.0.1")
    port = endpoint.split(":")[2].split("/")[0]
    assert targets.execute("http", f"http://billing.test:{port}/hooks/export", context(), 10).outcome == "succeeded"
    assert Endpoint.seen[0]["headers"]["Host"] == f"billing.test:{port}"
    assert dns.asked.count("billing.test") == 1, "resolved once: the connection does not look the name up again"


def test_it_sends_the_urls_name_as_tls_sni_to_the_checked_address(listener, dns, settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    dns.add("billing.test", "127.0.0.1")
    outcome = targets.execute("http", f"https://billing.test:{listener.port}/", context(), 1)
    assert outcome.outcome == "timed_out"  # the listener never answers the handshake
    assert listener.connections() == 1
    assert b"billing.test" in listener.received(), "the ClientHello names the URL's host (SNI)"


def test_it_resolves_a_name_once_so_a_changed_answer_cannot_slip_past_the_check(dns, dials):
    """DNS rebinding: a name that answers a public address, then loopback."""
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])
    dns.add("rebind.test", lambda: next(answers))
    outcome = targets.execute("http", "http://rebind.test/", context(), 10)
    assert dials.made == [("93.184.215.14", 80)], "the socket went to the address that was checked"
    assert dns.asked.count("rebind.test") == 1
    assert outcome.error.startswith("ConnectionRefusedError")  # the recorder's: nothing left the machine


def test_it_refuses_a_name_when_any_of_its_addresses_is_not_public(dns, dials):
    dns.add("mixed.test", "93.184.215.14", "10.0.0.5")
    outcome = targets.execute("http", "http://mixed.test/", context(), 10)
    assert outcome.error.startswith("permanent: refused: not a public address")
    assert dials.made == []


@pytest.mark.parametrize(
    "url, dialled",
    [
        ("http://[64:ff9b::7f00:1]/", ("64:ff9b::7f00:1", 80)),  # was [64:ff9b::7f00] port 1
        ("http://[2002:7f00:1::]/", ("2002:7f00:1::", 80)),  # was a DNS lookup of "2002:7f00:1:"
        ("http://[::127.0.0.1]/", ("::127.0.0.1", 80)),  # was "nonnumeric port"
        ("https://[::1]:8443/x", ("::1", 8443)),
    ],
)
def test_it_reads_an_ipv6_literal_with_its_brackets_and_port(url, dialled, dials, dns, settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True  # to see where the connection would go
    targets.execute("http", url, context(), 10)
    assert dials.made == [dialled]
    assert dns.asked == [dialled[0]], "the literal, never a name made of part of it"


def test_it_calls_an_ipv6_loopback_literal_with_the_host_header_in_brackets(settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    server = http.server.ThreadingHTTPServer(("::1", 0), Endpoint, bind_and_activate=False)
    server.address_family = socket.AF_INET6
    server.socket = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    server.server_bind()
    server.server_activate()
    Endpoint.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert targets.execute("http", f"http://[::1]:{port}/v6", context(), 10).outcome == "succeeded"
    finally:
        server.shutdown()
        server.server_close()
    assert Endpoint.seen[0]["headers"]["Host"] == f"[::1]:{port}"


def test_it_does_not_follow_a_redirect_to_a_private_address(acme, listener):
    """The redirect's Location (another loopback address) is never called: not even a connection."""
    target = Listener(host="127.0.0.2")
    Redirect.location = f"http://127.0.0.2:{target.port}/"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    acme.private_networks = "127.0.0.1/32"
    acme.save()
    try:
        outcome = targets.execute("http", f"http://127.0.0.1:{server.server_port}/", context(tenant_id=acme.pk), 10)
    finally:
        server.shutdown()
        server.server_close()
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "HTTP 302" in outcome.error and "redirects are not followed" in outcome.error
    assert target.connections() == 0
    target.close()


def test_it_retries_a_name_that_does_not_resolve():
    outcome = targets.execute("http", "https://nowhere.test/hooks", context(), 10)
    assert (outcome.outcome, outcome.retryable) == ("failed", True)
    assert outcome.error.startswith("Unresolvable: could not resolve nowhere.test")


def test_it_tells_the_handler_when_the_lease_is_lost():
    ctx = context(_heartbeat=lambda: False)
    with pytest.raises(targets.LeaseLost):
        ctx.heartbeat()
    assert ctx.lease_lost


def test_it_reads_the_allowances_of_a_batch_of_http_targets_in_one_query(acme, globex, django_assert_num_queries):
    acme.private_networks = "10.20.0.0/16"
    acme.save()
    leases = [Lease(acme.pk, "http"), Lease(globex.pk, "http"), Lease(acme.pk, "http"), Lease(999, "python")]
    with django_assert_num_queries(1):
        found = targets.allowances(leases)
    assert {pk: (a.owner, [str(n) for n in a.networks]) for pk, a in found.items()} == {
        acme.pk: ("tenant acme", ["10.20.0.0/16"]),
        globex.pk: ("tenant globex", []),
    }
    with django_assert_num_queries(0):
        assert targets.allowances([Lease(acme.pk, "python")]) == {}


def test_it_calls_with_the_allowance_and_call_the_worker_read_without_asking_the_database(
    endpoint, acme, make_job, django_assert_num_queries
):
    """A child process of the `processes` pool gets the allowance and the job's call with the attempt: it opens
    no connection."""
    acme.private_networks = "127.0.0.1/32"
    acme.save()
    job = make_job(acme, target_kind="http", target_ref=endpoint)
    (call,) = targets.http_calls([collections.namedtuple("Lease", "job_id target_kind")(job.pk, "http")]).values()
    run = context(tenant_id=acme.pk, allowance=targets.allowances([Lease(acme.pk, "http")])[acme.pk], http=call)
    with django_assert_num_queries(0):
        assert targets.execute("http", endpoint, run, 10).outcome == "succeeded"


PythonLease = collections.namedtuple("PythonLease", "tenant_id target_kind")


def test_a_python_task_whose_prefix_was_revoked_fails_for_good_naming_the_module(tmp_path):
    report = tmp_path / "ran.json"
    ctx = context(payload={"report": str(report)}, tenant_id=1, task_prefixes=("billing.tasks",))

    outcome = targets.execute("python", "tests.handlers.echo", ctx, 10)

    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert outcome.error == (
        "permission revoked: its tenant may no longer run tasks from 'tests.handlers' (the module prefix that "
        "allowed it was removed; allowed module prefixes now: billing.tasks)"
    )
    assert not report.exists()  # the handler was never called


def test_the_prefixes_are_read_at_the_call_when_the_worker_did_not_hand_them_over(acme, tmp_path):
    report = tmp_path / "ran.json"
    ctx = context(payload={"report": str(report)}, tenant_id=acme.pk)
    assert targets.execute("python", "tests.handlers.echo", ctx, 10).outcome == "succeeded"

    acme.task_module_prefixes = ""
    acme.save()
    report.unlink()
    outcome = targets.execute(
        "python", "tests.handlers.echo", context(payload={"report": str(report)}, tenant_id=acme.pk), 10
    )

    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert "may no longer run tasks from 'tests.handlers'" in outcome.error and "now: none" in outcome.error
    assert not report.exists()


def test_the_worker_reads_the_python_targets_prefixes_in_one_query(acme, globex, django_assert_num_queries):
    globex.task_module_prefixes = "tests.handlers\nbilling.tasks"
    globex.save()
    leases = [PythonLease(acme.pk, "python"), PythonLease(globex.pk, "python"), PythonLease(acme.pk, "http")]

    with django_assert_num_queries(1):
        found = targets.task_prefixes(leases)

    assert found == {acme.pk: ("tests.handlers",), globex.pk: ("tests.handlers", "billing.tasks")}
    assert targets.task_prefixes([PythonLease(acme.pk, "http")]) == {}


def test_prefixes_read_with_the_lease_cost_the_worker_no_query(acme, make_job, django_assert_num_queries):
    job = make_job(acme, "short", overlap_policy="allow")
    enqueue.enqueue(job)
    leases = claims.claim(["default"], 10, "w")
    assert [lease.task_module_prefixes for lease in leases] == ["tests.handlers"]

    with django_assert_num_queries(0):
        assert targets.task_prefixes(leases) == {acme.pk: ("tests.handlers",)}
