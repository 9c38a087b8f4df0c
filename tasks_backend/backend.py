"""DuetimeBackend: Django's Tasks framework on Duetime's engine (docs/django-tasks.md).

    TASKS = {
        "default": {
            "BACKEND": "tasks_backend.backend.DuetimeBackend",
            "QUEUES": ["default", "emails"],  # absent: only "default" (Django's rule); []: any queue
            "OPTIONS": {"tenant": "acme", "job": {"max_attempts": 3}},
        }
    }

`.enqueue()` inserts one run through runs.enqueue.insert_fresh_run, in the
caller's transaction: a rollback takes the run with it, and no worker sees
it before the commit (so the framework's `transaction.on_commit` advice is
harmless but not needed). The run belongs to the tenant's job for the task
(tasks_backend.task_jobs), and `run_worker` executes it like any `python`
run. The TaskResult's id is the run's id.

What maps onto what:

- `run_after` -> the run's due time (an instant already past: now). The
  engine never starts a run before it is due.
- `priority` (-100..100, larger first) -> Duetime's three: 1..100 critical,
  0 default, -100..-1 bulk. Order is kept between the three, not inside one
  (within a priority, runs go oldest first and tenants take turns).
- `queue_name` -> the run's queue (Duetime's rule: 1-64 of a-z 0-9 . _ -).
- arguments -> the run's `args` (positional) and payload (keyword), apart and
  exactly as given (tasks_backend.payloads); `get_result` gives both back.
"""

import re
import uuid

from django.core.checks import Error
from django.db import transaction
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from jobs import registry
from jobs.models import JobDefinition
from jobs.validation import QUEUE_RE
from runs.enqueue import build_runs, insert_fresh_run
from runs.models import Run
from tasks_backend import holds, payloads, results, task_jobs, unique


def duetime_priority(priority):
    """Django's priority (-100..100, larger first) as Duetime's (critical, default, bulk)."""
    if priority > 0:
        return JobDefinition.Priority.CRITICAL
    if priority < 0:
        return JobDefinition.Priority.BULK
    return JobDefinition.Priority.DEFAULT


class DuetimeBackend(BaseTaskBackend):
    task_class = unique.DuetimeTask  # `@task(backend=..., unique_for=...)`
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.queues.discard("")
        self.tenant = self.options.get("tenant", "")
        self.job_fields = self.options.get("job", {})

    def validate_task(self, task):
        super().validate_task(task)
        if not re.fullmatch(QUEUE_RE, task.queue_name):
            raise InvalidTask(
                f"Queue '{task.queue_name}' is not a Duetime queue name: use 1-64 lowercase letters, digits, '.', '_' or '-'."
            )

    def enqueue(self, task, args, kwargs):
        """Create a run of `task` with these arguments; returns its TaskResult (status READY).

        Under a unique key (tasks_backend.unique) whose hold has not expired, no run is made: the result
        is the holder's, as `get_result` would give it (its arguments, its status now).
        """
        self.validate_task(task)
        args, kwargs = payloads.arguments_for(task, args, kwargs)
        job = task_jobs.job_for(self.tenant, task, alias=self.alias, fields=self.job_fields)
        now = timezone.now()
        wanted = unique.requested(task, args, kwargs)
        if wanted is None:
            run = self._insert(task, job, args, kwargs, now)
        else:
            run = self._insert_unique(task, job, args, kwargs, now, *wanted)
            if isinstance(run, TaskResult):
                return run
        result = TaskResult(
            task=task,
            id=str(run.pk),
            status=TaskResultStatus.READY,
            enqueued_at=run.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def _insert(self, task, job, args, kwargs, now):
        due = max(task.run_after, now) if task.run_after is not None else now
        [run] = build_runs(job, [due], origin=Run.Origin.API, payload=kwargs, key=f"{job.name}@{uuid.uuid4().hex}")
        run.queue, run.priority = task.queue_name, duetime_priority(task.priority)
        run.args = args or None  # NULL for none: what every run that is not a Django task's has
        return insert_fresh_run(run)  # a fresh key: no run can hold it

    def _insert_unique(self, task, job, args, kwargs, now, key, ttl):
        """The new run holding `key`, or the TaskResult of the run that holds it already (see holds.hold)."""
        replacing = holds.holder(job.tenant_id, key, now)
        if replacing is not None:
            found = self._result_of(task, replacing)
            if found is not None:
                return found  # the common repeat: one read, no write
        try:
            with transaction.atomic():  # a savepoint in the caller's transaction: the loser's run goes with it
                run = self._insert(task, job, args, kwargs, now)
                holds.hold(job.tenant_id, key, run.pk, ttl, now, replacing=replacing)
        except holds.Held as held:
            found = self._result_of(task, held.run_id)
            if found is None:
                raise TaskResultDoesNotExist(f"run {held.run_id} holds the unique key and is gone") from None
            return found
        return run

    def _result_of(self, task, run_id):
        """The TaskResult of this tenant's run `run_id` for `task`, or None if there is no such run."""
        run = Run.objects.filter(pk=run_id, tenant__name=self.tenant).first()
        if run is None:
            return None
        attempts = list(run.attempts.order_by("attempt"))
        return results.task_result(self._as_enqueued(task, run), run, attempts, backend=self.alias)

    def get_result(self, result_id):
        """The TaskResult of run `result_id` of this tenant's `python` jobs; raises TaskResultDoesNotExist."""
        try:
            pk = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        run = (
            Run.objects.select_related("job")
            .filter(pk=pk, tenant__name=self.tenant, job__target_kind=JobDefinition.TargetKind.PYTHON)
            .first()
        )
        if run is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = registry.registered_task(run.job.target_ref)
        except registry.NotRegistered as exc:
            raise TaskResultDoesNotExist(f"{result_id}: its task is no longer registered ({exc})") from None
        task = self._as_enqueued(task, run)
        return results.task_result(task, run, list(run.attempts.order_by("attempt")), backend=self.alias)

    def _as_enqueued(self, task, run):
        """`task` on this backend and the run's queue (its priority is one of three: not told back)."""
        changes = {"backend": self.alias} if task.backend != self.alias else {}
        if run.queue != task.queue_name and (not self.queues or run.queue in self.queues):
            changes["queue_name"] = run.queue
        return task.using(**changes) if changes else task

    def check(self, **kwargs):
        if not self.tenant:
            yield Error(
                f"The tasks backend '{self.alias}' names no Duetime tenant.",
                hint="Set TASKS[...]['OPTIONS']['tenant'] to the tenant whose jobs its tasks become.",
                id="tasks_backend.E001",
            )
        unknown = set(self.job_fields) - {f.name for f in JobDefinition._meta.get_fields()}
        if unknown:
            yield Error(
                f"The tasks backend '{self.alias}' sets unknown job fields: {', '.join(sorted(unknown))}.",
                hint="OPTIONS['job'] takes JobDefinition fields, e.g. max_attempts, timeout_seconds.",
                id="tasks_backend.E002",
            )
