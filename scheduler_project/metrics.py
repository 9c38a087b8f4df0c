"""The web process's /metrics: its own counters (HTTP requests among them) and the database's gauges.

`metrics` is the view (routed in scheduler_project/urls.py); `RequestMetrics`
the middleware that counts every request by route pattern (never the raw
path: bounded labels), method and status. The database's gauges
(runs.metrics.DatabaseCollector) are registered here, in the web process only,
so each is exported once however many engine processes run.

Access: only `Authorization: Bearer <DUETIME_METRICS_TOKEN>` is answered;
anything else gets 404, as if there were no endpoint (the gauges name every
tenant). With the token unset the endpoint is closed, unless DEBUG is on (a
development install on loopback), where it is open (docs/operations.md).
"""

import hmac
import threading
import time

from django.conf import settings
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest

from runs import metrics as engine_metrics

METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
HTTP_REQUESTS = Counter(
    "duetime_http_requests", "HTTP requests served, by route pattern, method and status.", ["route", "method", "status"]
)
HTTP_SECONDS = Histogram(
    "duetime_http_request_duration_seconds", "Time to answer an HTTP request, by route pattern.", ["route"]
)
_registered = threading.Lock()
_collector = None


def _register_database_gauges():
    global _collector
    with _registered:
        if _collector is None:
            _collector = engine_metrics.DatabaseCollector()
            REGISTRY.register(_collector)


def authorized(request):
    """The request carries the metrics token; without one configured, only a DEBUG install answers."""
    token = settings.DUETIME_METRICS_TOKEN
    if not token:
        return settings.DEBUG
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


@require_GET
def metrics(request):
    if not authorized(request):
        raise Http404
    _register_database_gauges()
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


class RequestMetrics:
    """Counts each request as duetime_http_requests_total{route, method, status} and times it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        method = request.method if request.method in METHODS else "other"
        request_served(route, method, response.status_code, time.perf_counter() - started)
        return response


def request_served(route, method, status, seconds):
    HTTP_REQUESTS.labels(route, method, str(status)).inc()
    HTTP_SECONDS.labels(route).observe(seconds)
