"""Handlers in child processes: run_worker's `processes` pool, with hard timeouts.

Each slot of the worker owns one long-lived child, forked so that it starts
at once with the parent's imports. The pool thread of the slot hands its
child one attempt over a pipe and waits for the outcome. A child still busy
at the attempt's `timeout_seconds` gets SIGTERM, then SIGKILL after
KILL_GRACE_SECONDS; the attempt is `timed_out` and the slot gets a fresh
child. A child that dies (a segfault, `os._exit`) fails its attempt, which
is retried by policy; the worker carries on.

In a child, `context.heartbeat()` does not touch the database: the worker
extends every lease it holds anyway. It raises LeaseLost, and
`context.lease_lost` turns true, once the worker has seen the lease refused
(a flag shared with the child).
"""

import dataclasses
import multiprocessing
import os
import queue
import signal
import time
import warnings

from asgiref.local import Local
from django.db import connections

from runs import targets

KILL_GRACE_SECONDS = 2
WATCH_SECONDS = 0.1  # how often a waiting thread passes a lost lease on to its child
ORPHAN_CHECK_SECONDS = 1  # how often an idle child checks that its worker is still alive

_fork = multiprocessing.get_context("fork")


class ChildPool:
    """`size` children; `execute` runs one attempt in an idle one (one pool thread per child at a time)."""

    def __init__(self, size):
        self.idle = queue.SimpleQueue()
        self.closed = False
        self.children = [Child() for _ in range(size)]
        for child in self.children:
            self.idle.put(child)

    def execute(self, kind, ref, attempt, timeout_seconds):
        """The attempt's targets.Outcome; never raises. A child that did not survive is replaced."""
        child = self.idle.get()
        try:
            return child.run(kind, ref, attempt, timeout_seconds)
        finally:
            if not child.alive and not self.closed:
                self.children.remove(child)
                child = Child()
                self.children.append(child)
            self.idle.put(child)

    def shutdown(self):
        """Stop every child (what still runs is killed: its lease was released or will expire)."""
        self.closed = True
        for child in list(self.children):
            child.stop()


class Child:
    def __init__(self):
        self.lost = SharedFlag()
        self.conn, child_end = _fork.Pipe()
        self.process = _fork.Process(target=_serve, args=(child_end, self.lost), name="duetime-child", daemon=True)
        with warnings.catch_warnings():
            # Forking a threaded process: the child runs only `_serve`, on fresh database connections,
            # and the locks it may meet (logging's, import's) are reinitialised by Python at fork.
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            self.process.start()
        child_end.close()

    @property
    def alive(self):
        return self.process.is_alive()

    def run(self, kind, ref, attempt, timeout_seconds):
        """Send one attempt and wait for its Outcome, killing the child at the timeout."""
        self.lost.clear()
        fields = {f.name: getattr(attempt, f.name) for f in dataclasses.fields(attempt) if not f.name.startswith("_")}
        deadline = time.monotonic() + timeout_seconds
        try:
            self.conn.send((kind, ref, fields, timeout_seconds))
            while time.monotonic() < deadline:
                if attempt.lease_lost:
                    self.lost.set()
                if self.conn.poll(min(deadline - time.monotonic(), WATCH_SECONDS)):
                    return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(KILL_GRACE_SECONDS)
            self.stop()
            code = self.process.exitcode
            return targets.Outcome("failed", f"the handler's process died (exit code {code}) before returning")
        self.stop()
        return targets.Outcome("timed_out", f"killed: ran longer than timeout_seconds ({timeout_seconds})")

    def stop(self):
        """SIGTERM, then SIGKILL if the child is still there after the grace."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(KILL_GRACE_SECONDS)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


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
            kind, ref, fields, timeout_seconds = conn.recv()
        except EOFError:
            return
        attempt = targets.Attempt(**fields, _lost=lost)
        conn.send(targets.execute(kind, ref, attempt, timeout_seconds))


def _forget_inherited_connections():
    """Drop the database connections copied from the worker, without closing them.

    Closing would end the worker's own sessions (SQLite aside, they share the
    socket); psycopg leaves a connection made in another process alone when
    it is collected. A task that uses the ORM opens its own connection.
    """
    connections._connections = Local(connections.thread_critical)
