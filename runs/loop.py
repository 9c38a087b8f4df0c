"""The loop of the long-running commands (run_scheduler, run_worker): one skeleton for both.

A command owns its step (`tick() -> result`), says how to wait after a step
(`rest`) and when one step is enough (`done`, for `--once`); this loop owns
the rest: SIGTERM/SIGINT finish the current step, then the loop ends (the
command cleans up and exits 0); a database error is logged and the step
tried again a second later on a fresh connection (every step is safe to
repeat: nothing of a failed step was committed).
"""

import signal
import threading

from django.db import DatabaseError, InterfaceError, close_old_connections

RETRY_SECONDS = 1
# What a lost or failed-over database raises (InterfaceError: a connection already closed).
DATABASE_ERRORS = (DatabaseError, InterfaceError)


class GracefulStop:
    """SIGTERM and SIGINT set a flag that the loop checks between steps."""

    def __init__(self):
        self.event = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.event.set()

    @property
    def requested(self):
        return self.event.is_set()

    def sleep(self, seconds):
        """Sleep, waking at once when a stop is requested."""
        self.event.wait(seconds)


def run_loop(tick, *, rest, done=lambda result: False, stop, log, name):
    """Call `tick()` until `stop` is requested or `done(result)` says so; returns how many steps ran.

    After each step `rest(result)` waits (or not: a busy step returns at
    once). A database error (the database went away or failed over) is logged
    as "<name>: tick failed; retrying in 1 s", the connection is dropped and
    the step runs again after RETRY_SECONDS.
    """
    steps = 0
    while not stop.requested:
        try:
            result = tick()
        except DATABASE_ERRORS:
            log.exception("%s: tick failed; retrying in %d s", name, RETRY_SECONDS)
            close_old_connections()
            stop.sleep(RETRY_SECONDS)
            continue
        steps += 1
        if done(result):
            break
        rest(result)
    return steps
