"""A run seen as Django's TaskResult: status, times, attempts, return value and errors.

Statuses from run states (Run.State):

    scheduled, retry_wait        READY       (waiting; retry_wait: "ready to be executed again")
    leased                       RUNNING
    succeeded                    SUCCESSFUL
    dead, cancelled, skipped     FAILED      (a replay from the DLQ makes it READY again)

`errors` has one TaskError per attempt that did not succeed, oldest first,
and one more for a cancelled or skipped run. Duetime stores an attempt's
error as text (runs.targets: "Class: message", a blank line, then the
innermost frames of the traceback), not the exception object, so the class
path is read back from that text: the traceback's last line names it
(`module.Class: message`, `builtins` for Python's own). When the text was cut
before that line, only the class name of the first line is known; a name
that is not one of Python's exceptions is then reported as
`builtins.Exception`, honestly unknown. Errors that Duetime itself decides
have their own classes: runs.targets.PermanentError, TimeoutError for a
timed-out attempt, and the classes below for a lost worker, a taken lease, a
cancel or a skip.
"""

import builtins
import re

from django.tasks.base import TaskError, TaskResult, TaskResultStatus

from runs.models import Attempt, Run

STATUS = {
    Run.State.SCHEDULED: TaskResultStatus.READY,
    Run.State.RETRY_WAIT: TaskResultStatus.READY,
    Run.State.LEASED: TaskResultStatus.RUNNING,
    Run.State.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    Run.State.DEAD: TaskResultStatus.FAILED,
    Run.State.CANCELLED: TaskResultStatus.FAILED,
    Run.State.SKIPPED: TaskResultStatus.FAILED,
}
# The prefixes runs.targets.execute gives the errors it decides, and the class that stands for each.
DECIDED = (
    ("permanent: ", "runs.targets.PermanentError"),
    ("not a registered task: ", "jobs.registry.NotRegistered"),
    ("the task's return value cannot be stored", "runs.targets.BadReturnValue"),
    ("timed out: ", "builtins.TimeoutError"),
)
CLASS_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?::|$)")


class WorkerLost(Exception):
    """The attempt's worker stopped heartbeating (it died or hung) and its lease ran out."""


class LeaseTaken(Exception):
    """The attempt's lease was taken away (cancelled, or replaced by a newer run) while it ran."""


class RunCancelled(Exception):
    """The run was cancelled before it succeeded (`reason` in the traceback)."""


class RunSkipped(Exception):
    """A policy skipped the run (`reason` in the traceback)."""


def task_result(task, run, attempts, *, backend):
    """The TaskResult of `run` (a Run) with its `attempts` (Attempt rows, in order) for `task`."""
    started = attempts[0].started_at if attempts else run.started_at
    worker_ids = [a.worker_id for a in attempts]
    if run.state == Run.State.LEASED and len(attempts) < run.attempt:
        worker_ids.append(run.worker_id)  # the attempt under way has no row until it ends
    result = TaskResult(
        task=task,
        id=str(run.pk),
        status=STATUS[run.state],
        enqueued_at=run.created_at,
        started_at=started,
        finished_at=run.finished_at if run.is_terminal else None,
        last_attempted_at=run.started_at,
        args=list(run.args or []),
        kwargs=run.payload if isinstance(run.payload, dict) else {},
        backend=backend,
        errors=errors(run, attempts),
        worker_ids=worker_ids,
    )
    succeeded = [a for a in attempts if a.outcome == Attempt.Outcome.SUCCEEDED]
    if run.state == Run.State.SUCCEEDED and succeeded:
        object.__setattr__(result, "_return_value", succeeded[-1].return_value)
    return result


def errors(run, attempts):
    found = [
        TaskError(exception_class_path=exception_class_path(a), traceback=a.error or a.get_outcome_display())
        for a in attempts
        if a.outcome != Attempt.Outcome.SUCCEEDED
    ]
    if run.state == Run.State.CANCELLED:
        found.append(TaskError(exception_class_path=_path(RunCancelled), traceback=run.reason))
    elif run.state == Run.State.SKIPPED:
        found.append(TaskError(exception_class_path=_path(RunSkipped), traceback=run.reason))
    return found


def exception_class_path(attempt):
    """The dotted path of the exception that ended `attempt` (see the module docstring)."""
    if attempt.outcome == Attempt.Outcome.LEASE_EXPIRED:
        return _path(WorkerLost)
    if attempt.outcome == Attempt.Outcome.STALE:
        return _path(LeaseTaken)
    if attempt.outcome == Attempt.Outcome.TIMED_OUT:
        return "builtins.TimeoutError"
    text = attempt.error or ""
    for prefix, path in DECIDED:
        if text.startswith(prefix):
            return path
    lines = [line for line in text.splitlines() if line.strip()]
    if lines:
        last = CLASS_LINE.match(lines[-1])
        if last and _is_traceback_end(lines):
            return _qualified(last.group(1))
        first = CLASS_LINE.match(lines[0])
        if first:
            return _qualified(first.group(1))
    return "builtins.Exception"


def _is_traceback_end(lines):
    """True when the text holds a whole traceback: a `Traceback` header before its last line."""
    return any(line.startswith("Traceback (most recent call last)") for line in lines[:-1])


def _qualified(name):
    if "." in name:
        return name
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{name}"
    return "builtins.Exception"


def _path(cls):
    return f"{cls.__module__}.{cls.__qualname__}"
