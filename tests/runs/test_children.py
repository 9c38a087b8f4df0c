"""The processes pool: handlers in child processes, killed at their timeout, crashes contained."""

import pytest

from runs import enqueue
from runs.children import KILL_GRACE_SECONDS
from runs.models import Attempt, Run
from runs.worker import POOL_PROCESSES, Worker
from tests.runs.test_worker import drive

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker():
    worker = Worker(["default"], concurrency=2, heartbeat_seconds=1, pool=POOL_PROCESSES)
    yield worker
    worker.drain(1)


def test_it_runs_a_task_in_a_child_with_its_payload_and_context(acme, make_job, worker, tmp_path):
    report = tmp_path / "seen.json"
    job = make_job(acme, "echo", target_ref="tests.handlers.echo", payload={"report": str(report), "account": 7})
    run, _ = enqueue.enqueue(job)
    drive(worker, lambda: Run.objects.get(pk=run.pk).state == "succeeded")
    assert '"payload": {"account": 7}' in report.read_text()
    assert f'"run_id": {run.pk}' in report.read_text()


def test_it_kills_a_handler_past_its_timeout_and_retries_it_by_policy(acme, make_job, worker):
    job = make_job(
        acme,
        "stuck",
        target_ref="tests.handlers.sleep",
        payload={"seconds": 60},
        timeout_seconds=1,
        max_attempts=2,
        retry_base_seconds=0,
        retry_max_seconds=0,
    )
    run, _ = enqueue.enqueue(job)
    drive(worker, lambda: Run.objects.get(pk=run.pk).state == "dead", timeout=30)
    attempts = list(Attempt.objects.filter(run=run).order_by("attempt"))
    assert [a.outcome for a in attempts] == ["timed_out", "timed_out"]
    for attempt in attempts:
        assert (attempt.ended_at - attempt.started_at).total_seconds() <= 1 + KILL_GRACE_SECONDS + 1
    assert "killed: ran longer than timeout_seconds (1)" in attempts[0].error


def test_it_fails_the_attempt_of_a_handler_that_kills_its_process_and_carries_on(acme, make_job, worker):
    crash = make_job(acme, "crash", target_ref="tests.handlers.exit_now", max_attempts=1)
    crashed, _ = enqueue.enqueue(crash)
    drive(worker, lambda: Run.objects.get(pk=crashed.pk).state == "dead")
    (attempt,) = Attempt.objects.filter(run=crashed)
    assert attempt.outcome == "failed" and "exit code 1" in attempt.error
    after, _ = enqueue.enqueue(make_job(acme, "after"))
    drive(worker, lambda: Run.objects.get(pk=after.pk).state == "succeeded")
    assert all(child.alive for child in worker.children.children), "the crashed child was replaced"


def test_a_child_killed_at_its_timeout_takes_no_other_attempt_with_it(acme, make_job, worker):
    stuck = make_job(
        acme, "stuck", target_ref="tests.handlers.sleep", payload={"seconds": 60}, timeout_seconds=1, max_attempts=1
    )
    quick = make_job(acme, "quick", target_ref="tests.handlers.add", payload={"a": 1, "b": 2}, overlap_policy="allow")
    held, _ = enqueue.enqueue(stuck)
    runs = [enqueue.enqueue(quick)[0] for _ in range(30)]
    drive(worker, lambda: Attempt.objects.filter(run=held).exists(), timeout=30)
    drive(worker, lambda: Run.objects.filter(job=quick, state="succeeded").count() == 30, timeout=30)
    assert list(Attempt.objects.filter(run=held).values_list("outcome", flat=True)) == ["timed_out"]
    quick_attempts = Attempt.objects.filter(run__in=runs)
    assert set(quick_attempts.values_list("outcome", flat=True)) == {"succeeded"}
    assert quick_attempts.count() == 30 and all(a.return_value == {"sum": 3} for a in quick_attempts)
