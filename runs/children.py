"""Handlers in child processes: run_worker's `processes` pool, with hard timeouts.

The pool forks one long-lived child per slot, so that each starts at once
with the parent's imports, and keeps a pipe to each. `submit` (called by the
worker's own thread) sends an attempt straight to an idle child, most
recently idle first; the pool's watcher thread waits on all the pipes at once
(epoll), and hands each outcome as it comes to `on_outcome(run_id, Outcome, fencing_token)`.
No thread waits on one child: a run costs one message each way.

A child holds one attempt at a time, so a long run delays nothing else.
Every WATCH_SECONDS the watcher looks at the busy children: one still busy at
its attempt's `timeout_seconds` gets SIGTERM, then SIGKILL after
KILL_GRACE_SECONDS; once it is gone its attempt is `timed_out` (unless its
outcome arrived first) and a fresh child takes its place. A child that dies
(a segfault, `os._exit`) fails its attempt, which is retried by policy. The
children share nothing that a kill could leave locked, so no other attempt
is affected.

In a child, `context.heartbeat()` does not touch the database: the worker
extends every lease it holds anyway. It raises LeaseLost, and
`context.lease_lost` turns true, once the worker has seen the lease refused
(a flag shared with the child).
"""

import dataclasses
import gc
import logging
import multiprocessing
import os
import pickle
import selectors
import signal
import threading
import time
import warnings

from asgiref.local import Local
from django.db import connections

from runs import targets

KILL_GRACE_SECONDS = 2
WATCH_SECONDS = 0.1  # how often the watcher checks timeouts and lost leases
ORPHAN_CHECK_SECONDS = 1  # how often an idle child checks that its worker is still alive

log = logging.getLogger("duetime.worker")
_fork = multiprocessing.get_context("fork")


@dataclasses.dataclass
class Busy:
    """The attempt a child holds, from `submit` until its outcome is reported."""

    attempt: targets.Attempt
    timeout_seconds: float
    deadline: float  # time.monotonic() at which the child is killed


