"""Throttles: a client guessing tokens, and a token sending too fast (429 `rate-limited`, with Retry-After).

- Failed authentication, per client address: after
  DUETIME_AUTH_FAILURES_PER_MINUTE failed bearer tokens in a minute, every
  request from that address that carries a token is refused until the minute
  is over, even one with a valid token (a guesser who finds one learns
  nothing). The lock-out is logged once, with the address and the count,
  never the token.
- Requests per token: at most DUETIME_TOKEN_REQUESTS_PER_MINUTE (0: no limit).

Counts live in Django's default cache, one counter per window that starts at
the first event (so a burst is never split by a clock boundary) and ends 60 s
later. The default cache is in process memory: one web process counts alone,
so several web processes need a shared cache (CACHES, e.g. Redis, from
CACHE_URL). A cache that forgets (restart, eviction) only forgives early.
"""

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache
from rest_framework import exceptions, throttling

from jobs.models import ApiToken

log = logging.getLogger(__name__)
WINDOW = 60


def _count(kind, ident, now):
    """Count one event of `kind` for `ident`; returns (events in its window, seconds until the window ends)."""
    key = f"duetime:throttle:{kind}:{ident}"
    cache.add(f"{key}:since", now, WINDOW)
    cache.add(key, 0, WINDOW)
    try:
        count = cache.incr(key)
    except ValueError:  # the window ended between add and incr: this event opens the next one
        count = 1
        cache.set(f"{key}:since", now, WINDOW)
        cache.set(key, count, WINDOW)
    return count, _wait(key, now)


def _wait(key, now):
    since = cache.get(f"{key}:since", now)
    return max(1, math.ceil(since + WINDOW - now))


def client_address(request):
    """The address failed authentications are counted against.

    REMOTE_ADDR: behind a reverse proxy, the proxy must set it from the real
    client (e.g. uvicorn/daphne --proxy-headers), or every client shares one count.
    """
    return request.META.get("REMOTE_ADDR") or "unknown"


def refuse_locked_out(request, now=None):
    """Raise Throttled if the request's address failed authentication too often this minute."""
    limit = settings.DUETIME_AUTH_FAILURES_PER_MINUTE
    key = f"duetime:throttle:auth-failure:{client_address(request)}"
    failures = cache.get(key, 0)
    if limit and failures >= limit:
        wait = _wait(key, now or time.time())
        raise exceptions.Throttled(wait, f"Too many failed authentications from this address; try again in {wait} s.")


def count_failure(request, now=None):
    """Count a failed authentication from the request's address; log the lock-out when it starts."""
    address = client_address(request)
    failures, wait = _count("auth-failure", address, now or time.time())
    if failures == settings.DUETIME_AUTH_FAILURES_PER_MINUTE:
        log.warning(
            "API authentication locked out for %s for %s s: %s failed tokens within a minute", address, wait, failures
        )


class TokenRateThrottle(throttling.BaseThrottle):
    """At most DUETIME_TOKEN_REQUESTS_PER_MINUTE requests per API token (0: unlimited).

    One counter per token in the cache: constant cost per request, unlike
    DRF's SimpleRateThrottle, which keeps every request's timestamp.
    """

    def allow_request(self, request, view):
        limit = settings.DUETIME_TOKEN_REQUESTS_PER_MINUTE
        if not limit or not isinstance(request.auth, ApiToken):
            return True  # no token: authentication and permissions answer first
        count, self.remaining = _count("token", f"{request.auth.pk}:{request.auth.prefix}", time.time())
        return count <= limit

    def wait(self):
        return self.remaining
