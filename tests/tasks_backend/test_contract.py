"""The backend contract of Django's own tests/tasks (test_tasks.py, test_dummy_backend.py,
test_immediate_backend.py), rewritten for Duetime with a real `run_worker` process.

Where Django's in-process backends run a task at once, here a worker in its
own process claims, runs and completes it, and the test waits for that with
`TaskResult.refresh()`, as an application would. Real clock with generous
bounds; the worker is stopped (SIGTERM) when each test ends.
"""

import asyncio
import datetime as dt
import sys

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
from django.utils import timezone

from dlq.models import DeadLetter
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs.models import Run
from runs.targets import PermanentError
from runs.worker import POOLS
from tasks_backend.unique import unique_key
from tests.conftest import engine_env
from tests.spawned import spawn, stop
from tests.tasks_backend import tasks
from tests.tasks_backend.tasks import BillingError
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

FAST = {"DUETIME_LEASE_SECONDS": 5, "DUETIME_HEARTBEAT_SECONDS": 1, "DUETIME_POLL_SECONDS": 0.05}


@pytest.fixture
def worker(initech):
    """A real `run_worker` serving the contract tasks' queues, stopped when the test ends."""
    yield from run_worker()


@pytest.fixture(params=POOLS)
def two_slots(initech, request):
    """A real `run_worker` with two slots, in each pool."""
    yield from run_worker("--concurrency", "2", "--pool", request.param)


def run_worker(*args):
    command = [sys.executable, "manage.py", "run_worker", "--queues", "default,emails", "--skip-checks", *args]
    proc = spawn(command, env=engine_env(**FAST))
    try:
        yield proc
    finally:
        code, out = stop(proc)
        print(f"--- run_worker exited {code} ---\n{out[-3000:]}")


def finished(result, timeout=120):
    """Refresh `result` until it is finished (SUCCESSFUL or FAILED); returns it."""

    def done():
        result.refresh()
        return result.is_finished

    wait_until(done, timeout=timeout, message=f"task result {result.id} to finish")
    return result


def test_it_runs_an_enqueued_task_and_keeps_its_return_value(worker):
    result = tasks.calculate_meaning_of_life.enqueue()

    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018

    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert result.errors == []
    assert result.attempts == 1 and len(result.worker_ids) == 1 and result.worker_ids[0]
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at


def test_it_passes_positional_and_keyword_arguments_exactly_as_given(worker):
    result = tasks.add.enqueue(40, b=2)

    assert result.args == [40] and result.kwargs == {"b": 2}
    assert finished(result).return_value == 42
    fetched = tasks.add.get_result(result.id)
    assert (fetched.args, fetched.kwargs) == ([40], {"b": 2})  # what enqueue returned


def test_it_calls_variadic_and_positional_only_tasks_as_func_args_kwargs(worker):
    # Django's noop_task(*args, **kwargs) enqueued as test_immediate_backend's test_enqueue_task does.
    noop = tasks.noop_task.enqueue(1, two=3)
    echo = tasks.echo.enqueue(1, [2, 3], {"four": 4}, five=5)
    divide = tasks.divide.enqueue(1, 3, places=3)

    assert (noop.args, noop.kwargs) == ([1], {"two": 3})
    assert finished(noop).status == TaskResultStatus.SUCCESSFUL and noop.return_value is None
    assert (noop.args, noop.kwargs) == ([1], {"two": 3}), "refresh keeps them"
    assert finished(echo).return_value == {"args": [1, [2, 3], {"four": 4}], "kwargs": {"five": 5}}
    assert finished(divide).return_value == 0.333


def test_it_returns_complex_json_values(worker):
    result = finished(tasks.complex_return_value.enqueue())

    assert result.return_value == {"a": [1, 2, {"b": 3}], "c": None, "d": 1.5}


def test_it_runs_async_task_functions(worker):
    results = [tasks.async_add.enqueue(a=1, b=2), tasks.noop_task_async.enqueue()]

    assert finished(results[0]).return_value == 3
    assert finished(results[1]).status == TaskResultStatus.SUCCESSFUL


def test_it_enqueues_from_async_code_and_refreshes_there(worker):
    async def scenario():
        result = await tasks.calculate_meaning_of_life.aenqueue()
        fetched = await tasks.calculate_meaning_of_life.aget_result(result.id)
        assert fetched.id == result.id
        for _ in range(1200):
            await result.arefresh()
            if result.is_finished:
                return result
            await asyncio.sleep(0.05)
        raise AssertionError(f"task result {result.id} did not finish")

    result = async_to_sync(scenario)()  # the ORM calls run in this thread, on the test's connection
    assert result.return_value == 42


def test_it_gives_the_context_the_run_and_the_result_id(worker):
    own_id = finished(tasks.get_task_id.enqueue())
    context = finished(tasks.test_context.enqueue(attempt=1))

    assert own_id.return_value == own_id.id
    assert context.return_value["attempt"] == 1
    assert context.return_value["run_id"] == int(context.id)
    assert context.return_value["fencing_token"] > 0


def test_it_records_a_failure_with_its_exception_class_and_traceback(worker):
    result = finished(tasks.failing_task_value_error.enqueue())

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    [error] = result.errors
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    assert "This task failed due to ValueError" in error.traceback
    assert "Traceback (most recent call last)" in error.traceback
    assert result.finished_at is not None and result.attempts == 1


