"""Executing one claimed attempt: `python` Django tasks and `http` endpoints.

A `python` target is a registered Django task (jobs.registry, docs/tasks.md),
inside a module prefix its tenant is allowed as the attempt starts (a prefix
a superuser took away fails the attempt for good, naming the module):
the payload is passed as keyword arguments (after the run's positional
`args`, which only a Django task's enqueue sets), and a task declared with
`takes_context=True` first receives a `Context`. A task returns normally to
succeed (what it returns is stored on the attempt: JSON of at most
DUETIME_MAX_PAYLOAD_BYTES; anything else fails the attempt for good, as
`builtins.TypeError` when it is not JSON), raises `PermanentError` to skip
the remaining attempts, and anything else to fail with a retry (while
attempts are left). "Anything" includes what is not an Exception:
SystemExit, KeyboardInterrupt or GeneratorExit raised by a task fails its
attempt like any error, with its class path and traceback; it never ends
the worker's thread or child, nor leaves the run running. Execution may happen
more than once for one run: tasks make a repeat harmless with
`context.idempotency_key`, and pass `context.fencing_token` to stores that can
refuse stale writers.

An `http` target is called through `connection()`, whose socket comes from the
network wall (jobs.addresses): the URL's host resolved once, every address
checked against the tenant's allowance as it is at the call, the connection
made to a checked address only. Redirects are not followed (docs/security.md).
The call is the job's `HttpCall`: its method (POST and PUT send the payload as
JSON, GET sends no body), its own headers, `Duetime-Signature` (jobs/signing.py,
with the job's signing secret) and, when the job names one, `Authorization:
Bearer` with the value of an operator-configured secret (jobs/http_secrets.py),
read at the call and never stored or logged.
"""

import dataclasses
import datetime as dt
import errno
import functools
import http.client
import inspect
import json
import os
import socket
import time
import traceback

from django.conf import settings
from django.tasks.base import TaskContext, TaskResult, TaskResultStatus
from django.utils import timezone

from jobs import addresses, http_secrets, registry, signing
from jobs.models import JobDefinition, JobSigningSecret, Tenant
from jobs.secrets import REDACTED
from jobs.validation import has_nul
from runs.models import Run

HTTP_RETRYABLE = {408, 429}
# The target kinds run_worker executes; it never claims the others (external workers lease theirs over HTTP).
EXECUTED_KINDS = ("python", "http")


class PermanentError(Exception):
    """Raise from a handler to fail the run now, without further attempts."""


class LeaseLost(Exception):
    """Raised by `context.heartbeat()` when the lease was taken away: stop working."""


