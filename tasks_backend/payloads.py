"""A task's arguments as a run's payload: every argument by name, JSON only.

The worker calls a `python` task with the payload as keyword arguments
(runs.targets.call_task), so positional arguments are bound to their
parameter names here, at enqueue: `add.enqueue(1, b=2)` stores
`{"a": 1, "b": 2}`. Arguments that have no name (`*args`, positional-only
parameters) cannot travel that way and are refused.

Refusals use the errors Django's own backends raise for the same faults:
TypeError for arguments that do not fit the function or are not JSON types
(as django.utils.json.normalize_json and Django's docs do), ValueError for
JSON that Duetime will not store (NaN, NUL, over DUETIME_MAX_PAYLOAD_BYTES,
an obvious credential: jobs.validation.check_payload).
"""

import functools
import inspect
import json

from django.utils.json import normalize_json

from jobs.validation import check_payload

UNNAMED = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)


def payload_for(task, args, kwargs):
    """The payload (a dict of keyword arguments) that calls `task` as `task.func(*args, **kwargs)` would."""
    args, kwargs = normalize_json(args), normalize_json(kwargs)  # TypeError: not a JSON type
    signature = _signature(task.func, task.takes_context)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"the arguments do not fit {task.module_path}{signature}: {exc}") from None
    payload = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind in UNNAMED:
            raise TypeError(
                f"{task.module_path}: Duetime passes a task's arguments by name, so its parameter "
                f"'{name}' ({kind.description}) cannot be given: make it a named parameter"
            )
        if kind == inspect.Parameter.VAR_KEYWORD:
            payload.update(value)
        else:
            payload[name] = value
    _check_json(task, payload)
    return payload


def _check_json(task, payload):
    try:
        json.dumps(payload, allow_nan=False)
    except (ValueError, RecursionError) as exc:  # NaN; or nested beyond what encoding can walk
        raise ValueError(f"the arguments of {task.module_path} are not JSON: {exc}") from None
    problem = check_payload(payload)
    if problem:
        raise ValueError(f"the arguments of {task.module_path} cannot be stored: the payload {problem}")


@functools.cache
def _signature(func, takes_context):
    """The signature the caller fills in: the function's, less `context` when the task takes one."""
    signature = inspect.signature(func)
    parameters = list(signature.parameters.values())
    return signature.replace(parameters=parameters[1:] if takes_context else parameters)
