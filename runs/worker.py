"""The worker: claim due runs in batches, execute them, heartbeat, complete.

`Worker.tick()` is one bounded pass: complete what finished (one batched
completion), then claim up to the free slots and hand the leases to a thread
pool. A separate heartbeat thread extends the leases of long runs and tells
a handler (`ctx.lease_lost`) when its lease was taken away. The management
command `run_worker` loops over `tick()` and sleeps on a short poll when idle.

If the process dies, nothing is lost: its leases expire and the reaper
retries the runs with the same idempotency key.
"""

import dataclasses
import logging
import os
import queue
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from runs import claims, targets, transitions

log = logging.getLogger("duetime.worker")
GATHER_SECONDS = 0.005


@dataclasses.dataclass
class TickResult:
    claimed: int = 0
    completed: int = 0
    stale: int = 0


@dataclasses.dataclass
class InFlight:
    lease: transitions.Lease
    ctx: targets.Context
    started: float  # time.monotonic() when handed to the pool


def default_worker_id():
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    def __init__(
        self, queues, concurrency=10, *, worker_id=None, batch=None, lease_seconds=None, heartbeat_seconds=None
    ):
        self.queues = list(queues)
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        self.batch = batch or settings.DUETIME_CLAIM_BATCH
        self.lease_seconds = lease_seconds or settings.DUETIME_LEASE_SECONDS
        self.heartbeat_seconds = heartbeat_seconds or settings.DUETIME_HEARTBEAT_SECONDS
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="duetime-run")
        self.inflight = {}  # run_id -> InFlight; touched by the main thread only
        self.finished = queue.SimpleQueue()  # (run_id, targets.Outcome) from pool threads
        self.wakeup = threading.Event()
        self.claiming = True
        self._stop_heartbeats = threading.Event()
        self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, name="duetime-heartbeat", daemon=True)
        self._heartbeat_thread.start()

    # --- the step -------------------------------------------------------
    def tick(self):
        """Complete what finished, then claim up to the free slots. Returns what it did.

        Both happen in one transaction: one commit (one WAL flush) per batch
        instead of two. If it fails, nothing of it happened: the finished
        runs' leases expire and the reaper retries them (at least once).
        """
        result = TickResult()
        with transaction.atomic():
            result.completed, result.stale = self.complete_finished()
            free = self.concurrency - len(self.inflight)
            # Claim whole batches: many small claims cost more than one big one.
            leases = []
            if self.claiming and free > 0 and (free >= self.batch or not self.inflight):
                leases = claims.claim(
                    self.queues, min(free, self.batch), self.worker_id, lease_seconds=self.lease_seconds
                )
        for lease in leases:  # only once committed
            self._start(lease)
        result.claimed = len(leases)
        return result

    def wait(self, seconds):
        """Sleep until runs finish or `seconds` pass.

        Once one run finishes, give the rest of its batch a few milliseconds
        to finish too, so short runs complete in one statement, not one each.
        """
        if self.wakeup.wait(seconds):
            deadline = time.monotonic() + GATHER_SECONDS
            while self.finished.qsize() < len(self.inflight) and time.monotonic() < deadline:
                time.sleep(GATHER_SECONDS / 10)
        self.wakeup.clear()

    def complete_finished(self):
        """One batched completion for every finished attempt; returns (completed, stale)."""
        done = []
        while True:
            try:
                done.append(self.finished.get_nowait())
            except queue.Empty:
                break
        if not done:
            return 0, 0
        completions = []
        for run_id, outcome in done:
            item = self.inflight.pop(run_id)
            if outcome.outcome != "timed_out" and time.monotonic() - item.started > item.lease.timeout_seconds:
                outcome = targets.Outcome(
                    "timed_out", f"ran longer than timeout_seconds ({item.lease.timeout_seconds})"
                )
            completions.append(
                transitions.Completion(
                    run_id, item.lease.fencing_token, outcome.outcome, outcome.error, outcome.retryable
                )
            )
        moved = transitions.complete_many(completions)
        stale = [c.run_id for c in completions if c.run_id not in moved]
        if stale:
            log.warning("completion refused as stale (lease lost) for runs %s", stale)
        return len(moved), len(stale)

    # --- execution --------------------------------------------------------
    def _start(self, lease):
        ctx = targets.Context(
            run_id=lease.run_id,
            job_name=lease.job_name,
            attempt=lease.attempt,
            idempotency_key=lease.idempotency_key,
            fencing_token=lease.fencing_token,
            payload=lease.payload,
            due_at=lease.due_at,
        )
        ctx._heartbeat = lambda: self._extend(lease)
        self.inflight[lease.run_id] = InFlight(lease, ctx, time.monotonic())
        self.pool.submit(self._execute, lease, ctx)

    def _execute(self, lease, ctx):
        try:
            outcome = targets.execute(lease.target_kind, lease.target_ref, ctx, lease.timeout_seconds)
        finally:
            close_old_connections()
        self.finished.put((lease.run_id, outcome))
        self.wakeup.set()

    # --- heartbeats -------------------------------------------------------
    def _extend(self, lease):
        try:
            transitions.heartbeat(lease.run_id, lease.fencing_token, self.lease_seconds)
            return True
        except transitions.StaleLease:
            return False

    def _heartbeat_loop(self):
        interval = self.heartbeat_seconds
        while not self._stop_heartbeats.wait(interval / 2):
            now = time.monotonic()
            for item in list(self.inflight.values()):
                if now - item.started < interval / 2 or item.ctx.lease_lost:
                    continue
                if now - item.started > item.lease.timeout_seconds:
                    continue  # past its timeout: let the lease run out; the reaper records timed_out
                if not self._extend(item.lease):
                    log.warning("run %s: lease lost; telling the handler to stop", item.lease.run_id)
                    item.ctx._lost.set()
            connection.close()

    # --- shutdown ---------------------------------------------------------
    def drain(self, grace_seconds):
        """Stop claiming; finish what runs within the grace, release the rest. Returns released count."""
        self.claiming = False
        deadline = time.monotonic() + grace_seconds
        while self.inflight and time.monotonic() < deadline:
            self.complete_finished()
            self.wait(0.05)
        self.complete_finished()
        released = 0
        for run_id, item in list(self.inflight.items()):
            released += transitions.release(run_id, item.lease.fencing_token)
            item.ctx._lost.set()
        self._stop_heartbeats.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        return released
