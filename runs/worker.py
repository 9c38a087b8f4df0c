"""The worker: claim due runs in batches, execute them, heartbeat, complete.

`Worker.tick()` is one bounded pass: complete what finished (one batched
completion), then claim up to the free slots and hand the leases to a thread
pool, whose threads run the handlers, or with the `processes` pool to idle
child processes (runs.children). A separate heartbeat thread extends the
leases of long runs, tells a handler (`ctx.lease_lost`) when its lease was
taken away, and announces the worker as a consumer of its kinds and queues
(runs.presence; drain() forgets it). The management command `run_worker`
loops over `tick()` and sleeps on a short poll when idle.

If the process dies, nothing is lost: its leases expire and the reaper
retries the runs with the same idempotency key. A database error in the
worker's own bookkeeping is never the handler's failure: a heartbeat that
fails is logged and tried again at the next beat, and a finished attempt stays
in flight (its lease heartbeated) until its completion is committed.
"""

import dataclasses
import logging
import os
import queue
import socket
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from runs import children, claims, presence, targets, transitions
from runs.loop import DATABASE_ERRORS

log = logging.getLogger("duetime.worker")
GATHER_SECONDS = 0.005
CLAIM_WAIT_SECONDS = 0.02  # longest a free slot waits for others to free up before a partial claim
# Where handlers run: threads of this process (soft timeouts), or a child process per slot (runs.children:
# a handler past its timeout is killed, one that crashes takes only its child down).
POOL_THREADS = "threads"
POOL_PROCESSES = "processes"
POOLS = (POOL_THREADS, POOL_PROCESSES)


class SlotThreads:
    """The `threads` pool: up to `size` threads, each running one attempt at a time.

    Leaner than concurrent.futures' executor, which builds a Future (a lock
    and a condition) per task that nothing here reads: a submit is one queue
    put. A thread is started when a submit finds none idle, up to `size`.
    `shutdown` drops what no thread took yet (its lease is released by the
    worker or expires) and lets the running ones finish on their own.

    A slot outlives whatever its task raises (the worker's `_execute` never
    raises; this is the last line): the thread logs it and takes the next
    task. A thread that ended anyway is replaced at the next submit, so the
    pool keeps `size` threads.
    """

    def __init__(self, size):
        self.size = size
        self.tasks = queue.SimpleQueue()
        self.threads = []
        self.busy = 0  # submitted and not finished: never more threads than that are needed
        self.lock = threading.Lock()
        self.closed = False

    def submit(self, fn, *args):
        with self.lock:
            self.busy += 1
            self.threads = [thread for thread in self.threads if thread.is_alive()]
            if self.busy > len(self.threads) and len(self.threads) < self.size:
                thread = threading.Thread(target=self._serve, name=f"duetime-run_{len(self.threads)}", daemon=True)
                self.threads.append(thread)
                thread.start()
        self.tasks.put((fn, args))

    def shutdown(self):
        self.closed = True
        for _ in self.threads:
            self.tasks.put(None)

    def join(self, seconds):
        """Wait up to `seconds` for every thread to end (after shutdown; tests)."""
        deadline = time.monotonic() + seconds
        for thread in self.threads:
            thread.join(max(0, deadline - time.monotonic()))

    def _serve(self):
        while True:
            task = self.tasks.get()
            if task is None or self.closed:
                connection.close()  # this thread's own, if a handler or a heartbeat opened one
                return
            fn, args = task
            try:
                fn(*args)  # the worker's _execute never raises
            except BaseException:  # noqa: BLE001 - the slot must outlive any task; SystemExit included
                log.exception("a worker thread's task raised; the thread carries on")
            finally:
                with self.lock:
                    self.busy -= 1


@dataclasses.dataclass
class TickResult:
    claimed: int = 0
    completed: int = 0
    stale: int = 0
    held: bool = False  # its claim stopped short at a limit (runs.claims.Claimed): claiming again at once is futile


@dataclasses.dataclass
class InFlight:
    lease: transitions.Lease
    ctx: targets.Attempt
    started: float  # time.monotonic() when handed to the pool
    batch: int = 0  # which claim leased it: the runs of one claim start together and finish about together
    outcome: targets.Outcome | None = None  # once the handler returned, until its completion is committed
    completing: bool = False  # its completion is being written: the heartbeat thread leaves it alone