class Flag:
    """A flag one thread sets and others read (`lease_lost`): threading.Event's set/is_set/clear without
    its lock and condition, built for every attempt; nothing waits on it."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = False

    def set(self):
        self.value = True

    def clear(self):
        self.value = False

    def is_set(self):
        return self.value


@dataclasses.dataclass
class Attempt:
    """What the worker knows of one leased attempt, and its line back to the lease."""

    run_id: int
    job_name: str
    attempt: int
    idempotency_key: str
    fencing_token: int
    payload: object
    due_at: dt.datetime
    args: list | None = None  # a Django task's positional arguments (Run.args), passed before the payload's
    tenant_id: int | None = None  # whose allowance an http target's call is checked against
    # For an http target: the tenant's jobs.addresses.Allowance as the worker read it when the attempt
    # started (a child process then needs no database); None: read from the database at the call.
    allowance: object = None
    # For an http target: its HttpCall as the worker read it for the batch; None: read from the database at the call.
    http: object = None
    # For a python target: the tenant's allowed module prefixes as the worker read them when the attempt
    # started (a tuple; a child process then needs no database); None: read from the database at the call.
    task_prefixes: tuple | None = None
    _heartbeat: object = None  # callable() -> bool (False: lease lost)
    _lost: Flag = dataclasses.field(default_factory=Flag)  # or the process pool's children.SharedFlag

    @property
    def lease_lost(self):
        """True once Duetime refused a heartbeat: another worker may now own the run."""
        return self._lost.is_set()

    def heartbeat(self):
        """Extend the lease now (the worker also does it every few seconds). Raises LeaseLost."""
        if self._heartbeat is not None and not self._heartbeat():
            self._lost.set()
        if self._lost.is_set():
            raise LeaseLost(f"run {self.run_id}: lease lost (fencing token {self.fencing_token} is stale)")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Context(TaskContext):
    """What a task declared with `takes_context=True` receives as its first argument, `context`.

    Django's TaskContext (`task_result`, `attempt`) plus Duetime's run:
    `run_id`, `job_name`, `idempotency_key`, `fencing_token`, `due_at`,
    `heartbeat()` and `lease_lost`. `attempt` counts Duetime's attempts of
    the run, from 1.
    """

    run: Attempt

    run_id = property(lambda self: self.run.run_id)
    job_name = property(lambda self: self.run.job_name)
    attempt = property(lambda self: self.run.attempt)
    idempotency_key = property(lambda self: self.run.idempotency_key)
    fencing_token = property(lambda self: self.run.fencing_token)
    due_at = property(lambda self: self.run.due_at)
    lease_lost = property(lambda self: self.run.lease_lost)

    def heartbeat(self):
        """Extend the lease now; raises LeaseLost when another worker may own the run."""
        self.run.heartbeat()


@dataclasses.dataclass(frozen=True)
class Outcome:
    outcome: str  # succeeded | failed | timed_out
    error: str = ""
    retryable: bool = True
    return_value: object = None  # what a succeeded task returned: JSON-encodable, stored on its Attempt


class BadReturnValue(Exception):
    """A task returned JSON larger than DUETIME_MAX_PAYLOAD_BYTES (what is not JSON raises TypeError)."""


def execute(kind, ref, run, timeout_seconds):
    """Run one attempt (`run`: an Attempt) and classify its result; never raises, whatever the task raised."""
    try:
        if kind == "python":
            return _stored(call_task(ref, run))
        elif kind == "http":
            post(ref, run, timeout_seconds)
        else:
            return Outcome("failed", f"target kind {kind!r} is not executed by run_worker", retryable=False)
    except PermanentError as exc:
        return Outcome("failed", f"permanent: {exc}", retryable=False)
    except registry.NotRegistered as exc:
        return Outcome("failed", f"not a registered task: {exc}", retryable=False)
    except registry.NotAllowed as exc:
        return Outcome("failed", str(exc), retryable=False)
    except BadReturnValue as exc:
        return Outcome("failed", str(exc), retryable=False)
    except TimeoutError as exc:
        return Outcome("timed_out", f"timed out: {exc}")
    except BaseException as exc:  # noqa: BLE001 - a handler's failure is data, not a crash; SystemExit too
        return Outcome("failed", describe(exc))
    return Outcome("succeeded")


def _stored(returned):
    """The outcome of a task that returned `returned`: succeeded, carrying it, or failed for good (not JSON)."""
    if returned is None:
        return Outcome("succeeded")
    try:
        check_return_value(returned)
    except TypeError as exc:  # the value's, not the task's: another attempt would return the same
        return Outcome("failed", describe(exc), retryable=False)
    return Outcome("succeeded", return_value=returned)


def call_task(ref, run):
    """Call the registered task `ref` as `task.func(*args, **payload)` (a Context first if it takes one).

    `run.args` are a Django task's positional arguments as enqueued (tasks_backend); other runs have none.
    Asked again first, as the call is made: whether the tenant may still run it (a superuser may have
    taken the prefix away), and whether the operator still lists the module.
    """
    check_allowed(ref, run)
    task = registry.registered_task(ref)
    kwargs = {} if run.payload is None else run.payload
    if not isinstance(kwargs, dict):
        raise PermanentError(
            f"the payload of a python task must be a JSON object (its keyword arguments), not {kwargs!r:.100}"
        )
    args = ([_context(task, run)] if task.takes_context else []) + list(run.args or [])
    try:
        _signature(task.func).bind(*args, **kwargs)
    except TypeError as exc:  # the payload does not fit the task: retrying cannot help
        raise PermanentError(f"the payload does not match {ref}{_signature(task.func)}: {exc}") from exc
    return task.call(*args, **kwargs)  # Django's Task.call runs an `async def` task to completion


def check_allowed(ref, run):
    """Raise registry.NotAllowed unless the run's tenant (run.tenant_id) may still run `ref`.

    Uses the prefixes the worker read as the attempt started (run.task_prefixes), or reads them now.
    A run of no known tenant (a direct call, outside the engine) is not checked.
    """
    prefixes = run.task_prefixes
    if prefixes is None and run.tenant_id is not None:
        prefixes = _prefixes_now(run.tenant_id)
    if prefixes is not None and (why := registry.revoked(prefixes, ref)):
        raise registry.NotAllowed(why)


def _prefixes_now(tenant_id):
    found = Tenant.objects.filter(pk=tenant_id).values_list("task_module_prefixes", flat=True).first()
    return () if found is None else tuple(Tenant(task_module_prefixes=found).task_prefixes)


def task_prefixes(leases):
    """{tenant id: its allowed module prefixes} of the tenants whose python targets are among `leases`,
    read now, in one query (as `allowances`, handed over with the attempts)."""
    python = [lease for lease in leases if lease.target_kind == "python"]
    # lease_runs reads them with the lease, in the claim's statement: no query then.
    read = {
        lease.tenant_id: tuple(Tenant.prefixes_in(text))
        for lease in python
        if (text := getattr(lease, "task_module_prefixes", None)) is not None
    }
    return {**read, **prefixes_of({lease.tenant_id for lease in python} - set(read))}


def prefixes_of(tenant_ids):
    """{tenant id: its allowed module prefixes} of these tenants, read now in one query (a deleted one: none)."""
    if not tenant_ids:
        return {}
    rows = Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "task_module_prefixes")
    found = {pk: tuple(Tenant.prefixes_in(text)) for pk, text in rows}
    return {tenant_id: found.get(tenant_id, ()) for tenant_id in tenant_ids}  # a deleted tenant: nothing


def check_return_value(value):
    """Raise TypeError unless `value` is JSON, BadReturnValue when it is larger than DUETIME_MAX_PAYLOAD_BYTES.

    Like Django's own backends, a value that is not JSON fails as
    `builtins.TypeError`, with the traceback of the encoding that refused it.
    """
    encoded = _encode(value)
    if has_nul(value):  # PostgreSQL's jsonb cannot hold it: the completion itself would fail, again and again
        raise BadReturnValue("the task's return value cannot be stored: it contains the NUL character (\\u0000)")
    limit = settings.DUETIME_MAX_PAYLOAD_BYTES
    if len(encoded) > limit:
        raise BadReturnValue(
            f"the task's return value cannot be stored: {len(encoded)} bytes of JSON, "
            f"more than DUETIME_MAX_PAYLOAD_BYTES ({limit})"
        )


def _encode(value):
    """Compact UTF-8 JSON; TypeError for NaN, a cycle, a set, an object, a lone surrogate (not storable)."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"the task's return value is not JSON: {exc}") from exc


