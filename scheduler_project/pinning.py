"""Which web requests may read the replica: the primary pin after a write.

`ReplicaPinMiddleware` (installed with the replica, settings.py) serves a safe
request (GET, HEAD, OPTIONS) inside `routers.replica_reads()`, unless the
caller wrote within the last DUETIME_REPLICA_PIN_SECONDS: then it reads the
primary, and sees its own write however far the replica lags. Any other
method is a write: it reads the primary, and it pins its caller, who is

- a browser (the portal): by a cookie that expires with the pin, so the page
  after a POST and its redirect reads the primary;
- an API client: by its bearer token, in the cache (CACHES; several web
  processes must share one, as for the API throttles), so a client that sends
  no cookies still reads its own write.

A pinned read is a read of the primary; a missing pin (an expired cookie, a
cache that was cleared) only makes a read as late as the replica.
"""

import hashlib

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.cache import cache

from scheduler_project.routers import replica_reads

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PIN_COOKIE = "duetime_primary"
PIN_KEY = "duetime:primary-pin:"
REFUSED = frozenset({401, 403})


class ReplicaPinMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        if not may_read_replica(request):
            return pin(request, self.get_response(request))
        with replica_reads():
            return self.get_response(request)

    async def _acall(self, request):
        if not may_read_replica(request):
            return pin(request, await self.get_response(request))
        with replica_reads():
            return await self.get_response(request)


def may_read_replica(request):
    """True for a safe request whose caller has not written within the pin (cookie or bearer token)."""
    if request.method not in SAFE_METHODS or PIN_COOKIE in request.COOKIES:
        return False
    key = _token_key(request)
    return key is None or not cache.get(key)


def pin(request, response):
    """After a write (an unsafe method, whatever its outcome), pin its caller to the primary.

    Not after 401 or 403: a caller refused at the door wrote nothing, and a flood
    of unknown tokens must not fill the cache with pins.
    """
    if request.method in SAFE_METHODS or response.status_code in REFUSED:
        return response  # a safe request was pinned already: the pin runs from the write, not the last read
    seconds = settings.DUETIME_REPLICA_PIN_SECONDS
    response.set_cookie(
        PIN_COOKIE,
        "1",
        max_age=seconds,
        httponly=True,
        samesite="Lax",
        secure=settings.SESSION_COOKIE_SECURE,
    )
    key = _token_key(request)
    if key is not None:
        cache.set(key, True, timeout=seconds)
    return response


def _token_key(request):
    """The cache key of the request's bearer token (its hash: the secret never reaches the cache), or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return PIN_KEY + hashlib.sha256(secret.strip().encode()).hexdigest()