def default_worker_id():
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    def __init__(
        self,
        queues,
        concurrency=10,
        *,
        worker_id=None,
        batch=None,
        lease_seconds=None,
        heartbeat_seconds=None,
        pool=POOL_THREADS,
        only_tenants=None,
        except_tenants=(),
    ):
        self.queues = list(queues)
        # A dedicated pool: tenant ids this worker serves (None: all) and those it never serves.
        self.only_tenants = list(only_tenants) if only_tenants is not None else None
        self.except_tenants = list(except_tenants)
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        self.batch = batch or settings.DUETIME_CLAIM_BATCH
        self.lease_seconds = lease_seconds or settings.DUETIME_LEASE_SECONDS
        self.heartbeat_seconds = heartbeat_seconds or settings.DUETIME_HEARTBEAT_SECONDS
        self.inflight = {}  # run_id -> InFlight; touched by the main thread only
        self.finished = (
            queue.SimpleQueue()
        )  # (run_id, fencing token, targets.Outcome) from pool threads or the child pool
        # Children are forked before this process starts its own threads.
        self.children = children.ChildPool(concurrency, self._finished) if pool == POOL_PROCESSES else None
        self.pool = None if self.children else SlotThreads(concurrency)
        self.pool_name = pool  # announced with the worker: the job page warns about soft timeouts
        self.wakeup = threading.Event()
        self.claiming = True
        self._free_since = None  # time.monotonic() since when a slot is free and unclaimed
        self._held = False  # the last claim stopped short at a limit (a tenant's cap, ...): see should_claim
        self._batches = 0  # claims that leased something, numbering InFlight.batch
        self._stop_heartbeats = threading.Event()
        self._beat_lock = threading.Lock()  # between a heartbeat and the completion of the same attempts
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
        try:
            self._tick(result)
        except BaseException:
            self._completion_failed()
            raise
        return result

    def _tick(self, result):
        with transaction.atomic():
            result.completed, result.stale = self.complete_finished()
            free = self.concurrency - self.busy()
            leases = []
            if self.should_claim(free, freed=result.completed + result.stale):
                self._free_since = None
                leases = claims.claim(
                    self.queues,
                    min(free, self.batch),
                    self.worker_id,
                    lease_seconds=self.lease_seconds,
                    kinds=targets.EXECUTED_KINDS,  # external runs wait for their own consumers
                    only_tenants=self.only_tenants,
                    except_tenants=self.except_tenants,
                )
                self._held = result.held = leases.held
        self._batches += bool(leases)
        (allowances, calls), prefixes = self._allowances(leases), self._task_prefixes(leases)
        for lease in leases:  # only once committed
            self._start(lease, allowances.get(lease.tenant_id), calls.get(lease.job_id), prefixes.get(lease.tenant_id))
        result.claimed = len(leases)
        return result

    def should_claim(self, free, freed=0):
        """True for a whole batch of free slots, for any free slot that has waited CLAIM_WAIT_SECONDS, or at
        once when `freed` completions (this tick's) may have made room under the limit the last claim stopped at.

        Many small claims cost more than one big one, but a long run must never
        idle the other slots: a free slot waits at most CLAIM_WAIT_SECONDS (plus
        the idle poll) for the others to fill a batch. Due work held back by a
        limit (a tenant at its max_concurrent_runs) is the exception: a slot its
        own completion frees is its to take back in the same transaction,
        without waiting for a batch, so a capped tenant keeps its cap busy.
        """
        if not self.claiming or free <= 0:
            self._free_since = None
            return False
        if self._held and freed:
            return True
        now = time.monotonic()
        if self._free_since is None:
            self._free_since = now
        return free >= min(self.batch, self.concurrency) or now - self._free_since >= CLAIM_WAIT_SECONDS

    def busy(self):
        """Slots taken: attempts still running (a finished one frees its slot once its outcome is in)."""
        return sum(1 for item in self.inflight.values() if item.outcome is None)

    def rest(self, result, poll):
        """After a step (run_worker's loop): the next step at once if it claimed (more may be due), else
        wait for a run to finish or `poll` seconds.

        A claim that stopped short at a limit (result.held) claimed all it
        could: the next one waits for a completion here (which may free the
        limit, and is claimed again in its tick: should_claim) or the poll (for
        other workers' completions), instead of finding the same limit full.
        """
        if result.claimed and not result.held:
            return
        self.wait(poll)

    def wait(self, seconds):
        """Sleep until runs finish or `seconds` pass.

        Once one run finishes, give the rest of its batch (the runs its claim
        leased with it) a few milliseconds to finish too, so short runs
        complete in one statement, not one each; runs of other claims, which
        started at other times, are not waited for.
        """
        if self.wakeup.wait(seconds):
            deadline = time.monotonic() + GATHER_SECONDS
            while (left := deadline - time.monotonic()) > 0:
                self.wakeup.clear()  # before looking: a run that finishes after the look sets it again
                if not self._batch_running():
                    break
                self.wakeup.wait(left)
        self.wakeup.clear()

    def _batch_running(self):
        """True while a run leased by the same claim as a finished one is still running."""
        self._collect_outcomes()
        batches = {item.batch for item in self.inflight.values() if item.outcome is not None}
        return any(item.outcome is None and item.batch in batches for item in self.inflight.values())

    def complete_finished(self):
        """One batched completion for every finished attempt; returns (completed, stale).

        The attempts leave `inflight` only once their completion is committed
        (with the caller's transaction): if it fails, the next call reports
        them again, and meanwhile their leases are still heartbeated.
        """
        self._collect_outcomes()
        done = {run_id: item for run_id, item in self.inflight.items() if item.outcome is not None}
        if not done:
            return 0, 0
        completions = [
            transitions.Completion(
                run_id,
                item.lease.fencing_token,
                item.outcome.outcome,
                item.outcome.error,
                item.outcome.retryable,
                item.outcome.return_value,
            )
            for run_id, item in done.items()
        ]
        with self._beat_lock:  # a beat under way ends first; none starts for these until they are done
            for item in done.values():
                item.completing = True
        try:
            moved = transitions.complete_many(completions)
        except BaseException:
            self._completion_failed()
            raise
        transaction.on_commit(lambda: [self.inflight.pop(run_id) for run_id in done])
        stale = [run_id for run_id in done if run_id not in moved]
        if stale:
            log.warning("completion refused as stale (lease lost) for runs %s", stale)
        return len(moved), len(stale)

    def _collect_outcomes(self):
        """Record on each in-flight attempt the outcome its pool thread reported."""
        while True:
            try:
                run_id, token, outcome = self.finished.get_nowait()
            except queue.Empty:
                return
            item = self.inflight.get(run_id)
            if item is None or item.lease.fencing_token != token:
                # An attempt whose lease was lost and whose run this worker leased again meanwhile (a lease
                # given back by after_restore, one that expired in a pause): its outcome is not the new
                # lease's, and its completion would be refused anyway.
                log.warning("run %s: outcome of a lost lease (fencing token %s) dropped", run_id, token)
                continue
            if outcome.outcome != "timed_out" and time.monotonic() - item.started > item.lease.timeout_seconds:
                outcome = targets.Outcome(
                    "timed_out", f"ran longer than timeout_seconds ({item.lease.timeout_seconds})"
                )
            item.outcome = outcome

    # --- execution --------------------------------------------------------
    def _allowances(self, leases):
        """The http targets' tenants' private networks and the jobs' calls (targets.HttpCall) as they are now;
        ({}, {}) if they cannot be read (each call then reads its own: checked when used either way)."""
        try:
            return targets.allowances(leases), targets.http_calls(leases)
        except (*DATABASE_ERRORS, ValueError):
            log.warning("could not read the http targets' networks and calls; each call reads its own", exc_info=True)
            return {}, {}

    def _task_prefixes(self, leases):
        """The python targets' tenants' allowed module prefixes as they are now; {} if they cannot be read
        (each call then reads its own: checked when used either way)."""
        try:
            return targets.task_prefixes(leases)
        except DATABASE_ERRORS:
            log.warning("could not read the tenants' module prefixes; each python call reads its own", exc_info=True)
            return {}

    def _start(self, lease, allowance=None, http=None, task_prefixes=None):
        ctx = targets.Attempt(
            run_id=lease.run_id,
            job_name=lease.job_name,
            attempt=lease.attempt,
            idempotency_key=lease.idempotency_key,
            fencing_token=lease.fencing_token,
            payload=lease.payload,
            args=lease.args,
            due_at=lease.due_at,
            tenant_id=lease.tenant_id,
            allowance=allowance,
            http=http,
            task_prefixes=task_prefixes,
        )
        ctx._heartbeat = lambda: self._extend(lease)
        self.inflight[lease.run_id] = InFlight(lease, ctx, time.monotonic(), batch=self._batches)
        if self.children:
            self.children.submit(lease.target_kind, lease.target_ref, ctx, lease.timeout_seconds)
        else:
            self.pool.submit(self._execute, lease, ctx)

    def _execute(self, lease, ctx):
        """In a pool thread: run the attempt here (the `threads` pool). Always reports an outcome; never raises.

        targets.execute fails the attempt for whatever its handler raised
        (SystemExit, KeyboardInterrupt, GeneratorExit too); should anything
        still escape, the attempt fails with it here rather than staying in
        flight, its lease heartbeated, with no handler left to finish it.
        """
        try:
            outcome = targets.execute(lease.target_kind, lease.target_ref, ctx, lease.timeout_seconds)
        except BaseException as exc:  # noqa: BLE001 - see the docstring
            outcome = targets.Outcome("failed", targets.describe(exc))
        self._finished(lease.run_id, outcome, lease.fencing_token)
        try:
            close_old_connections()  # a connection that broke during the run is not kept for the next one
        except DATABASE_ERRORS:
            log.warning("run %s: closing the thread's database connection failed", lease.run_id, exc_info=True)

    def _finished(self, run_id, outcome, fencing_token):
        """From a pool thread or the child pool's watcher: hand the outcome of the lease `fencing_token` on."""
        self.finished.put((run_id, fencing_token, outcome))
        self.wakeup.set()

    # --- heartbeats -------------------------------------------------------
    def _extend(self, lease):
        """Extend the lease; False once it is lost.

        A database error is not a lost lease: it is logged and the next beat
        tries again, so a handler never fails because Duetime's own
        bookkeeping did (the lease outlasts a few missed beats).
        """
        try:
            transitions.heartbeat(lease.run_id, lease.fencing_token, self.lease_seconds)
        except transitions.StaleLease:
            return False
        except DATABASE_ERRORS as exc:
            log.warning("run %s: heartbeat failed (%s); trying again at the next beat", lease.run_id, exc)
        return True

    def _heartbeat_loop(self):
        """Announce at once, then beat every half interval until the worker stops; no failure ends this thread."""
        announced = None
        period = min(self.heartbeat_seconds / 2, presence.ANNOUNCE_SECONDS)
        while True:
            try:
                if announced is None or time.monotonic() - announced >= presence.ANNOUNCE_SECONDS:
                    presence.announce(self.worker_id, targets.EXECUTED_KINDS, self.queues, pool=self.pool_name)
                    announced = time.monotonic()
                self._beat()
                connection.close()  # hold no connection between beats
            except Exception:  # noqa: BLE001 - a dead heartbeat thread would lose every long run's lease
                log.exception("heartbeat pass failed; trying again at the next beat")
            if self._stop_heartbeats.wait(period):
                return

    def _beat(self):
        interval = self.heartbeat_seconds
        now = time.monotonic()
        for item in list(self.inflight.values()):
            if now - item.started < interval / 2 or item.ctx.lease_lost:
                continue
            if now - item.started > item.lease.timeout_seconds:
                continue  # past its timeout: let the lease run out; the reaper records timed_out
            with self._beat_lock:
                # A run whose completion is being committed would answer "stale" once it is: not a lost lease.
                if item.completing or self._extend(item.lease):
                    continue
            log.warning("run %s: lease lost; telling the handler to stop", item.lease.run_id)
            item.ctx._lost.set()

    def _completion_failed(self):
        """A completion (or the transaction it was in) failed: its attempts are heartbeated again until it lands."""
        with self._beat_lock:
            for item in self.inflight.values():
                item.completing = False

    # --- shutdown ---------------------------------------------------------
    def drain(self, grace_seconds):
        """Stop claiming; finish what runs within the grace, release the rest. Returns released count."""
        self.claiming = False
        deadline = time.monotonic() + grace_seconds
        while self.inflight and time.monotonic() < deadline:
            if self._on_database(self.complete_finished) is None:
                time.sleep(1)  # the database is away: try again until the grace ends
            self.wait(0.05)
        self._on_database(self.complete_finished)
        released = 0
        for run_id, item in list(self.inflight.items()):
            if item.outcome is None:  # still running; a finished attempt counts, so its lease is left to expire
                released += self._on_database(transitions.release, run_id, item.lease.fencing_token) or 0
            item.ctx._lost.set()
        self._stop_heartbeats.set()
        self._heartbeat_thread.join(self.heartbeat_seconds)  # its last announcement must not outlive `forget`
        self._on_database(presence.forget, self.worker_id)
        if self.children:
            self.children.shutdown()
        else:
            self.pool.shutdown()
        return released

    def _on_database(self, step, *args):
        """`step(*args)`, or None after a database error, logged: shutting down goes on without it.

        What is neither completed nor released has its lease expire, and the reaper retries it.
        """
        try:
            return step(*args)
        except DATABASE_ERRORS:
            log.exception("worker %s: %s failed while shutting down", self.worker_id, step.__name__)
            close_old_connections()
            return None
