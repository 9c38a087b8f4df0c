"""The Celery side of the transport: `duetime.execute`, the one task a team's Celery app installs.

    from runs.celery_task import install
    install(app)  # app: the team's Celery app, configured with Duetime's settings

run_dispatcher (runs.dispatcher) publishes one message per claimed attempt;
this task executes it in the team's Celery worker:

1. take the lease over (transitions.start_attempt): once per lease, while its
   fencing token is current; records the Celery worker and task id on the run
   (and so on its attempt) and the real start. A message delivered twice, or
   after its lease expired and was reaped, is dropped here without running;
2. run the registered handler (a celery job names a registered Django task,
   jobs.registry, exactly like a python job: runs.targets calls it with the
   payload and a Context carrying the idempotency key and the fencing token),
   heartbeating while it runs;
3. complete the attempt with the fencing token (transitions.complete_many): a
   stale completion (the lease was reaped while this worker was paused) is
   refused and logged, exactly as for run_worker.

`acks_late` and `reject_on_worker_lost`: a message is acknowledged only once
the task returned, and a worker child that dies puts it back. Celery never
retries (retries are Duetime's retry_wait); the hard time limit is the job's
timeout_seconds (set per message by the dispatcher), and a child killed past it
leaves a lease that the reaper records `timed_out`. No result backend: the
outcome is in Duetime's database.

Django must be set up before the task runs (the worker's Django fixup does
it), not when `install` is called: Duetime's modules are imported inside.
"""

import contextlib
import datetime as dt
import logging
import os
import queue
import re
import signal
import threading
import time

log = logging.getLogger("duetime.celery")
TASK_NAME = "duetime.execute"  # what runs.dispatcher publishes: one run
BATCH_TASK_NAME = "duetime.execute_batch"  # ... several runs of one queue, once a backlog forms
DB_REUSE_MAX = 1000  # tasks a worker process runs on one database connection before it reconnects
OPTIONS = {
    "name": TASK_NAME,
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
    "max_retries": 0,
    "typing": False,
}


# The worker_id a Celery execution records on its run and attempt: "<Celery hostname>/<task id>",
# the task id being the dispatcher's "duetime-<run id>-<fencing token>" (runs.dispatcher.task_id).
# A batch message's task id adds how many more runs it carries: "duetime-<run id>-<fencing token>+<n>".
EXECUTOR_RE = re.compile(r"^(?P<hostname>[^/]+)/(?P<task_id>duetime-\d+-\d+(?:\+\d+)?)$")


def executor(worker_id):
    """(Celery hostname, task id) of a worker_id this task recorded; None for any other worker's."""
    match = EXECUTOR_RE.match(worker_id or "")
    return (match["hostname"], match["task_id"]) if match else None


def install(app):
    """Register duetime.execute on the Celery app `app`; returns the task.

    Also keeps each worker process's database connection across tasks
    (Celery's Django fixup closes it around every task unless
    CELERY_DB_REUSE_MAX says otherwise): a new connection per run costs more
    than the run. A value the app already set is left alone.
    """
    from celery import signals

    if not app.conf.get("CELERY_DB_REUSE_MAX"):
        app.conf.update(CELERY_DB_REUSE_MAX=DB_REUSE_MAX)
    # A worker process that stops (warm shutdown, max tasks per child) first commits what it finished.
    signals.worker_process_shutdown.connect(_completions.flush, weak=False)
    app.task(**{**OPTIONS, "name": BATCH_TASK_NAME})(execute_batch)
    return app.task(**OPTIONS)(execute)


def execute(task, *, run_id, fencing_token, dispatched_by, target_ref, timeout_seconds, **lease):
    """Take the lease over, run the handler, hand the completion over; returns the outcome, or 'stale' (dropped)."""
    from django.conf import settings

    from runs import transitions

    worker_id = f"{task.request.hostname}/{task.request.id}"
    try:
        transitions.start_attempt(
            run_id, fencing_token, worker_id, settings.DUETIME_LEASE_SECONDS, dispatched_by=dispatched_by
        )
    except transitions.StaleLease:
        log.info(
            "run %s: message for fencing token %s dropped (lease reaped or already taken over)", run_id, fencing_token
        )
        return "stale"
    run = {"run_id": run_id, "fencing_token": fencing_token, "target_ref": target_ref, **lease}
    return _run_one(task, run, timeout_seconds)