def test_it_keeps_an_exception_whose_argument_is_an_exception(worker):
    result = finished(tasks.complex_exception.enqueue())

    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in error.traceback  # the raising line, as Django's test


def test_it_names_the_projects_own_exception_classes(worker):
    own = finished(tasks.failing_task_own_error.enqueue())
    permanent = finished(tasks.failing_task_permanent.enqueue())

    assert own.errors[0].exception_class is BillingError
    assert "the cause" in own.errors[0].traceback  # the chained cause is kept
    assert permanent.errors[0].exception_class is PermanentError


def test_a_task_that_raises_what_is_not_an_exception_fails_and_its_slot_serves_on(two_slots, tmp_path):
    # More of them than the worker has slots: each slot must survive its handler.
    ended = [tasks.exits, tasks.interrupted, tasks.generator_exit]
    results = [finished(t.enqueue(), timeout=60) for t in ended]

    for result, path in zip(results, ["builtins.SystemExit", "builtins.KeyboardInterrupt", "builtins.GeneratorExit"]):
        assert result.status == TaskResultStatus.FAILED
        [error] = result.errors
        assert error.exception_class_path == path
        assert "Traceback (most recent call last)" in error.traceback
        assert "tests/tasks_backend/tasks.py" in error.traceback  # the handler's own frame
    # The worker keeps both of its slots: two tasks that wait for each other both finish.
    met = [finished(r, timeout=60) for r in [tasks.meet.enqueue(str(tmp_path), 2) for _ in range(2)]]
    assert [r.return_value for r in met] == [2, 2]
    assert two_slots.poll() is None, "the worker is still running"


def test_a_return_value_that_is_not_json_fails_as_a_type_error_with_its_traceback(worker):
    result = finished(tasks.returns_a_set.enqueue(), timeout=60)

    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert "Traceback (most recent call last)" in error.traceback
    assert "Object of type set is not JSON serializable" in error.traceback


def test_it_lands_failed_runs_in_the_dead_letter_queue(worker):
    result = finished(tasks.failing_task_value_error.enqueue())

    run = Run.objects.get(pk=result.id)
    assert run.state == Run.State.DEAD and DeadLetter.objects.filter(run=run).exists()


def test_it_retries_when_the_job_allows_more_attempts(worker):
    finished(tasks.failing_task_value_error.enqueue())  # makes the job, with the default single attempt
    job = JobDefinition.objects.get(target_ref=tasks.failing_task_value_error.module_path)
    job.max_attempts, job.retry_base_seconds, job.retry_max_seconds = 2, 0, 0
    save_definition(job, "user:operator")  # as the portal does: the backend forgets its copy at once

    result = finished(tasks.failing_task_value_error.enqueue())

    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2 and len(result.errors) == 2


def test_it_never_runs_a_task_before_run_after(worker):
    run_after = timezone.now() + dt.timedelta(seconds=2)
    result = tasks.calculate_meaning_of_life.using(run_after=run_after).enqueue()

    finished(result)
    assert result.started_at >= run_after


def test_it_runs_higher_priorities_and_other_queues(worker):
    urgent = tasks.send_email.enqueue(to="ops@example.com")

    assert Run.objects.get(pk=urgent.id).queue == "emails"
    assert finished(urgent).return_value == "sent to ops@example.com"


def test_it_enqueues_in_the_callers_transaction(worker):
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = tasks.calculate_meaning_of_life.enqueue()
        raise RuntimeError("the caller's work failed")
    with pytest.raises(TaskResultDoesNotExist):
        tasks.calculate_meaning_of_life.get_result(rolled_back.id)
    assert not Run.objects.exists()

    with transaction.atomic():
        kept = tasks.calculate_meaning_of_life.enqueue()
    assert finished(kept).return_value == 42


def test_it_finds_results_from_another_task_only_through_the_backend(worker):
    result = tasks.calculate_meaning_of_life.enqueue()

    assert task_backends["duetime"].get_result(result.id).id == result.id
    with pytest.raises(TaskResultMismatch):
        tasks.noop_task.get_result(result.id)
    for missing in ("123456789", "not-a-run-id", ""):
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["duetime"].get_result(missing)


def test_a_unique_task_enqueued_twice_runs_once_and_both_results_see_it(worker):
    first = tasks.refresh_prices.enqueue(7, currency="EUR")
    again = tasks.refresh_prices.enqueue(7, currency="EUR")
    with unique_key("prices-7", ttl=600):
        keyed = tasks.refresh_prices.enqueue(8, currency="USD")
        keyed_again = tasks.refresh_prices.enqueue(9, currency="GBP")

    assert again.id == first.id and keyed_again.id == keyed.id
    assert finished(again).return_value == {"shop": 7, "currency": "EUR"}
    assert finished(keyed_again).return_value == {"shop": 8, "currency": "USD"}
    assert (keyed_again.args, keyed_again.kwargs) == ([8], {"currency": "USD"})
    assert Run.objects.count() == 2 and Run.objects.filter(attempt=1, state="succeeded").count() == 2
