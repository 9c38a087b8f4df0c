"""The portal's login, throttled: failed logins counted per user name and per client address.

After DUETIME_LOGIN_FAILURES_PER_USER failed logins for one user name, or
DUETIME_LOGIN_FAILURES_PER_ADDRESS from one address, within
DUETIME_LOGIN_LOCKOUT_MINUTES, that name (or that address) is locked out for
DUETIME_LOGIN_LOCKOUT_MINUTES: every login for it is refused, the right
password included, and the login page says so and how long to wait. A
successful login clears its user name's count. `0` turns a limit off.

Three pieces: the login form (`ThrottledLoginForm`, the site's `login_form`)
refuses a locked-out attempt before the password is checked and says why;
the authentication backend (`ThrottledModelBackend`) refuses it for any other
caller of `authenticate()`; Django's `user_login_failed` signal counts every
failure, whichever door it came through.

Counts live in Django's cache (as the API throttles' do: in process memory
unless CACHE_URL names a shared cache, which several web processes need).
Why not django-axes: docs/security.md, Portal hardening.
"""

import hashlib
import logging
import math
import time

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.dispatch import receiver

log = logging.getLogger(__name__)
PREFIX = "duetime:login"


def client_address(request):
    """REMOTE_ADDR: behind a reverse proxy, the ASGI server must set it from the proxy's headers."""
    return (request.META.get("REMOTE_ADDR") if request is not None else None) or "unknown"


def _subjects(request, username):
    """[(kind, cache id, limit)] the attempt is counted against: its user name (hashed) and its address."""
    found = [("address", client_address(request), settings.DUETIME_LOGIN_FAILURES_PER_ADDRESS)]
    if username:
        digest = hashlib.sha256(username.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        found.insert(0, ("user", digest, settings.DUETIME_LOGIN_FAILURES_PER_USER))
    return [(kind, ident, limit) for kind, ident, limit in found if limit]


def _window():
    return max(1, settings.DUETIME_LOGIN_LOCKOUT_MINUTES) * 60


def locked_out(request, username, now=None):
    """(kind, seconds left) of the first lock-out this attempt falls under ("user" or "address"), or None."""
    now = now or time.time()
    for kind, ident, _ in _subjects(request, username):
        until = cache.get(f"{PREFIX}:locked:{kind}:{ident}")
        if until is not None and until > now:
            return kind, math.ceil(until - now)
    return None


def count_failure(request, username, now=None):
    """Count one failed login against its user name and address; lock out whichever reaches its limit.

    Attempts refused while locked out are not counted again: a lock-out ends when it said it would.
    """
    now = now or time.time()
    if locked_out(request, username, now):
        return
    for kind, ident, limit in _subjects(request, username):
        key = f"{PREFIX}:failures:{kind}:{ident}"
        cache.add(key, 0, _window())
        try:
            failures = cache.incr(key)
        except ValueError:  # the window ended between add and incr: this failure opens the next one
            failures = 1
            cache.set(key, failures, _window())
        if failures >= limit:
            cache.set(f"{PREFIX}:locked:{kind}:{ident}", now + _window(), _window())
            cache.delete(key)
            log.warning(
                "portal login locked out for %s minutes: %s failed logins for one %s (address %s)",
                settings.DUETIME_LOGIN_LOCKOUT_MINUTES,
                failures,
                "user name" if kind == "user" else "address",
                client_address(request),
            )


def clear_user(username):
    """A successful login: its user name starts counting from zero again (its address does not)."""
    for kind, ident, _ in _subjects(None, username):
        if kind == "user":
            cache.delete(f"{PREFIX}:failures:{kind}:{ident}")


def lockout_message(kind, seconds):
    wait = f"{math.ceil(seconds / 60)} minute(s)" if seconds >= 60 else f"{seconds} second(s)"
    whose = "for this user name" if kind == "user" else "from your network address"
    return (
        f"Too many failed logins {whose}: logging in is locked for {wait}. "
        "Try again then; a correct password does not lift the lock earlier."
    )


class ThrottledLoginForm(AdminAuthenticationForm):
    """The admin's login form, refusing a locked-out user name or address before the password is checked."""

    def clean(self):
        username = self.cleaned_data.get("username")
        locked = locked_out(self.request, username)
        if locked:
            raise ValidationError(lockout_message(*locked), code="locked_out")
        try:
            return super().clean()
        except ValidationError:
            locked = locked_out(self.request, username)  # this failure may be the one that locked it
            if locked:
                raise ValidationError(lockout_message(*locked), code="locked_out") from None
            raise


class ThrottledModelBackend(ModelBackend):
    """Django's ModelBackend, refusing a locked-out user name or address for every caller of authenticate()."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if locked_out(request, username or kwargs.get("username")):
            raise PermissionDenied("locked out")  # ends authenticate(): no later backend is tried
        return super().authenticate(request, username=username, password=password, **kwargs)


@receiver(user_login_failed, dispatch_uid="duetime-login-failed")
def _failed(sender, credentials, request=None, **kwargs):
    count_failure(request, credentials.get("username"))


@receiver(user_logged_in, dispatch_uid="duetime-login-succeeded")
def _succeeded(sender, request, user, **kwargs):
    clear_user(user.get_username())
