"""System checks for the DUETIME_* settings: a bad knob fails `manage.py check`."""

from django.conf import settings
from django.core.checks import Error, register

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


@register()
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
    return errors