@functools.cache
def _signature(func):
    return inspect.signature(func)  # computed once per task: it costs more than a no-op task


def _context(task, run):
    now = timezone.now()
    result = TaskResult(
        task=task,
        id=str(run.run_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=run.due_at,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=list(run.args or []),
        kwargs=run.payload or {},
        backend=task.backend,
        errors=[],
        worker_ids=[f"{socket.gethostname()}:{os.getpid()}"],
    )
    return Context(task_result=result, run=run)


def describe(exc):
    """An exception as an attempt's error: the error first (what the portal shows), then the innermost frames.

    Never raises, whatever the exception: a task's exception whose str() fails is told by its class alone.
    """
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001 - tenant code's __str__
        message = "<the exception's str() failed>"
    try:
        trace = "".join(traceback.format_exception(exc, limit=-3))
    except BaseException:  # noqa: BLE001 - formatting runs tenant code too (__str__, notes)
        trace = ""
    return f"{exc.__class__.__name__}: {message}\n\n{trace}"[:4000]


class GuardedHTTPConnection(http.client.HTTPConnection):
    """http.client's connection, opened through the network wall (jobs.addresses.connect).

    `host` stays the URL's name: the Host header (and for https the TLS SNI and
    the certificate check) carry it, while the socket goes to an address that
    name resolved to, once, checked before the first byte. `allowance` is where
    it may go besides public addresses (set it before the first request).
    Build one with `connection()`.
    """

    allowance = addresses.PUBLIC_ONLY
    context = ""  # who calls, for the operator's log line of a refusal (a run, a webhook)

    def connect(self):
        self.sock = addresses.connect(self.host, self.port, self.timeout, self.allowance, context=self.context)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client's own connect
        except OSError as exc:
            if exc.errno != errno.ENOPROTOOPT:
                raise


class GuardedHTTPSConnection(http.client.HTTPSConnection, GuardedHTTPConnection):
    """The same over TLS: HTTPSConnection.connect wraps the guarded socket, for the URL's name."""


def connection(destination, allowance, timeout, *, context=""):
    """An unopened connection to `destination` (jobs.addresses.Destination) that connects through the wall."""
    kind = GuardedHTTPSConnection if destination.scheme == "https" else GuardedHTTPConnection
    # The port is always given: http.client would otherwise read one off an IPv6 address's last group.
    conn = kind(destination.host, destination.port, timeout=timeout)
    conn.allowance, conn.context = allowance, context
    return conn


def allowances(leases):
    """{tenant id: Allowance} of the tenants whose http targets are among `leases`, read now, in one query.

    The worker reads them as the attempts start and hands them over with the
    attempts, so a child process never opens a database connection for them
    (SQLite's locks do not survive a fork taken while another thread held them).
    """
    tenant_ids = {lease.tenant_id for lease in leases if lease.target_kind == "http"}
    return Tenant.allowances(tenant_ids) if tenant_ids else {}


def _allowance_now(tenant_id):
    return Tenant.allowance_of(tenant_id) if tenant_id is not None else addresses.PUBLIC_ONLY


@dataclasses.dataclass(frozen=True)
class HttpCall:
    """How one http job is called, as read from its definition: plain data, so a child process needs no database.

    `bearer_secret` is a name (jobs.http_secrets), its value read at the call;
    without a `signing_secret` (a run whose job is gone) the call is not signed.
    """

    method: str = "POST"
    headers: dict = dataclasses.field(default_factory=dict)
    tenant_name: str = ""
    bearer_secret: str = ""
    signing_secret: str = ""


def http_calls(leases, now=None):
    """{job id: HttpCall} of the http targets among `leases`, read now (two queries; a third makes missing secrets).

    The worker reads them with the allowances as the attempts start, for the
    same reason (a child process opens no database connection).
    """
    job_ids = {lease.job_id for lease in leases if lease.target_kind == "http"}
    return _calls_of(job_ids, now or timezone.now()) if job_ids else {}


def _calls_of(job_ids, now):
    rows = JobDefinition.objects.filter(pk__in=job_ids).values_list(
        "pk", "http_method", "http_headers", "tenant__name", "http_bearer_secret"
    )
    secrets = JobSigningSecret.for_jobs(job_ids, now)
    return {pk: HttpCall(*values, signing_secret=secrets.get(pk, "")) for pk, *values in rows}


def _http_call_now(ctx):
    """The call of `ctx`'s job, read at the call (the worker could not read it for the batch)."""
    if ctx.tenant_id is None:  # no tenant, no job: an attempt built by hand
        return HttpCall()
    job_id = Run.objects.filter(pk=ctx.run_id).values_list("job_id", flat=True).first()
    return _calls_of({job_id}, timezone.now()).get(job_id, HttpCall()) if job_id is not None else HttpCall()


def request_of(call, ctx, timestamp):
    """(method, body, headers) of one call: the job's headers, then Duetime's, signed. Raises PermanentError."""
    body = b"" if call.method == "GET" else json.dumps(ctx.payload).encode()
    headers = {
        **call.headers,
        "Idempotency-Key": ctx.idempotency_key,
        "X-Duetime-Fencing-Token": str(ctx.fencing_token),
        "X-Duetime-Run-Id": str(ctx.run_id),
        "X-Duetime-Attempt": str(ctx.attempt),
    }
    headers.setdefault("User-Agent", "Duetime-Worker")
    if call.method != "GET":
        headers["Content-Type"] = "application/json"
    if call.signing_secret:
        headers[signing.HEADER] = signing.signature(
            call.signing_secret, timestamp, ctx.run_id, ctx.idempotency_key, body
        )
    if call.bearer_secret:
        try:
            headers["Authorization"] = f"Bearer {http_secrets.value(call.tenant_name, call.bearer_secret)}"
        except http_secrets.UnknownSecret as exc:
            raise PermanentError(str(exc)) from None
    return call.method, body, headers


def post(url, ctx, timeout_seconds):
    """Call the URL as the job says (POST by default); 2xx succeeds, 408/429/5xx/timeouts retry, other 4xx and
    3xx are permanent.

    A redirect is not followed: its Location is never called, so it cannot lead
    past the wall (docs/security.md). A refused address is permanent too, as is
    a bearer secret the operator no longer configures.
    """
    try:
        destination = addresses.Destination.of(url)
    except addresses.BadURL as exc:
        raise PermanentError(f"{url!r} is not an http(s) URL ({exc})") from exc
    method, body, headers = request_of(ctx.http or _http_call_now(ctx), ctx, int(time.time()))
    bearer = headers.get("Authorization", "").removeprefix("Bearer ")
    allowance = ctx.allowance or _allowance_now(ctx.tenant_id)
    conn = connection(destination, allowance, min(timeout_seconds, 300), context=f"run {ctx.run_id}")
    try:
        conn.request(method, destination.target, body=body if method != "GET" else None, headers=headers)
        response = conn.getresponse()
        text = response.read(2000).decode(errors="replace")
    except addresses.NotPublic as exc:
        raise PermanentError(str(exc)) from None  # the detail went to the operator's log, not to the tenant
    except TimeoutError as exc:
        raise TimeoutError(f"no answer from {destination.host} within {timeout_seconds} s") from exc
    finally:
        conn.close()
    status = response.status
    if 200 <= status < 300:
        return
    if bearer:  # a receiver that echoes the request must not put the operator's secret into the run's error
        text = text.replace(bearer, REDACTED)
    message = f"HTTP {status} from {url}: {text[:500]}"
    if status in HTTP_RETRYABLE or status >= 500:
        raise RuntimeError(message)
    if 300 <= status < 400:
        message = f"HTTP {status} from {url}: redirects are not followed (call the final URL)"
    raise PermanentError(message)
