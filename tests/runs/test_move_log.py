"""The move log: one JSON line per state move and per refused stale caller, enough to trace a duplicate execution.

Time is pinned (`now=`). The log is off in the test environment; `lines` turns it on for one test and
reads back what the `duetime.moves` handler would have written, through the JSON formatter of LOGGING.
"""

import io
import json
import logging

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from jobs.models import SYSTEM_TENANT, JobDefinition
from runs import canary, claims, metrics, move_log, transitions
from runs.models import Run
from runs.transitions import Completion, StaleLease
from scheduler_project.json_logs import JsonLines

pytestmark = pytest.mark.django_db(transaction=True)

# What every line names, so that each execution of a run can be lined up with the others.
NAMED = {"ts", "event", "run", "job", "tenant", "attempt", "fencing_token", "idempotency_key", "worker"}


class Lines:
    """The JSON lines the move log wrote, parsed (each one must parse on its own)."""

    def __init__(self, stream):
        self.stream = stream

    def all(self):
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]

    def of(self, event):
        return [line for line in self.all() if line["event"] == event]

    def clear(self):
        self.stream.seek(0)
        self.stream.truncate()


@pytest.fixture
def lines():
    logger = logging.getLogger("duetime.moves")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield Lines(stream)
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def job(acme, make_job):
    return make_job(acme, "billing.close", overlap_policy="allow", max_attempts=2, retry_base_seconds=0)


def claim_one(clock, worker="w-alice"):
    (lease,) = claims.claim(["default"], 10, worker, now=clock.now)
    return lease


def assert_names(line, run, lease=None):
    assert NAMED <= line.keys(), NAMED - line.keys()
    assert (line["run"], line["job"], line["tenant"]) == (run.pk, "billing.close", "acme")
    assert line["idempotency_key"] == run.idempotency_key
    if lease is not None:
        assert (line["attempt"], line["fencing_token"]) == (lease.attempt, lease.fencing_token)


def test_it_logs_a_claim_with_the_lease_it_made(job, make_run, lines, clock):
    run = make_run(job, due_at=clock.ago(seconds=5))

    lease = claim_one(clock)

    (line,) = lines.all()
    assert line["event"] == "leased" and line["to"] == "leased" and line["worker"] == "w-alice"
    assert_names(line, run, lease)
    assert line["attempt"] == 1


def test_it_logs_a_completion_with_its_outcome(job, make_run, lines, clock):
    run = make_run(job, due_at=clock.ago(seconds=5))
    lease = claim_one(clock)

    transitions.complete(run.pk, lease.fencing_token, "succeeded", now=clock.advance(seconds=1))

    (line,) = lines.of("completed")
    assert_names(line, run, lease)
    assert (line["to"], line["outcome"], line["worker"]) == ("succeeded", "succeeded", "w-alice")


def test_it_logs_a_retry_and_then_the_dead_letter(job, make_run, lines, clock):
    run = make_run(job, due_at=clock.ago(seconds=5))
    first = claim_one(clock)
    transitions.complete(run.pk, first.fencing_token, "failed", "boom", now=clock.advance(seconds=1))
    clock.advance(seconds=1)
    second = claim_one(clock)
    transitions.complete(run.pk, second.fencing_token, "failed", "boom", now=clock.advance(seconds=1))

    retried, died = lines.of("completed")
    assert (retried["to"], retried["outcome"], retried["attempt"]) == ("retry_wait", "failed", 1)
    assert (died["to"], died["attempt"], died["fencing_token"]) == ("dead", 2, second.fencing_token)
    assert_names(died, run, second)


def test_it_logs_what_the_reaper_found_expired(job, make_run, lines, clock):
    run = make_run(job, due_at=clock.ago(minutes=1))
    lease = claim_one(clock)

    transitions.reap(now=clock.advance(minutes=1))

    (line,) = lines.of("lease_expired")
    assert_names(line, run, lease)
    assert (line["to"], line["outcome"], line["worker"]) == ("retry_wait", "lease_expired", "w-alice")


def test_it_logs_a_cancel_of_a_waiting_run_and_of_a_lease(job, make_run, lines, clock):
    waiting = make_run(job, due_at=clock.ahead(minutes=5))
    running = make_run(job, due_at=clock.ago(seconds=5))
    lease = claim_one(clock)
    lines.clear()

    assert transitions.cancel_run(waiting, reason="not needed", now=clock.now)
    assert transitions.cancel_run(running, reason="operator", now=clock.now)

    before, leased = lines.of("cancelled")
    assert_names(before, waiting)
    assert (before["from"], before["to"], before["fencing_token"], before["worker"]) == (
        "scheduled",
        "cancelled",
        None,
        None,
    )
    assert_names(leased, running, lease)
    assert (leased["from"], leased["worker"]) == ("leased", "w-alice")


