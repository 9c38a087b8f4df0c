"""A run and its attempts read as Django's TaskResult (no database: rows built in memory)."""

import datetime as dt

import pytest
from django.tasks import TaskResultStatus

from runs.models import Attempt, Run
from runs.targets import describe
from tasks_backend import results
from tests.tasks_backend import tasks
from tests.tasks_backend.tasks import BillingError

T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def run(state, **fields):
    values = dict(pk=7, state=state, created_at=T0, due_at=T0, available_at=T0, payload={"a": 1}, attempt=0)
    values.update(fields)
    return Run(**values)


def attempt(n, outcome, error="", worker="host:1", return_value=None):
    started = T0 + dt.timedelta(minutes=n)
    return Attempt(
        attempt=n,
        outcome=outcome,
        error=error,
        worker_id=worker,
        started_at=started,
        ended_at=started + dt.timedelta(seconds=1),
        return_value=return_value,
    )


def result_of(the_run, attempts=()):
    return results.task_result(tasks.add, the_run, list(attempts), backend="duetime")


def raised(exc):
    try:
        raise exc
    except Exception as caught:  # noqa: BLE001
        return describe(caught)


@pytest.mark.parametrize(
    "state, status",
    [
        ("scheduled", TaskResultStatus.READY),
        ("retry_wait", TaskResultStatus.READY),
        ("leased", TaskResultStatus.RUNNING),
        ("succeeded", TaskResultStatus.SUCCESSFUL),
        ("dead", TaskResultStatus.FAILED),
        ("cancelled", TaskResultStatus.FAILED),
        ("skipped", TaskResultStatus.FAILED),
    ],
)
def test_it_maps_every_run_state_onto_a_status(state, status):
    assert result_of(run(state, finished_at=T0, reason="x")).status == status


def test_it_reads_times_attempts_and_the_last_return_value():
    attempts = [
        attempt(1, "failed", raised(ValueError("first")), worker="a:1"),
        attempt(2, "succeeded", worker="b:2", return_value=[1, 2]),
    ]
    done = run("succeeded", attempt=2, started_at=attempts[1].started_at, finished_at=T0 + dt.timedelta(minutes=3))

    result = result_of(done, attempts)

    assert result.id == "7" and result.enqueued_at == T0 and result.kwargs == {"a": 1} and result.args == []
    assert result.started_at == attempts[0].started_at and result.last_attempted_at == attempts[1].started_at
    assert result.finished_at == done.finished_at
    assert result.worker_ids == ["a:1", "b:2"] and result.attempts == 2
    assert result.return_value == [1, 2]
    assert [e.exception_class for e in result.errors] == [ValueError]


def test_it_counts_the_attempt_under_way():
    leased = run("leased", attempt=2, worker_id="c:3", started_at=T0 + dt.timedelta(minutes=5))

    result = result_of(leased, [attempt(1, "failed", raised(ValueError("x")))])

    assert result.worker_ids == ["host:1", "c:3"] and result.finished_at is None
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018


def test_it_reads_the_exception_class_back_from_the_stored_traceback():
    def chained():
        try:
            raise KeyError("cause")
        except KeyError as exc:
            raise BillingError("effect") from exc

    try:
        chained()
    except BillingError as exc:
        chained_text = describe(exc)

    assert results.exception_class_path(attempt(1, "failed", chained_text)) == "tests.tasks_backend.tasks.BillingError"
    assert results.exception_class_path(attempt(1, "failed", raised(ValueError("v")))) == "builtins.ValueError"


def test_it_falls_back_to_the_first_line_when_the_traceback_was_cut():
    cut = raised(ValueError("v"))[:40]  # "ValueError: v" then part of the traceback

    assert results.exception_class_path(attempt(1, "failed", cut)) == "builtins.ValueError"
    assert results.exception_class_path(attempt(1, "failed", "BillingError: cut\n\nTraceback")) == "builtins.Exception"


@pytest.mark.parametrize(
    "outcome, error, path",
    [
        ("failed", "permanent: no such account", "runs.targets.PermanentError"),
        ("failed", "not a registered task: 'x' is not ...", "jobs.registry.NotRegistered"),
        ("failed", "the task's return value cannot be stored: it is not JSON", "runs.targets.BadReturnValue"),
        ("timed_out", "timed out: after 900 s", "builtins.TimeoutError"),
        ("lease_expired", "", "tasks_backend.results.WorkerLost"),
        ("stale", "", "tasks_backend.results.LeaseTaken"),
        ("failed", "", "builtins.Exception"),
    ],
)
def test_it_names_the_errors_duetime_decides(outcome, error, path):
    found = results.errors(run("dead", finished_at=T0), [attempt(1, outcome, error)])

    assert found[0].exception_class_path == path
    assert issubclass(found[0].exception_class, BaseException)  # each path resolves to a class


def test_it_adds_an_error_for_a_cancelled_or_skipped_run():
    [cancelled] = results.errors(run("cancelled", finished_at=T0, reason="cancelled by alice"), [])
    [skipped] = results.errors(run("skipped", finished_at=T0, reason="overlap"), [])

    assert cancelled.exception_class is results.RunCancelled and cancelled.traceback == "cancelled by alice"
    assert skipped.exception_class is results.RunSkipped


def test_its_traceback_is_the_stored_text():
    text = raised(ValueError("boom"))

    [error] = results.errors(run("dead", finished_at=T0), [attempt(1, "failed", text)])

    assert error.traceback == text and "Traceback (most recent call last)" in error.traceback