class ChildPool:
    """`size` children; each outcome goes to `on_outcome(run_id, targets.Outcome, fencing_token)`, from the watcher thread.

    `submit` never blocks for long and never raises. The worker submits at
    most as many attempts as it has slots; one that finds no idle child (its
    child is being replaced) waits in `backlog` for the next to come free.
    """

    def __init__(self, size, on_outcome):
        self.on_outcome = on_outcome
        self.closed = False
        self.lock = threading.Lock()  # guards idle, backlog and each child's `busy`
        self.selector = selectors.DefaultSelector()
        self.children = []
        self.idle = []  # a stack: the most recently idle child (warmest caches) is used first
        self.backlog = []  # (kind, ref, attempt, timeout_seconds) submitted while no child was idle
        self._add(Child())
        # The others are forked by the watcher, each serving as soon as it is up: the worker starts
        # claiming at once instead of after `size` forks (seconds for hundreds of slots on a busy host).
        self._watcher = threading.Thread(target=self._watch, args=(size - 1,), name="duetime-children", daemon=True)
        self._watcher.start()

    def submit(self, kind, ref, attempt, timeout_seconds):
        """Hand one attempt (a targets.Attempt) to an idle child."""
        with self.lock:
            if not self.idle:
                self.backlog.append((kind, ref, attempt, timeout_seconds))
                return
            child = self.idle.pop()
            child.busy = Busy(attempt, timeout_seconds, time.monotonic() + timeout_seconds)
        child.send(kind, ref, attempt, timeout_seconds)

    def shutdown(self):
        """Stop every child (what still runs is killed: its lease was released or will expire)."""
        self.closed = True
        self._watcher.join(KILL_GRACE_SECONDS + 1)  # it may be replacing a child that just died
        children = list(self.children)
        for child in children:
            child.terminate()
        for child in children:
            child.close(KILL_GRACE_SECONDS)
        self.selector.close()

    def _add(self, child):
        self.children.append(child)
        self.selector.register(child.conn, selectors.EVENT_READ, child)
        with self.lock:
            self.idle.append(child)
        self._dispatch_backlog()

    def _dispatch_backlog(self):
        while True:
            with self.lock:
                if not (self.backlog and self.idle):
                    return
                kind, ref, attempt, timeout_seconds = self.backlog.pop(0)
            self.submit(kind, ref, attempt, timeout_seconds)

    # --- the watcher --------------------------------------------------------
    def _watch(self, to_fork):
        """Fork `to_fork` more children; then report outcomes as they come and, every WATCH_SECONDS,
        look after the busy children."""
        for _ in range(to_fork):
            if self.closed:
                return
            self._add(Child())
        next_check = time.monotonic() + WATCH_SECONDS
        while not self.closed:
            try:
                wait = next_check - time.monotonic()
                if wait > 0:
                    for key, _ in self.selector.select(wait):
                        self._receive(key.data)
                    continue
                self._look_after_children(time.monotonic())
            except Exception:  # noqa: BLE001 - a dead watcher would strand every attempt
                log.exception("the process pool's watcher failed; carrying on")
            next_check = time.monotonic() + WATCH_SECONDS

    def _receive(self, child):
        """Report what `child` sent; a child whose pipe ended is replaced."""
        try:
            run_id, outcome = _loads(child.conn.recv_bytes())
        except (EOFError, OSError):
            self._replace(child)
            return
        self._finish(child, run_id, outcome)
        if child.killed_at is not None:
            return  # it returned just as it was being killed: it ends, and the watcher replaces it
        with self.lock:
            self.idle.append(child)
        self._dispatch_backlog()

    def _finish(self, child, run_id, outcome):
        """Report the outcome of the attempt `child` holds, once."""
        with self.lock:
            busy, child.busy = child.busy, None
        if busy is not None and busy.attempt.run_id == run_id:
            self.on_outcome(run_id, outcome, busy.attempt.fencing_token)

    def _look_after_children(self, now):
        """Pass lost leases on; SIGTERM a child past its attempt's timeout, SIGKILL it after the grace."""
        for child in list(self.children):
            busy = child.busy
            if child.killed_at is not None:
                if not child.alive() or now - child.killed_at >= KILL_GRACE_SECONDS:
                    self._replace(child)
            elif busy is None:
                continue
            elif now >= busy.deadline:
                child.killed_at = now
                child.terminate()
            elif busy.attempt.lease_lost:
                child.lost.set()

    def _replace(self, child):
        """Put a fresh child in the place of `child` (gone or past its grace); report its attempt if it held one.

        An outcome it sent before it went wins; otherwise its attempt timed
        out (it was killed) or failed (it died).
        """
        self.selector.unregister(child.conn)
        self.children.remove(child)
        busy = child.busy
        sent = child.close(0 if child.killed_at is not None else KILL_GRACE_SECONDS)  # its pipe ended: it is exiting
        if sent is not None:
            self._finish(child, *sent)
        elif busy is not None and child.killed_at is not None:
            error = f"killed: ran longer than timeout_seconds ({busy.timeout_seconds})"
            self._finish(child, busy.attempt.run_id, targets.Outcome("timed_out", error))
        elif busy is not None:
            error = f"the handler's process died (exit code {child.exit_code}) before returning"
            self._finish(child, busy.attempt.run_id, targets.Outcome("failed", error))
        if not self.closed:
            self._add(Child())


