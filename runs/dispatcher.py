"""run_dispatcher's step: claim due `celery` runs and publish them as Celery messages.

Celery is the transport only: it carries "execute this claimed attempt now"
to a team's Celery workers, and never a delay. `Dispatcher.tick()` claims
through the one claim path (runs.claims: leases, fencing tokens, priorities,
fair share, caps, overlap policies), so a run is published only once it is
due, then publishes the batch to the queue each job names, one message per
lease while the Celery workers can take each run as it comes, or several
runs of one queue per message once a backlog forms (`pack`), with no `eta`,
no `countdown` and no Celery retries (a failed attempt
comes back through Duetime's `retry_wait`). On RabbitMQ the batch counts as
published only once the broker confirmed every message of it (publisher
confirms, one wait per batch: `Confirms`), so the next batch is claimed
only after this one is safely in the broker.

Nothing is lost if a step fails halfway: the claim is committed before the
first publish (a worker that starts a message before its lease is committed
would find nothing to take over); a run whose publish failed is released
(runs.transitions.release: claimable again, its attempt not counted); and a
run the dispatcher could not release, or whose message the broker lost,
keeps a lease that expires, so the reaper retries it with the same
idempotency key. A message delivered twice, or after its lease was reaped,
is refused by the task (runs.celery_task, transitions.start_attempt).

The backlog stays in Duetime: a dispatcher keeps at most
DUETIME_DISPATCH_AHEAD runs published but not yet taken over by a Celery
worker, so priorities and fair share decide what runs next, and no message
waits in the broker until its lease runs out.
"""

import contextlib
import dataclasses
import logging
import os
import socket
import time

from django.conf import settings

from runs import claims, presence, sql, transitions
from runs.celery_task import BATCH_TASK_NAME, TASK_NAME
from runs.loop import DATABASE_ERRORS, RETRY_SECONDS

log = logging.getLogger("duetime.dispatcher")
KIND = "celery"
CONFIRM_SECONDS = 10  # longest wait for the broker to confirm a batch; then it counts as not taken
RELEASED = "released: the Celery broker did not take the message; claimable again"  # the run's last_error
# After a claim smaller than a batch, the wait before the next one (at most the poll): runs falling due one
# after another are then claimed, published and confirmed by the broker a few dozen at a time instead of
# each handful on its own claim and confirm, at the cost of this much lateness at most. On the benchmark's
# two cores, at 600 runs/s falling due the Celery workers kept up with it (p99 0.33-0.47 s) and fell
# behind without it (p99 1.3-1.8 s); at 300/s the p99 was 61-69 ms against 102-436 ms, the median
# 36 ms against 9-14 ms (docs/performance.md).
LINGER_SECONDS = 0.03
BATCH_GRACE_SECONDS = 30  # a batch message's hard time limit: its runs' timeouts end to end, plus this


@dataclasses.dataclass
class TickResult:
    claimed: int = 0
    published: int = 0
    released: int = 0  # publish failed: given back, claimable again
    waiting: int = 0  # published earlier and not yet taken over by a Celery worker

    @property
    def failed(self):
        return self.released > 0 or self.claimed > self.published


def default_dispatcher_id():
    return f"dispatcher@{socket.gethostname()}:{os.getpid()}"


def broker_app(broker_url=None):
    """A Celery app that only publishes, to `broker_url` (default CELERY_BROKER_URL).

    No `confirm_publish` transport option: it waits for the broker after
    every message (about 320 publishes/s here); the dispatcher confirms each
    batch at once instead (`Confirms`).
    """
    from celery import Celery

    app = Celery("duetime-dispatcher", set_as_current=False)
    app.conf.update(
        broker_url=broker_url or settings.CELERY_BROKER_URL,
        broker_connection_retry_on_startup=False,
        task_ignore_result=True,
    )
    return app


