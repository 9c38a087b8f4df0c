"""System checks for the DUETIME_* settings: a bad knob fails `manage.py check`."""

import importlib.util
import re

from django.conf import settings
from django.core.checks import Error, register

MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
POSITIVE_KNOBS = (
    "DUETIME_LEASE_SECONDS",
    "DUETIME_HEARTBEAT_SECONDS",
    "DUETIME_LOOKAHEAD_SECONDS",
    "DUETIME_MISSED_RUN_CAP",
    "DUETIME_CLAIM_BATCH",
    "DUETIME_POLL_SECONDS",
    "DUETIME_MAX_PAYLOAD_BYTES",
    "DUETIME_IDEMPOTENCY_TTL_HOURS",
    "DUETIME_LIVE_POLL_SECONDS",
)
THROTTLE_KNOBS = ("DUETIME_AUTH_FAILURES_PER_MINUTE", "DUETIME_TOKEN_REQUESTS_PER_MINUTE")


# run_worker and run_scheduler run only the checks with this tag at start: the knobs, not the URL and
# admin checks, which import the whole web surface (a second of a replacement worker's start).
DUETIME = "duetime"


@register(DUETIME)
def duetime_settings(app_configs, **kwargs):
    errors = []
    for name in POSITIVE_KNOBS:
        value = getattr(settings, name, None)
        if not isinstance(value, (int, float)) or value <= 0:
            errors.append(Error(f"{name} must be a positive number, not {value!r}.", id="duetime.E001"))
    if settings.DUETIME_HEARTBEAT_SECONDS * 2 > settings.DUETIME_LEASE_SECONDS:
        errors.append(
            Error(
                "DUETIME_HEARTBEAT_SECONDS must be at most half of DUETIME_LEASE_SECONDS, "
                "or a single late heartbeat loses the lease.",
                id="duetime.E002",
            )
        )
    for name in THROTTLE_KNOBS:
        value = getattr(settings, name, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            errors.append(Error(f"{name} must be a whole number (0 turns it off), not {value!r}.", id="duetime.E010"))
    errors.extend(_task_module_errors())
    return errors


def _task_module_errors():
    """Every DUETIME_TASK_MODULES entry is an importable module path (a typo would refuse every job of it)."""
    modules = settings.DUETIME_TASK_MODULES
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
        return [Error(f"DUETIME_TASK_MODULES must be a list of module paths, not {modules!r}.", id="duetime.E003")]
    errors = []
    for module in modules:
        if not _importable(module):
            errors.append(
                Error(
                    f"DUETIME_TASK_MODULES lists {module!r}, which is not an importable module.",
                    hint="Remove it, or fix the dotted path (e.g. billing.tasks).",
                    id="duetime.E003",
                )
            )
    return errors


def _importable(module):
    """True when `module` is a dotted path that finds a module, without running it."""
    if not MODULE_RE.match(module):
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a missing parent package
        return False