def test_it_logs_a_refused_stale_completion_and_heartbeat_with_whose_lease_is_current(job, make_run, lines, clock):
    run = make_run(job, due_at=clock.ago(minutes=1))
    lost = claim_one(clock, worker="w-alice")
    transitions.reap(now=clock.advance(minutes=1))
    current = claim_one(clock, worker="w-bob")
    lines.clear()

    with pytest.raises(StaleLease):
        transitions.complete(run.pk, lost.fencing_token, "succeeded", now=clock.now)
    with pytest.raises(StaleLease):
        transitions.heartbeat(run.pk, lost.fencing_token, 30, now=clock.now)

    completion, heartbeat = lines.all()
    assert completion["event"] == "completion_refused" and heartbeat["event"] == "heartbeat_refused"
    for line in (completion, heartbeat):
        assert_names(line, run)
        assert line["fencing_token"] == lost.fencing_token
        assert (line["current_fencing_token"], line["current_worker"], line["state"]) == (
            current.fencing_token,
            "w-bob",
            "leased",
        )
    assert completion["outcome"] == "succeeded"


def test_the_lines_of_one_idempotency_key_trace_a_duplicate_execution(job, make_run, lines, clock):
    run = make_run(job, due_at=clock.ago(minutes=1))
    alice = claim_one(clock, worker="w-alice")  # alice stalls past her lease...
    transitions.reap(now=clock.advance(minutes=1))
    bob = claim_one(clock, worker="w-bob")  # ...bob runs it again, and finishes first
    transitions.complete_many([Completion(run.pk, bob.fencing_token, "succeeded")], now=clock.advance(seconds=1))
    transitions.complete_many([Completion(run.pk, alice.fencing_token, "succeeded")], now=clock.advance(seconds=1))

    trace = [
        (line["event"], line["worker"], line["fencing_token"])
        for line in lines.all()
        if line["idempotency_key"] == run.idempotency_key
    ]

    assert trace == [
        ("leased", "w-alice", alice.fencing_token),
        ("lease_expired", "w-alice", alice.fencing_token),
        ("leased", "w-bob", bob.fencing_token),
        ("completed", "w-bob", bob.fencing_token),
        ("completion_refused", None, alice.fencing_token),
    ]


def test_a_claim_rolled_back_logs_nothing(job, make_run, lines, clock):
    make_run(job, due_at=clock.ago(seconds=5))
    with pytest.raises(RuntimeError), transaction.atomic():
        claim_one(clock)
        raise RuntimeError("the worker's transaction fails after the claim")
    assert lines.all() == []
    assert Run.objects.get().state == "scheduled"


def test_the_batched_moves_log_without_a_query_of_their_own(job, make_run, lines, clock):
    def moves(logging_on):
        """Five runs claimed, failed (retry), claimed again and reaped (dead): (queries, lines)."""
        for seconds in range(1, 6):
            make_run(job, due_at=clock.ago(seconds=seconds))
        lines.clear()
        logging.getLogger("duetime.moves").setLevel(logging.INFO if logging_on else logging.WARNING)
        with CaptureQueriesContext(connection) as seen:
            leases = claims.claim(["default"], 10, "w-alice", now=clock.now)
            failed = [Completion(lease.run_id, lease.fencing_token, "failed", "boom") for lease in leases]
            transitions.complete_many(failed, now=clock.advance(seconds=1))
            claims.claim(["default"], 10, "w-alice", now=clock.advance(seconds=1))
            transitions.reap(now=clock.advance(minutes=5))
        return len(seen), len(lines.all())

    metrics.tenant_names([job.tenant_id])  # read once per process, then cached (the metrics read them too)
    on, off = moves(logging_on=True), moves(logging_on=False)

    assert on[1] == 5 * 4 and off[1] == 0  # leased, completed (retry_wait), leased, lease_expired (dead)
    assert on[0] == off[0]


def test_an_orm_move_reads_nothing_while_the_log_is_off(job, make_run, clock, django_assert_num_queries):
    run = make_run(job, due_at=clock.ahead(minutes=5))
    assert not move_log.enabled()
    # The runs' move and their attempts' (into the day's history partition with them), in one transaction
    # (SQLite counts its BEGIN and COMMIT); PostgreSQL first reads which day's partition that is.
    with django_assert_num_queries(4 if connection.vendor == "sqlite" else 5):
        assert transitions.cancel_future_runs([job.pk], reason="job deleted", now=clock.now) == 1
    run.refresh_from_db()
    assert run.state == "cancelled"


def test_the_canaries_moves_are_left_out(db, lines, clock):
    canary.ensure(now=clock.ago(minutes=5))
    ping = JobDefinition.objects.get(tenant__name=SYSTEM_TENANT, shard=0)
    Run.objects.create(
        job=ping, tenant=ping.tenant, due_at=clock.now, available_at=clock.now, queue=ping.queue, idempotency_key="k"
    )
    (lease,) = claims.claim([ping.queue], 10, "w-alice", now=clock.now)
    transitions.complete(lease.run_id, lease.fencing_token, "succeeded", now=clock.now)
    assert lines.all() == []