def message(lease, dispatched_by):
    """The keyword arguments of one duetime.execute message: everything its executor needs, no delay."""
    return {
        "run_id": lease.run_id,
        "fencing_token": lease.fencing_token,
        "dispatched_by": dispatched_by,
        "job_name": lease.job_name,
        "tenant_id": lease.tenant_id,  # whose module prefixes the executor checks at the call
        "target_ref": lease.target_ref,
        "attempt": lease.attempt,
        "idempotency_key": lease.idempotency_key,
        "payload": lease.payload,
        "due_at": lease.due_at.isoformat(),
        "timeout_seconds": lease.timeout_seconds,
    }


def batch_message(leases, dispatched_by):
    """The keyword arguments of one duetime.execute_batch message: its runs, in the order they run."""
    runs = []
    for lease in leases:
        run = message(lease, dispatched_by)
        del run["dispatched_by"]
        runs.append(run)
    return {"runs": runs, "dispatched_by": dispatched_by}


def task_id(lease):
    """The Celery task id of a lease's message: the run and its fencing token, readable in Celery's tools."""
    return f"duetime-{lease.run_id}-{lease.fencing_token}"


def batch_task_id(leases):
    """A batch message's task id: its first run's, and how many more it carries ("duetime-12-34+15")."""
    return f"{task_id(leases[0])}+{len(leases) - 1}"


