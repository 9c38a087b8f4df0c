"""The job behind each Django task the backend enqueues: one per (tenant, task), made on first use.

The job is an ordinary Duetime job definition (schedule kind `none`: on
demand; target `python`: the task's module path), so the portal shows,
pauses, cancels and charts it like any other, and an operator may edit it
(attempts, timeout, concurrency, even a cron schedule): the backend never
overwrites it. It is created through jobs.definitions.save_definition, the
one validation path, so an unregistered task or a module outside the
tenant's prefixes is refused there, with its message.

Looking the job up on every `.enqueue()` would cost a query or two per call,
so each process remembers the job for CACHE_SECONDS. The memory is taken
only once the job is committed (a job created in a transaction that rolls
back is never remembered), and it is dropped at once when this process saves
or deletes a job or tenant; another process's edit is seen within
CACHE_SECONDS.
"""

import hashlib
import re
import time
from functools import partial

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend

from jobs import permissions
from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant
from jobs.validation import NAME_RE

CACHE_SECONDS = 10.0
ACTOR = "tasks:{alias}"  # audit actor of the jobs the backend creates
# What a job made by the backend starts with; the backend's OPTIONS["job"] may change any field of it.
JOB_DEFAULTS = {
    "schedule_kind": JobDefinition.ScheduleKind.NONE,
    "target_kind": JobDefinition.TargetKind.PYTHON,
    "overlap_policy": JobDefinition.OverlapPolicy.ALLOW,  # enqueued runs never skip each other
    "max_attempts": 1,  # the framework's contract: a task that raises is FAILED; raise it in OPTIONS["job"]
}

_remembered = {}  # (tenant name, module path) -> (JobDefinition with its tenant, monotonic expiry)


def job_name(module_path):
    """The job's name for a task: its module path, lowercased; a hash keeps paths apart that lowercase alike."""
    name = module_path.lower()
    if name != module_path or not re.fullmatch(NAME_RE, name):
        digest = hashlib.sha256(module_path.encode()).hexdigest()[:8]
        name = re.sub(r"[^a-z0-9._-]", "_", name).lstrip("._-")[:190] + f"-{digest}"
    return name


def job_for(tenant_name, task, *, alias, fields=None):
    """The job definition that runs `task` for `tenant_name` (its tenant loaded); made on first use.

    Raises InvalidTaskBackend for an unknown tenant, InvalidTask when the
    task cannot be a job of that tenant (save_definition's message), when
    its job was cancelled, or when a superuser has since taken away the module
    prefix that allowed it (jobs.permissions: seen within CACHE_SECONDS in
    another process; the worker refuses the run in any case);
    jobs.quotas.QuotaExceeded when the tenant may have no more jobs.
    """
    key = (tenant_name, task.module_path)
    found = _remembered.get(key)
    if found is not None and found[1] > time.monotonic():
        job = found[0]
    else:
        job = _find_or_create(tenant_name, task, alias, fields or {})
        transaction.on_commit(partial(_remember, key, job))  # at once when there is no transaction
    if job.status == JobDefinition.Status.CANCELLED:
        raise InvalidTask(
            f"the Duetime job '{job.name}' of tenant '{tenant_name}' that runs {task.module_path} is cancelled: "
            "make it active again in the portal to enqueue it"
        )
    if why := permissions.revoked(job):
        raise InvalidTask(f"{task.module_path} cannot be enqueued for tenant '{tenant_name}': {why}")
    return job


def forget(tenant_name=None):
    """Drop what this process remembers (of one tenant, or all)."""
    for key in list(_remembered):
        if tenant_name is None or key[0] == tenant_name:
            _remembered.pop(key, None)


def forget_changed(sender, instance, **kwargs):
    """post_save / post_delete of a job or tenant: forget the jobs it may have changed."""
    tenant = instance if isinstance(instance, Tenant) else None
    for key, (job, _expiry) in list(_remembered.items()):
        if (tenant is not None and job.tenant_id == tenant.pk) or (tenant is None and job.pk == instance.pk):
            _remembered.pop(key, None)


def _remember(key, job):
    _remembered[key] = (job, time.monotonic() + CACHE_SECONDS)


def _find_or_create(tenant_name, task, alias, fields):
    tenant = Tenant.objects.filter(name=tenant_name).first()
    if tenant is None:
        raise InvalidTaskBackend(
            f"the tasks backend '{alias}' names the Duetime tenant '{tenant_name}', which does not exist: "
            "create it (manage.py create_tenant) or fix OPTIONS['tenant']"
        )
    name = job_name(task.module_path)
    job = _existing(tenant, name, task)
    if job is not None:
        return job
    job = JobDefinition(tenant=tenant, name=name, target_ref=task.module_path, queue=task.queue_name)
    for field, value in {**JOB_DEFAULTS, **fields}.items():
        setattr(job, field, value)
    try:
        save_definition(job, ACTOR.format(alias=alias), note=f"created for {task.module_path} by the tasks backend")
    except ValidationError as exc:
        # Another process may have made it since _existing looked (its name is then "taken"): use that one.
        made = _existing(tenant, name, task)
        if made is not None:
            return made
        raise InvalidTask(f"{task.module_path} cannot be a Duetime job of tenant '{tenant_name}': {_messages(exc)}")
    except IntegrityError:
        # Another process made it first (save_definition's savepoint kept the caller's transaction usable).
        return _existing(tenant, name, task)
    return job


def _existing(tenant, name, task):
    job = JobDefinition.objects.select_related("tenant").filter(tenant=tenant, name=name).first()
    if job is not None and (job.target_kind != JobDefinition.TargetKind.PYTHON or job.target_ref != task.module_path):
        raise InvalidTask(
            f"tenant '{tenant.name}' already has a job named '{name}' that does not run {task.module_path}: "
            "rename that job"
        )
    return job


def _messages(exc):
    if hasattr(exc, "message_dict"):
        return "; ".join(f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items())
    return " ".join(exc.messages)
