"""Which Django tasks a `python` job may name: the task registry.

A `python` target is a module-level function decorated with Django's own
`@task` (django.tasks), defined in a module the operator listed in
DUETIME_TASK_MODULES, and inside one of its tenant's allowed module prefixes
(`Tenant.task_module_prefixes`, edited by superusers). Anything else would
let one team make the shared worker import and call arbitrary code.

Save-time validation (jobs.validation) asks both questions; the worker
(runs.targets) asks both again before every call, so a module the operator
has since removed from the list, or a prefix a superuser has since taken
from the tenant, no longer runs (`NotAllowed`, a permanent failure). Trigger,
resume, replay and materialisation ask the second too (jobs.permissions).
"""

import importlib

from django.conf import settings
from django.tasks import Task

HOW_TO_REGISTER = (
    "To register a handler: decorate a module-level function with @task (from django.tasks import task), "
    "list its module in DUETIME_TASK_MODULES, and ask a superuser to allow that module prefix for your tenant "
    "(see docs/tasks.md)."
)


class NotRegistered(Exception):
    """The reference does not name a registered task; the message says why and how to register it."""


class NotAllowed(Exception):
    """The task's tenant may no longer run it (its module prefix was revoked); the message names the module."""


def registered_task(ref):
    """The django.tasks.Task that `ref` (module.function) names; raises NotRegistered.

    Only modules listed in DUETIME_TASK_MODULES are ever imported, so a
    reference can never make the process import code the operator did not list.
    """
    module_name, _, name = ref.rpartition(".")
    if module_name not in settings.DUETIME_TASK_MODULES:
        raise NotRegistered(
            f"'{module_name}' is not a registered task module (DUETIME_TASK_MODULES). {HOW_TO_REGISTER}"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a listed module that fails as it is imported is not a registry
        # An ImportError, or whatever its code raised (a SyntaxError, a missing setting): the job is refused
        # with the reason, at save (a validation error) as at run time (a permanent failure), never a crash.
        raise NotRegistered(
            f"the task module '{module_name}' cannot be imported: {exc.__class__.__name__}: {str(exc)[:300]}"
        ) from exc
    task = getattr(module, name, None)
    if not isinstance(task, Task):
        raise NotRegistered(f"'{ref}' is not a Django task. {HOW_TO_REGISTER}")
    if task.module_path != ref:
        # A listed module re-exporting a task defined elsewhere would smuggle an unlisted module in.
        raise NotRegistered(f"'{ref}' is defined in another module: name it as {task.module_path}")
    return task


def tenant_allows(prefixes, ref):
    """True when the module of `ref` is one of `prefixes` or inside one (whole dotted parts only)."""
    module_name = ref.rpartition(".")[0]
    return any(module_name == prefix or module_name.startswith(prefix + ".") for prefix in prefixes)


def revoked(prefixes, ref, tenant=""):
    """Why the tenant whose allowed prefixes are `prefixes` may not run `ref` (None when it may).

    Said as a revocation: the job was saved under a prefix that allowed it, so
    a refusal now means a superuser took the prefix away.
    """
    if tenant_allows(prefixes, ref):
        return None
    module = ref.rpartition(".")[0]
    whose = f"tenant '{tenant}'" if tenant else "its tenant"
    allowed = ", ".join(prefixes) or "none"
    return (
        f"permission revoked: {whose} may no longer run tasks from '{module}' (the module prefix that allowed "
        f"it was removed; allowed module prefixes now: {allowed})"
    )