def pack(leases, *, waiting, prefetch, most):
    """The messages for a claim's leases: lists of leases of one queue, in claim order.

    One run per message while the runs published and waiting, with these,
    fit in what the Celery workers take ahead (`prefetch`, their children
    times their prefetch multiplier): each run then goes to the first free
    child. Past that a backlog has formed, and a message per run costs the
    broker, the worker and the take-over more than the runs themselves: the
    runs of one queue go `size` to a message, size growing with the backlog
    so that the workers still hold about `prefetch` messages, and at most
    `most` (DUETIME_DISPATCH_BATCH).
    """
    size = max(1, min(most, -(-(waiting + len(leases)) // max(1, prefetch))))
    by_queue = {}
    for lease in leases:
        by_queue.setdefault(lease.queue, []).append(lease)
    return [group[i : i + size] for group in by_queue.values() for i in range(0, len(group), size)]


def waiting(dispatcher_id):
    """How many runs `dispatcher_id` published that no Celery worker has taken over yet (the waiting query)."""
    return sql.execute("waiting", {"dispatcher": dispatcher_id})[0][0]


class Dispatcher:
    def __init__(self, queues, *, dispatcher_id=None, batch=None, ahead=None, pack=None, lease_seconds=None, app=None):
        self.queues = list(queues)
        self.dispatcher_id = dispatcher_id or default_dispatcher_id()
        self.batch = batch or settings.DUETIME_CLAIM_BATCH
        self.ahead = ahead or settings.DUETIME_DISPATCH_AHEAD
        self.pack = pack or settings.DUETIME_DISPATCH_BATCH  # most runs in one message
        self.prefetch = settings.DUETIME_DISPATCH_PREFETCH
        self.lease_seconds = lease_seconds or settings.DUETIME_LEASE_SECONDS
        self.app = app or broker_app()
        self._connection = self._producer = self._confirms = None
        self._announced = None  # time.monotonic() of the last runs.presence announcement

    def tick(self, now=None):
        """Claim up to the room left (DUETIME_DISPATCH_AHEAD) and publish; returns what it did.

        The claim commits first; then each lease is published. If the broker
        refuses or goes away, the rest of the batch is released at once.
        `now` is for tests; production uses the database clock.
        """
        self.announce()
        result = TickResult(waiting=self.waiting())
        room = min(self.batch, self.ahead - result.waiting)
        if room < self.least_claim():
            return result  # the Celery workers are behind: rest a poll rather than claim a few at a time
        leases = claims.claim(
            self.queues, room, self.dispatcher_id, lease_seconds=self.lease_seconds, kinds=[KIND], now=now
        )
        result.claimed = len(leases)
        messages = pack(leases, waiting=result.waiting, prefetch=self.prefetch, most=self.pack)
        taken = {lease.run_id for lease in self.publish(messages)} if leases else set()
        result.published = len(taken)
        result.released = self.release([lease for lease in leases if lease.run_id not in taken], now=now)
        return result

    def rest(self, result, poll):
        """Seconds to wait after a tick's `result`: none after a full batch (more is due), LINGER_SECONDS
        after a smaller claim, `poll` after none, RETRY_SECONDS once the broker or a release failed."""
        if result.failed:
            return RETRY_SECONDS
        if result.claimed >= self.batch:
            return 0
        if result.claimed:
            return min(LINGER_SECONDS, poll)
        return poll

    def least_claim(self):
        """The fewest runs worth a claim: a full batch, or half the room ahead if that is smaller.

        While the Celery workers are behind, the room ahead frees a few runs
        at a time; claiming each few as it frees spends a claim (and the
        broker's confirm) on every handful of runs. Waiting for a batch's
        worth costs nothing: the runs already published keep the workers busy.
        """
        return max(1, min(self.batch, self.ahead // 2))

    def announce(self):
        """Say (runs.presence) that `celery` runs of these queues are taken, every ANNOUNCE_SECONDS."""
        if self._announced is None or time.monotonic() - self._announced >= presence.ANNOUNCE_SECONDS:
            presence.announce(self.dispatcher_id, [KIND], self.queues)
            self._announced = time.monotonic()

    def forget(self):
        """No longer announced (a graceful stop); a database error is logged: the row expires by itself."""
        try:
            presence.forget(self.dispatcher_id)
        except DATABASE_ERRORS:
            log.exception("dispatcher %s: could not withdraw its announcement", self.dispatcher_id)

    def waiting(self):
        """Runs this dispatcher published that no Celery worker has taken over yet."""
        return waiting(self.dispatcher_id)

    def publish(self, messages):
        """Publish each message (a list of leases: `pack`), then wait once for the broker to confirm them all.

        Returns the leases the broker took. On RabbitMQ that is what it
        confirmed (publisher confirms on the channel: one wait per batch, not
        a round trip per message); Redis has a message once its publish
        returned. A failure (logged) ends the batch and drops the connection;
        what the broker did not take is for the caller to release.
        """
        sent = {}  # delivery tag (or position) -> the message's leases
        confirms = None
        try:
            producer = self.producer()
            confirms = self._confirms
            self.declare(producer, {leases[0].queue for leases in messages})
            with corked(self._connection):
                for leases in messages:
                    self.send(producer, leases)
                    sent[confirms.published() if confirms else len(sent)] = leases
            refused = confirms.wait(CONFIRM_SECONDS) if confirms else set()
            return [lease for tag, leases in sent.items() if tag not in refused for lease in leases]
        except Exception as exc:  # noqa: BLE001 - any broker failure: release what it did not take, try later
            count = sum(len(leases) for leases in messages)
            log.warning("dispatcher %s: publishing %d runs failed (%s)", self.dispatcher_id, count, exc)
            self.disconnect()
            return [] if confirms else [lease for leases in sent.values() for lease in leases]  # unconfirmed: not taken

    def send(self, producer, leases):
        """Send one message: duetime.execute for a single lease, duetime.execute_batch for several."""
        first = leases[0]
        options = {
            "queue": first.queue,
            "routing_key": first.queue,
            "producer": producer,
            "declare": [],  # declared once per batch (declare), not per message
            "retry": False,  # a failed publish is released here, never retried behind our back
            "argsrepr": "()",  # what Celery's monitors show, instead of a repr of the payload
        }
        if len(leases) == 1:
            self.app.send_task(
                TASK_NAME,
                kwargs=message(first, self.dispatcher_id),
                task_id=task_id(first),
                time_limit=first.timeout_seconds,  # hard limit: Celery kills the child past it
                kwargsrepr=f"{{run {first.run_id}, fencing token {first.fencing_token}}}",
                **options,
            )
            return
        self.app.send_task(
            BATCH_TASK_NAME,
            kwargs=batch_message(leases, self.dispatcher_id),
            task_id=batch_task_id(leases),
            # Each run's own timeout is kept by the batch (runs.celery_task.Batch); this hard limit, every
            # run's timeout end to end, is the backstop if that keeper cannot act.
            time_limit=sum(lease.timeout_seconds for lease in leases) + BATCH_GRACE_SECONDS,
            kwargsrepr=f"{{runs {', '.join(str(lease.run_id) for lease in leases)}}}",
            **options,
        )

    def release(self, leases, now=None):
        """Give back the leases whose publish failed; returns how many went back.

        Only while this dispatcher still holds them: a message the broker did
        take, though unconfirmed, may already run. What cannot be released
        (the database is away) keeps its lease, which expires: the reaper retries it.
        """
        return sum(
            transitions.release(lease.run_id, lease.fencing_token, why=RELEASED, held_by=self.dispatcher_id, now=now)
            for lease in leases
        )

    def declare(self, producer, queues):
        """Declare a batch's queues once for the batch (a message to a missing queue is dropped).

        kombu remembers what the connection declared; asked per message, Celery
        would still check, and copy, each message's queue: an eighth of the
        dispatcher's time in a drain.
        """
        for name in sorted(queues):
            producer.maybe_declare(self.app.amqp.queues[name])

    def producer(self):
        """The broker connection's producer, connected on first use (and again after a failure)."""
        if self._producer is None:
            self._connection = self.app.connection_for_write()
            self._connection.ensure_connection(max_retries=1)
            self._producer = self.app.amqp.Producer(self._connection, auto_declare=True)
            if self._connection.transport.driver_type == "amqp":  # RabbitMQ
                self._confirms = Confirms(self._producer.channel)
        return self._producer

    def disconnect(self):
        """Drop the broker connection (the next publish reconnects)."""
        if self._connection is not None:
            try:
                self._connection.collect()
            finally:
                self._connection = self._producer = self._confirms = None


@contextlib.contextmanager
def corked(connection):
    """Hold a batch's small writes in the kernel and send them together (TCP_CORK), where the socket allows.

    One segment per message would wake the broker once per message; a
    batch of 100 then costs about as much as one.
    """
    sock = getattr(getattr(connection.connection, "transport", None), "sock", None)
    cork = getattr(socket, "TCP_CORK", None)
    if sock is None or cork is None:
        yield
        return
    sock.setsockopt(socket.IPPROTO_TCP, cork, 1)
    try:
        yield
    finally:
        sock.setsockopt(socket.IPPROTO_TCP, cork, 0)  # sends what is held


class Confirms:
    """RabbitMQ publisher confirms on one channel: count the publishes, then wait once for the broker's answers.

    The broker numbers a confirming channel's publishes 1, 2, ... (delivery
    tags) and acks or nacks them, one or many at a time (`multiple`).
    """

    def __init__(self, channel):
        self.channel = channel
        self.last = 0
        self.pending = set()
        self.refused = set()
        channel.events["basic_ack"].add(self._ack)
        channel.events["basic_nack"].add(self._nack)
        channel.confirm_select()

    def published(self):
        """Count one publish; returns its delivery tag."""
        self.last += 1
        self.pending.add(self.last)
        return self.last

    def wait(self, timeout):
        """Read the broker's answers until none is pending; returns the tags it refused. Raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the broker confirmed none of {len(self.pending)} publishes within {timeout} s")
            self.channel.connection.drain_events(timeout=left)
        refused, self.refused = self.refused, set()
        return refused

    def _settle(self, tag, multiple):
        settled = {t for t in self.pending if t <= tag} if multiple else self.pending & {tag}
        self.pending -= settled
        return settled

    def _ack(self, tag, multiple):
        self._settle(tag, multiple)

    def _nack(self, tag, multiple):
        self.refused |= self._settle(tag, multiple)
