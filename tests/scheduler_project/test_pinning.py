"""The primary pin: a safe request reads the replica unless its caller wrote within
DUETIME_REPLICA_PIN_SECONDS (a cookie for browsers, the bearer token for API clients).

The middleware runs around a view that records where a read of a run would go.
"""

import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from runs.models import Run
from scheduler_project.checks import duetime_settings
from scheduler_project.pinning import PIN_COOKIE, ReplicaPinMiddleware
from scheduler_project.routers import REPLICA, ReplicaRouter, reads_replica

router = ReplicaRouter()
ALICE_TOKEN = "dt_alice-secret"
BOB_TOKEN = "dt_bob-secret"


class Recorder:
    """The view: where would a read of a run go, for each request served. Answers `status`."""

    def __init__(self):
        self.reads = []
        self.status = 200

    def __call__(self, request):
        self.reads.append(router.db_for_read(Run))
        return HttpResponse("ok", status=self.status)


@pytest.fixture
def view():
    return Recorder()


@pytest.fixture
def serve(view):
    middleware = ReplicaPinMiddleware(view)

    def serve(method, token=None, cookies=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = getattr(RequestFactory(), method.lower())("/v1/jobs", headers=headers)
        request.COOKIES.update(cookies or {})
        response = middleware(request)
        return view.reads[-1], response

    return serve


def test_it_reads_the_replica_for_a_safe_request(serve):
    for method in ("GET", "HEAD", "OPTIONS"):
        assert serve(method)[0] == REPLICA
    assert not reads_replica(), "the scope ends with the request"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_a_write_reads_the_primary_and_pins_its_browser(serve, method):
    read, response = serve(method)
    assert read == "default"
    cookie = response.cookies[PIN_COOKIE]
    assert cookie["max-age"] == 5
    assert cookie["httponly"] and cookie["samesite"] == "Lax"


@override_settings(DUETIME_REPLICA_PIN_SECONDS=12)
def test_the_pin_lasts_duetime_replica_pin_seconds(serve):
    assert serve("POST")[1].cookies[PIN_COOKIE]["max-age"] == 12


def test_the_page_after_a_portal_write_reads_the_primary(serve):
    _, response = serve("POST")
    pinned = {PIN_COOKIE: response.cookies[PIN_COOKIE].value}
    read, after = serve("GET", cookies=pinned)
    assert read == "default"
    assert PIN_COOKIE not in after.cookies, "a read does not stretch the pin"


def test_a_token_that_wrote_reads_its_own_write(serve):
    """API clients often keep no cookies: the pin follows the bearer token."""
    serve("PUT", token=ALICE_TOKEN)
    assert serve("GET", token=ALICE_TOKEN)[0] == "default"
    assert serve("GET", token=BOB_TOKEN)[0] == REPLICA, "another token is not pinned"
    assert serve("GET")[0] == REPLICA


@pytest.mark.parametrize("status", [401, 403])
def test_a_caller_refused_at_the_door_is_not_pinned(view, serve, status):
    """It wrote nothing; and unknown tokens sent by the thousand must not fill the cache."""
    view.status = status
    _, response = serve("POST", token=ALICE_TOKEN)
    assert PIN_COOKIE not in response.cookies
    view.status = 200
    assert serve("GET", token=ALICE_TOKEN)[0] == REPLICA


def test_the_cache_never_holds_the_secret(serve):
    from django.core.cache import cache

    serve("POST", token=ALICE_TOKEN)
    keys = list(cache._cache)  # the locmem cache of the test settings
    assert keys and not any(ALICE_TOKEN in key for key in keys)


def test_it_pins_under_asgi_too(view):
    async def handler(request):
        return view(request)

    middleware = ReplicaPinMiddleware(handler)
    factory = RequestFactory()
    async_to_sync(middleware)(factory.get("/admin/"))
    response = async_to_sync(middleware)(factory.post("/admin/", headers={"Authorization": f"Bearer {ALICE_TOKEN}"}))
    async_to_sync(middleware)(factory.get("/v1/jobs", headers={"Authorization": f"Bearer {ALICE_TOKEN}"}))
    assert view.reads == [REPLICA, "default", "default"]
    assert PIN_COOKIE in response.cookies


@pytest.mark.parametrize("seconds", [0, -5])
def test_a_pin_that_never_holds_fails_the_checks(settings, seconds):
    """0 s would cache nothing and expire the cookie at once: every write followed by a stale read."""
    settings.DUETIME_REPLICA_PIN_SECONDS = seconds
    errors = duetime_settings(None)
    assert [error.id for error in errors] == ["duetime.E001"]
    assert "DUETIME_REPLICA_PIN_SECONDS" in errors[0].msg
