"""A task's arguments as a run's `args` and payload: kept apart, exactly as given, JSON only.

The worker calls a `python` task as `task.func(*run.args, **run.payload)`
(runs.targets.call_task), so `add.enqueue(1, b=2)` stores args `[1]` and the
payload `{"b": 2}`, and `get_result` gives back the same `args` and `kwargs`.
Positional-only parameters and `*args`/`**kwargs` travel as they are. The
arguments are checked against the function's signature here, at enqueue, so
a call that cannot fit fails in the caller, not later on a worker.

Refusals use the errors Django's own backends raise for the same faults:
TypeError for arguments that do not fit the function or are not JSON types
(as django.utils.json.normalize_json and Django's docs do), ValueError for
JSON that Duetime will not store (NaN, NUL, over DUETIME_MAX_PAYLOAD_BYTES for
args and kwargs together, an obvious credential: jobs.validation.check_payload).
"""

import functools
import inspect
import json

from django.utils.json import normalize_json

from jobs.validation import check_payload


def arguments_for(task, args, kwargs):
    """(args as a list, kwargs as a dict) to store for `task.func(*args, **kwargs)`, as JSON will give them back.

    Raises TypeError when they are not JSON types or do not fit the function, ValueError when Duetime
    would not store them.
    """
    args, kwargs = list(normalize_json(list(args))), normalize_json(dict(kwargs))  # TypeError: not a JSON type
    signature = _signature(task.func, task.takes_context)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"the arguments do not fit {task.module_path}{signature}: {exc}") from None
    _check_json(task, {"args": args, "kwargs": kwargs})
    return args, kwargs


def _check_json(task, arguments):
    try:
        json.dumps(arguments, allow_nan=False)
    except (ValueError, RecursionError) as exc:  # NaN; or nested beyond what encoding can walk
        raise ValueError(f"the arguments of {task.module_path} are not JSON: {exc}") from None
    problem = check_payload(arguments)
    if problem:
        raise ValueError(f"the arguments of {task.module_path} cannot be stored: their JSON {problem}")


@functools.cache
def _signature(func, takes_context):
    """The signature the caller fills in: the function's, less `context` when the task takes one."""
    signature = inspect.signature(func)
    parameters = list(signature.parameters.values())
    return signature.replace(parameters=parameters[1:] if takes_context else parameters)