class Child:
    def __init__(self):
        self.busy = None  # a Busy while it holds an attempt
        self.killed_at = None  # time.monotonic() of the SIGTERM, once past its attempt's timeout
        self.exit_code = None  # once closed
        self.lost = SharedFlag()
        self.conn, child_end = _fork.Pipe()
        self.process = _fork.Process(target=_serve, args=(child_end, self.lost), name="duetime-child", daemon=True)
        with warnings.catch_warnings():
            # Forking a threaded process: the child runs only `_serve`, on fresh database connections,
            # and the locks it may meet (logging's, import's) are reinitialised by Python at fork.
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            # The child's copy of every object the worker has is frozen: its garbage collector never
            # walks them, so it never writes to (and so copies) the pages they share with the worker.
            gc.freeze()
            try:
                self.process.start()
            finally:
                gc.unfreeze()
        child_end.close()

    def send(self, kind, ref, attempt, timeout_seconds):
        """Send one attempt; a broken pipe is left to the watcher, which sees the child gone."""
        self.lost.clear()
        message = (
            kind,
            ref,
            timeout_seconds,
            attempt.run_id,
            attempt.job_name,
            attempt.attempt,
            attempt.idempotency_key,
            attempt.fencing_token,
            attempt.payload,
            attempt.args,
            attempt.due_at,
            attempt.tenant_id,
            attempt.allowance,
            attempt.http,
            attempt.task_prefixes,
        )
        try:
            self.conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        except OSError:
            pass

    def alive(self):
        return self.process.is_alive()

    def terminate(self):
        if self.process.is_alive():
            self.process.terminate()

    def close(self, grace):
        """End the child (SIGKILL after `grace` seconds); returns the (run_id, Outcome) it sent last, if unread."""
        self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.exit_code = self.process.exitcode
        outcome = None
        try:
            while self.conn.poll(0):
                outcome = _loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            pass
        self.conn.close()
        self.process.close()
        return outcome


class SharedFlag:
    """A flag shared with a child, with threading.Event's is_set/set/clear; unlocked: one writer at a time."""

    def __init__(self):
        self.value = _fork.RawValue("b", 0)  # a byte of shared memory: no lock, no system call

    def is_set(self):
        return bool(self.value.value)

    def set(self):
        self.value.value = 1

    def clear(self):
        self.value.value = 0


def _serve(conn, lost):
    """The child's loop: one attempt at a time until the worker goes away."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the worker's graceful stop: SIGTERM ends a child
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the worker decides
    _forget_inherited_connections()
    parent = os.getppid()
    while os.getppid() == parent:  # a child whose worker was killed exits instead of idling for ever
        if not conn.poll(ORPHAN_CHECK_SECONDS):
            continue
        try:
            (
                kind,
                ref,
                timeout_seconds,
                run_id,
                job_name,
                attempt,
                key,
                token,
                payload,
                args,
                due_at,
                tenant_id,
                allowance,
                http,
                prefixes,
            ) = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        run = targets.Attempt(
            run_id=run_id,
            job_name=job_name,
            attempt=attempt,
            idempotency_key=key,
            fencing_token=token,
            payload=payload,
            args=args,
            due_at=due_at,
            tenant_id=tenant_id,
            allowance=allowance,
            http=http,
            task_prefixes=prefixes,
            _lost=lost,
        )
        outcome = targets.execute(kind, ref, run, timeout_seconds)
        reply = (run_id, outcome.outcome, outcome.error, outcome.retryable, outcome.return_value)
        conn.send_bytes(pickle.dumps(reply, pickle.HIGHEST_PROTOCOL))


def _loads(message):
    """(run_id, targets.Outcome) from a child's reply: plain values, pickled by `pickle` itself (the
    multiprocessing pickler copies its reducer table on every message)."""
    run_id, outcome, error, retryable, return_value = pickle.loads(message)
    return run_id, targets.Outcome(outcome, error, retryable, return_value)


def _forget_inherited_connections():
    """Drop the database connections copied from the worker, without closing them.

    Closing would end the worker's own sessions (SQLite aside, they share the
    socket); psycopg leaves a connection made in another process alone when
    it is collected. A task that uses the ORM opens its own connection.
    """
    connections._connections = Local(connections.thread_critical)