def execute_batch(task, *, runs, dispatched_by):
    """Take every lease of a batch message over at once, then run them in order (Batch); returns their outcomes."""
    from django.conf import settings

    from runs import targets, transitions

    worker_id = f"{task.request.hostname}/{task.request.id}"
    taken = transitions.start_attempts(
        [(run["run_id"], run["fencing_token"]) for run in runs],
        worker_id,
        settings.DUETIME_LEASE_SECONDS,
        dispatched_by=dispatched_by,
    )
    if len(taken) < len(runs):
        log.info(
            "batch %s: %d of %d runs dropped (reaped, cancelled or already taken over)",
            task.request.id,
            len(runs) - len(taken),
            len(runs),
        )
    runs = [run for run in runs if run["run_id"] in taken]
    # Whose module prefixes each call is checked against, read once for the batch as it starts (a
    # run_worker reads them once per claim), not once per run.
    prefixes = targets.prefixes_of({run["tenant_id"] for run in runs})
    return Batch(task, worker_id, runs, prefixes).run()


def _run_one(task, run, timeout_seconds, task_prefixes=None):
    """Run one taken-over attempt's handler, heartbeating; hand its completion over. Returns its outcome.

    `task_prefixes`: the tenant's allowed module prefixes as read for the batch; None: read at the call.
    """
    from runs import targets, transitions

    run_id, fencing_token = run["run_id"], run["fencing_token"]
    ctx = targets.Attempt(
        run_id=run_id,
        job_name=run["job_name"],
        attempt=run["attempt"],
        idempotency_key=run["idempotency_key"],
        fencing_token=fencing_token,
        payload=run["payload"],
        due_at=dt.datetime.fromisoformat(run["due_at"]),
        # Whose module prefixes the call is checked against (runs.targets.check_allowed, read at the call); a
        # message published before messages carried it names only the run.
        tenant_id=run["tenant_id"] if "tenant_id" in run else _tenant_of(run_id),
        task_prefixes=task_prefixes,
    )
    ctx._heartbeat = lambda: _extend(run_id, fencing_token)
    started = time.monotonic()
    with _heartbeats.beating(ctx):
        # A celery job's target is a registered Django task, run exactly as a python job's.
        outcome = targets.execute("python", run["target_ref"], ctx, timeout_seconds)
    if outcome.outcome != "timed_out" and time.monotonic() - started > timeout_seconds:
        outcome = targets.Outcome("timed_out", f"ran longer than timeout_seconds ({timeout_seconds})")
    completion = transitions.Completion(
        run_id, fencing_token, outcome.outcome, outcome.error, outcome.retryable, outcome.return_value
    )
    if task.request.is_eager:  # called in process (apply): complete now, in the caller's transaction
        return complete([completion]).get(run_id, "stale")
    _completions.put(completion)  # completed in a batch by this process's completion thread
    return outcome.outcome


# A run of a batch whose turn comes more than this long after its take-over (or its last stamp) is stamped
# again as it starts: its start (so its lateness) and its lease count from then, and a run cancelled or
# reaped while it waited is skipped. Within it, the take-over's start stands: a handful of short runs.
RESTAMP_SECONDS = 0.05
GIVEN_BACK = "released: an earlier run of its Celery batch ran past its timeout; claimable again"


