"""Executing one claimed attempt: `python` callables and `http` endpoints.

A handler gets a `Context`; it returns normally to succeed, raises
`PermanentError` to skip the remaining attempts, and anything else to fail
with a retry (while attempts are left). Execution may happen more than once
for one run: handlers make a repeat harmless with `ctx.idempotency_key`,
and pass `ctx.fencing_token` to stores that can refuse stale writers.
"""

import dataclasses
import datetime as dt
import http.client
import importlib
import ipaddress
import json
import threading
import traceback
import urllib.parse

from django.conf import settings

HTTP_RETRYABLE = {408, 429}


class PermanentError(Exception):
    """Raise from a handler to fail the run now, without further attempts."""


class LeaseLost(Exception):
    """Raised by `ctx.heartbeat()` when the lease was taken away: stop working."""


@dataclasses.dataclass
class Context:
    run_id: int
    job_name: str
    attempt: int
    idempotency_key: str
    fencing_token: int
    payload: object
    due_at: dt.datetime
    _heartbeat: object = None  # callable() -> bool (False: lease lost)
    _lost: threading.Event = dataclasses.field(default_factory=threading.Event)

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


@dataclasses.dataclass(frozen=True)
class Outcome:
    outcome: str  # succeeded | failed | timed_out
    error: str = ""
    retryable: bool = True


_callables = {}


def resolve(dotted):
    """The callable at a dotted path, imported once per process."""
    if dotted not in _callables:
        module, _, name = dotted.rpartition(".")
        _callables[dotted] = getattr(importlib.import_module(module), name)
    return _callables[dotted]


def execute(kind, ref, ctx, timeout_seconds):
    """Run one attempt and classify its result; never raises."""
    try:
        if kind == "python":
            resolve(ref)(ctx)
        elif kind == "http":
            post(ref, ctx, timeout_seconds)
        else:
            return Outcome("failed", f"target kind {kind!r} is not executed by run_worker", retryable=False)
    except PermanentError as exc:
        return Outcome("failed", f"permanent: {exc}", retryable=False)
    except (ImportError, AttributeError) as exc:
        if kind == "python":
            return Outcome("failed", f"cannot import {ref}: {exc}", retryable=True)
        return Outcome("failed", _short_trace(exc))
    except TimeoutError as exc:
        return Outcome("timed_out", f"timed out: {exc}")
    except Exception as exc:  # noqa: BLE001 - a handler's failure is data, not a crash
        return Outcome("failed", _short_trace(exc))
    return Outcome("succeeded")


def _short_trace(exc):
    """The error first (what the portal shows), then the innermost frames."""
    trace = "".join(traceback.format_exception(exc, limit=-3))
    return f"{exc.__class__.__name__}: {exc}\n\n{trace}"[:4000]


class _GuardedMixin:
    """Refuses loopback, private and link-local peers, checked on the connected socket.

    Checking the address actually connected to (not a separate DNS lookup)
    closes the DNS-rebinding gap between check and use.
    """

    def connect(self):
        super().connect()
        peer = ipaddress.ip_address(self.sock.getpeername()[0])
        if not settings.DUETIME_HTTP_ALLOW_PRIVATE and not peer.is_global:
            self.sock.close()
            raise PermanentError(
                f"refused to call {self.host}: it resolves to the non-public address {peer} "
                "(set DUETIME_HTTP_ALLOW_PRIVATE=1 to allow internal targets)"
            )


class GuardedHTTPConnection(_GuardedMixin, http.client.HTTPConnection):
    pass


class GuardedHTTPSConnection(_GuardedMixin, http.client.HTTPSConnection):
    pass


def post(url, ctx, timeout_seconds):
    """POST the payload; 2xx succeeds, 408/429/5xx/timeouts retry, other 4xx are permanent."""
    parts = urllib.parse.urlsplit(url)
    kind = GuardedHTTPSConnection if parts.scheme == "https" else GuardedHTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=min(timeout_seconds, 300))
    body = json.dumps(ctx.payload).encode()
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": ctx.idempotency_key,
        "X-Duetime-Fencing-Token": str(ctx.fencing_token),
        "X-Duetime-Run-Id": str(ctx.run_id),
        "X-Duetime-Attempt": str(ctx.attempt),
        "User-Agent": "Duetime-Worker",
    }
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        text = response.read(2000).decode(errors="replace")
    except TimeoutError as exc:
        raise TimeoutError(f"no answer from {parts.hostname} within {timeout_seconds} s") from exc
    finally:
        conn.close()
    status = response.status
    if 200 <= status < 300:
        return
    message = f"HTTP {status} from {url}: {text[:500]}"
    if status in HTTP_RETRYABLE or status >= 500:
        raise RuntimeError(message)
    raise PermanentError(message)
