"""The secrets an operator configures for http targets, named by jobs and never stored.

DUETIME_HTTP_SECRETS (settings, from the environment) maps a tenant to its
secrets by name: `{"acme": {"billing-api": "<token>"}}`. A job of tenant acme
names `billing-api` as its bearer secret; the worker sends
`Authorization: Bearer <token>` on each call, reading the value from its
settings at the call (a removed name fails the call for good).
The definition, the API, the portal and the audit hold the name only.

The tenant is part of the lookup: one team cannot name (and so send to a URL
of its choosing) a secret the operator configured for another.
"""

import re

from django.conf import settings

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# A header value: visible ASCII and spaces, no CR, LF or other control character.
VALUE_RE = re.compile(r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$")


class UnknownSecret(Exception):
    """The tenant has no http secret of that name (any more)."""


def names(tenant_name):
    """The secret names configured for `tenant_name`, sorted."""
    return sorted(settings.DUETIME_HTTP_SECRETS.get(tenant_name, {}))


def value(tenant_name, name):
    """The value of `tenant_name`'s secret `name`, read now. Raises UnknownSecret."""
    found = settings.DUETIME_HTTP_SECRETS.get(tenant_name, {}).get(name)
    if not found:
        configured = ", ".join(names(tenant_name)) or "none"
        raise UnknownSecret(
            f"tenant {tenant_name} has no http secret named {name!r} (configured: {configured}); "
            "the operator sets them in DUETIME_HTTP_SECRETS"
        )
    return found


def problems(configured):
    """What is wrong with a DUETIME_HTTP_SECRETS value, one message each (the system check's)."""
    if not isinstance(configured, dict):
        return [f"must be a JSON object of tenants, not {type(configured).__name__}"]
    found = []
    for tenant, secrets in configured.items():
        if not isinstance(secrets, dict):
            found.append(f"tenant {tenant!r}: must be an object of secret names, not {type(secrets).__name__}")
            continue
        for name, text in secrets.items():
            if not NAME_RE.match(name):
                found.append(f"tenant {tenant!r}: {name!r} is not a secret name (letters, digits, '.', '_', '-')")
            elif not isinstance(text, str) or not VALUE_RE.match(text):
                # The value itself is never repeated: the message may reach a log.
                found.append(
                    f"tenant {tenant!r}, secret {name!r}: the value must be a non-empty header value "
                    "(visible ASCII, no line breaks)"
                )
    return found