class Batch:
    """The runs of one duetime.execute_batch message, taken over together and run one after another.

    A keeper thread watches the batch while it runs. It keeps the runs that
    wait their turn leased (stamped again before their lease could lapse),
    and if the run in hand passes its timeout_seconds it gives the runs after
    it back at once (transitions.release: claimable again, attempt
    uncounted, for another message), hands over the completions already
    made, and ends this worker process, as Celery's hard time limit ends the
    child of a single run's message; the run past its timeout keeps a lease
    that ends at its start + timeout, and the reaper records it `timed_out`.
    """

    def __init__(self, task, worker_id, runs, prefixes):
        self.task, self.worker_id = task, worker_id
        self.runs = runs
        self.prefixes = prefixes  # {tenant id: allowed module prefixes}, read as the batch started
        self.next = 0  # index of the run in hand (or the next one)
        self.stamped = time.monotonic()  # when the waiting runs' leases were last set
        self.deadline = None  # time.monotonic() past which the run in hand has overrun
        self.done = False
        self.wake = 0.0  # time.monotonic() the keeper sleeps until
        self.cond = threading.Condition()

    def run(self):
        from django.conf import settings

        from runs import transitions

        outcomes = {}
        eager = self.task.request.is_eager
        if not eager and self.runs:
            threading.Thread(target=self._keep, name="duetime-celery-batch", daemon=True).start()
        try:
            for index, run in enumerate(self.runs):
                with self.cond:
                    if self.done:
                        break
                    self.next = index
                if time.monotonic() - self.stamped > RESTAMP_SECONDS:
                    pair = [(run["run_id"], run["fencing_token"])]
                    lease = settings.DUETIME_LEASE_SECONDS
                    if not transitions.start_attempts(pair, self.worker_id, lease, dispatched_by=self.worker_id):
                        log.info("run %s: skipped in its batch (cancelled or reaped while it waited)", run["run_id"])
                        outcomes[run["run_id"]] = "stale"
                        continue
                with self.cond:
                    self.deadline = time.monotonic() + run["timeout_seconds"]
                    if self.deadline < self.wake:  # the keeper sleeps past it: wake it (rarely: timeouts vary)
                        self.cond.notify()
                prefixes = self.prefixes.get(run["tenant_id"], ())
                outcomes[run["run_id"]] = _run_one(self.task, run, run["timeout_seconds"], prefixes)
                with self.cond:
                    self.deadline = None
        finally:
            with self.cond:
                self.done = True
                self.cond.notify()
        return outcomes

    def waiting(self):
        """The runs after the one in hand (call with the condition held)."""
        return self.runs[self.next + 1 :] if self.deadline is not None else self.runs[self.next :]

    def _keep(self):
        from django.conf import settings
        from django.db import connection

        lease = settings.DUETIME_LEASE_SECONDS
        try:
            while True:
                with self.cond:
                    if self.done:
                        return
                    waiting = self.waiting()
                    # Stamp the waiting runs when half of their shortest lease is gone.
                    restamp = self.stamped + min((min(lease, r["timeout_seconds"]) for r in waiting), default=lease) / 2
                    wake = min(restamp, self.deadline) if self.deadline is not None else restamp
                    left = wake - time.monotonic()
                    if left > 0:
                        self.wake = wake
                        self.cond.wait(left)
                        continue
                    overrun = self.deadline is not None and time.monotonic() >= self.deadline
                    if overrun:
                        self.done = True
                    pairs = [(r["run_id"], r["fencing_token"]) for r in waiting]
                    self.stamped = time.monotonic()
                if overrun:
                    self._give_back(pairs)
                    return
                if pairs:
                    self._stamp(pairs, lease)
        finally:
            connection.close()

    def _stamp(self, pairs, lease):
        from runs import transitions
        from runs.loop import DATABASE_ERRORS

        try:
            transitions.start_attempts(pairs, self.worker_id, lease, dispatched_by=self.worker_id)
        except DATABASE_ERRORS as exc:
            log.warning("batch %s: keeping %d waiting runs leased failed (%s)", self.worker_id, len(pairs), exc)

    def _give_back(self, pairs):
        """The run in hand overran: release the rest, commit what finished, end this process (see the class)."""
        from runs import transitions

        run = self.runs[self.next]
        log.warning(
            "run %s ran past its timeout_seconds (%s) in batch %s: giving its %d later runs back and ending "
            "this worker process",
            run["run_id"],
            run["timeout_seconds"],
            self.worker_id,
            len(pairs),
        )
        try:
            for run_id, token in pairs:
                transitions.release(run_id, token, why=GIVEN_BACK, held_by=self.worker_id)
        except Exception:  # noqa: BLE001 - what was not given back keeps a lease that expires: the reaper retries it
            log.exception("batch %s: giving runs back failed; their leases expire instead", self.worker_id)
        _completions.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _tenant_of(run_id):
    from runs.models import Run

    return Run.objects.filter(pk=run_id).values_list("tenant_id", flat=True).first()


def complete(completions):
    """Complete these attempts in one transaction; returns {run_id: new state}. Stale ones are logged, not moved."""
    from runs import transitions

    moved = transitions.complete_many(completions)
    for c in completions:
        if c.run_id not in moved:
            log.warning("run %s: completion refused as stale (fencing token %s; lease lost)", c.run_id, c.fencing_token)
    return moved


# After a completion arrives, the completion thread sleeps this long so that those of the next runs share
# its statement and commit (a busy child finishes a run every few ms): a run's end is recorded that much
# later at most, and the database completes batches instead of single runs (0.35 ms of statement each).
COMPLETION_LINGER = 0.02
COMPLETION_BATCH = 100  # most completions in one statement


class Completions:
    """One thread per worker process that completes finished attempts in batches, one transaction each.

    A task hands its completion over and returns, so the worker child takes
    its next message at once, and one commit (one WAL flush) serves every
    attempt that finished within COMPLETION_LINGER: about 0.1 ms a run instead of 4 ms. The
    message is acknowledged before its completion commits: if the process
    dies in between (or the database refuses the batch), the run's lease
    expires and the reaper retries it under the same key, exactly as for a
    worker that crashed before reporting. `flush` waits for what was handed
    over (the worker process's shutdown calls it).
    """

    def __init__(self):
        self.pending = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = threading.Event()
        self.pid = None

    def put(self, completion):
        with self.lock:
            if self.pid != os.getpid():  # first use in this process: a prefork child never inherits threads
                self.pid = os.getpid()
                self.pending = queue.SimpleQueue()
                threading.Thread(target=self._loop, name="duetime-celery-completions", daemon=True).start()
            self.idle.clear()
            self.pending.put(completion)

    def flush(self, timeout=10, **signal_kwargs):
        """Wait up to `timeout` seconds until every completion handed over is committed (or refused)."""
        if self.pid == os.getpid():
            self.idle.wait(timeout)

    def _loop(self):
        from runs.loop import DATABASE_ERRORS

        while True:
            batch = [self.pending.get()]
            # Asleep, not waiting on the queue: a wait would wake this thread (and take the
            # interpreter from the task) at every completion handed over meanwhile.
            time.sleep(COMPLETION_LINGER)
            while len(batch) < COMPLETION_BATCH:
                try:
                    batch.append(self.pending.get_nowait())
                except queue.Empty:
                    break
            try:
                complete(batch)
            except DATABASE_ERRORS:
                log.exception("completing %d runs failed; their leases expire and the reaper retries them", len(batch))
            except Exception:  # noqa: BLE001 - this thread must outlive any one batch
                log.exception("completing %d runs failed", len(batch))
            with self.lock:
                if self.pending.empty():
                    self.idle.set()


_completions = Completions()


def _extend(run_id, fencing_token):
    """Extend the lease; False once it is lost (a database error is not a lost lease: tried at the next beat)."""
    from django.conf import settings

    from runs import transitions
    from runs.loop import DATABASE_ERRORS

    try:
        transitions.heartbeat(run_id, fencing_token, settings.DUETIME_LEASE_SECONDS)
    except transitions.StaleLease:
        return False
    except DATABASE_ERRORS as exc:
        log.warning("run %s: heartbeat failed (%s); trying again at the next beat", run_id, exc)
    return True


class Heartbeats:
    """One heartbeat thread per worker process, beating every half interval for the attempts running in it.

    Started on first use in each process (a prefork child never inherits its
    parent's threads); it holds no database connection between beats.
    """

    def __init__(self):
        self.running = {}  # id(ctx) -> (ctx, time.monotonic() at start)
        self.lock = threading.Lock()
        self.pid = None

    @contextlib.contextmanager
    def beating(self, ctx):
        self.start(ctx)
        try:
            yield
        finally:
            with self.lock:
                self.running.pop(id(ctx), None)

    def start(self, ctx):
        with self.lock:
            self.running[id(ctx)] = (ctx, time.monotonic())
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._loop, name="duetime-celery-heartbeat", daemon=True).start()

    def _loop(self):
        from django.conf import settings
        from django.db import connection

        interval = settings.DUETIME_HEARTBEAT_SECONDS
        while True:
            time.sleep(interval / 2)
            with self.lock:
                due = [ctx for ctx, started in self.running.values() if time.monotonic() - started >= interval / 2]
            try:
                for ctx in due:
                    if not ctx.lease_lost and not _extend(ctx.run_id, ctx.fencing_token):
                        log.warning("run %s: lease lost; telling the handler to stop", ctx.run_id)
                        ctx._lost.set()
                connection.close()
            except Exception:  # noqa: BLE001 - a dead heartbeat thread would lose every long run's lease
                log.exception("heartbeat pass failed; trying again at the next beat")


_heartbeats = Heartbeats()
