"""RFC 9457 problem details for every API error.

Every 4xx and 5xx of /v1 is `application/problem+json`:

    {"type": "https://duetime.dev/problems/stale-lease", "title": "Stale lease",
     "status": 409, "detail": "run 7: fencing token 41 is not the current lease"}

Validation errors add `errors`, one entry per bad field, named as in the
request body (`schedule.cron`) and as a JSON pointer (`#/schedule/cron`).

Views raise `Problem(slug, detail)`. Domain modules raise their own
exceptions (`QuotaExceeded`, `KeyReused`, `StaleLease`, ...), which
`DOMAIN_ERRORS` maps to problems in one table, so a view lets them pass.
Those, DRF's own exceptions (401, 403, 404, 405, 406, 415, 429, parse
errors), Django's Http404 and anything unexpected (500) are turned into
problems by `exception_handler`, the DRF EXCEPTION_HANDLER. Unknown /v1 URLs
reach `not_found`, the last /v1 route.
"""

import dataclasses
import logging
from collections.abc import Callable

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import set_rollback

from jobs.idempotency import KeyInFlight, KeyReused
from jobs.permissions import Revoked
from jobs.quotas import QuotaExceeded
from jobs.roles import InsufficientRole
from jobs.schedules import SetChanged
from jobs.tokens import QueueNotAllowed
from runs.controls import ConcurrencyLimit
from runs.transitions import StaleLease

logger = logging.getLogger("duetime.api")

BASE = "https://duetime.dev/problems/"
CONTENT_TYPE = "application/problem+json"

# slug: (status, title). The table in docs/api.md lists the same types.
TYPES = {
    "validation-error": (400, "Invalid request"),
    "invalid-schedule": (400, "Invalid schedule"),
    "malformed-request": (400, "Malformed request"),
    "unauthorized": (401, "Missing or invalid token"),
    "forbidden": (403, "Not allowed for this token"),
    "insufficient-role": (403, "The token's role does not allow this"),
    "permission-revoked": (403, "The tenant may no longer run this job's target"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "not-acceptable": (406, "Not acceptable"),
    "stale-lease": (409, "Stale lease"),
    "concurrency-limit": (409, "Concurrency limit reached"),
    "invalid-state": (409, "Not possible in the current state"),
    "idempotency-key-in-use": (409, "Idempotency key in use"),
    "precondition-failed": (412, "The resource changed since it was read"),
    "payload-too-large": (413, "Payload too large"),
    "unsupported-media-type": (415, "Unsupported media type"),
    "idempotency-key-reused": (422, "Idempotency key reused"),
    "quota-exceeded": (429, "Quota exceeded"),
    "rate-limited": (429, "Too many requests"),
    "server-error": (500, "Internal server error"),
}

# DRF's exceptions, by class, to their problem type.
DRF_TYPES = (
    (exceptions.NotAuthenticated, "unauthorized"),
    (exceptions.AuthenticationFailed, "unauthorized"),
    (exceptions.PermissionDenied, "forbidden"),
    (exceptions.NotFound, "not-found"),
    (exceptions.MethodNotAllowed, "method-not-allowed"),
    (exceptions.NotAcceptable, "not-acceptable"),
    (exceptions.UnsupportedMediaType, "unsupported-media-type"),
    (exceptions.Throttled, "rate-limited"),
    (exceptions.ParseError, "malformed-request"),
)


@dataclasses.dataclass(frozen=True)
class DomainError:
    """How a domain exception reads as a problem: its type (which gives status and title),
    the detail built from the exception, and the headers built from it."""

    slug: str
    detail: Callable[[Exception], str] = str
    headers: Callable[[Exception], dict] = lambda exc: {}


def retry_after(exc):
    """`Retry-After` from the exception's `retry_after` seconds; none when waiting does not help."""
    return {} if exc.retry_after is None else {"Retry-After": str(exc.retry_after)}


def role_detail(exc):
    return (
        f"{exc.what} needs a team token with the role {exc.needed} or above; this token's role is {exc.role}. "
        "An owner of the tenant can change a token's role in the portal (API tokens), or issue one with "
        f"manage.py create_token --role {exc.needed}."
    )


def lost_lease(exc):
    return f"{exc}. The lease was lost (expired, cancelled or taken by another worker): stop working on this run."


# Domain exception -> problem: the one table, listed in docs/api.md. The first
# class the exception is an instance of wins.
DOMAIN_ERRORS = {
    QuotaExceeded: DomainError("quota-exceeded", headers=retry_after),
    KeyReused: DomainError("idempotency-key-reused"),
    KeyInFlight: DomainError("idempotency-key-in-use", headers=retry_after),
    QueueNotAllowed: DomainError("forbidden"),
    InsufficientRole: DomainError("insufficient-role", detail=role_detail),
    Revoked: DomainError("permission-revoked"),
    StaleLease: DomainError("stale-lease", detail=lost_lease),
    ConcurrencyLimit: DomainError("concurrency-limit"),
    SetChanged: DomainError("precondition-failed"),
}


def type_uri(slug):
    return BASE + slug


class Problem(exceptions.APIException):
    """An API error with a problem type. `errors` lists bad fields; `headers` adds response headers."""

    def __init__(self, slug, detail=None, *, errors=None, headers=None):
        status, title = TYPES[slug]
        self.slug, self.status_code, self.title = slug, status, title
        self.errors = errors
        self.headers = headers or {}
        super().__init__(detail or title)

    def body(self):
        body = {
            "type": type_uri(self.slug),
            "title": self.title,
            "status": self.status_code,
            "detail": str(self.detail),
        }
        if self.errors is not None:
            body["errors"] = self.errors
        return body


def field_errors(detail, prefix=""):
    """Flatten DRF's nested error detail into [{"field", "pointer", "detail"}]."""
    found = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "" if key in ("non_field_errors", "__all__") else str(key)
            found += field_errors(value, f"{prefix}.{name}" if prefix and name else prefix or name)
    elif isinstance(detail, list) and detail and all(isinstance(d, (str, exceptions.ErrorDetail)) for d in detail):
        for message in detail:
            found.append(
                {"field": prefix, "pointer": "#/" + prefix.replace(".", "/") if prefix else "#", "detail": str(message)}
            )
    elif isinstance(detail, list):
        for index, value in enumerate(detail):
            if value:
                found += field_errors(value, f"{prefix}.{index}" if prefix else str(index))
    else:
        found.append(
            {"field": prefix, "pointer": "#/" + prefix.replace(".", "/") if prefix else "#", "detail": str(detail)}
        )
    return found


def invalid(errors, slug="validation-error"):
    """A 400 problem listing `errors` ([{"field", "pointer", "detail"}]); detail names the fields."""
    described = "; ".join(f"{e['field'] or 'request'}: {e['detail']}" for e in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return Problem(slug, f"{described}{more}", errors=errors)


def is_schedule_error(errors):
    return any(e["field"].startswith("schedule") for e in errors)


def validated(serializer_class, data):
    """The serializer's validated data, or a 400 problem listing every bad field
    (`invalid-schedule` when one of them is part of the schedule)."""
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        errors = field_errors(serializer.errors)
        raise invalid(errors, "invalid-schedule" if is_schedule_error(errors) else "validation-error")
    return serializer.validated_data


def from_domain(exc):
    """The Problem for a domain exception of DOMAIN_ERRORS, or None."""
    for cls, error in DOMAIN_ERRORS.items():
        if isinstance(exc, cls):
            return Problem(error.slug, error.detail(exc), headers=error.headers(exc))
    return None


def as_problem(exc):
    """The Problem for any exception a view raised, or None for an unexpected one (a 500)."""
    if isinstance(exc, Problem):
        return exc
    problem = from_domain(exc)
    if problem is not None:
        return problem
    if isinstance(exc, exceptions.ValidationError):
        return invalid(field_errors(exc.detail))
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        return invalid(field_errors(detail))
    if isinstance(exc, Http404):
        return Problem("not-found", "There is nothing here.")
    if isinstance(exc, DjangoPermissionDenied):
        return Problem("forbidden")
    if isinstance(exc, RequestDataTooBig):
        return Problem("payload-too-large", "The request body is too large.")
    for cls, slug in DRF_TYPES:
        if isinstance(exc, cls):
            problem = Problem(slug, str(exc.detail))
            if getattr(exc, "auth_header", None):
                problem.headers["WWW-Authenticate"] = exc.auth_header
            if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
                problem.headers["Retry-After"] = str(max(1, int(exc.wait)))
            return problem
    if isinstance(exc, exceptions.APIException):
        problem = Problem("server-error" if exc.status_code >= 500 else "validation-error", str(exc.detail))
        problem.status_code = exc.status_code
        return problem
    return None


def exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER: every error as application/problem+json."""
    problem = as_problem(exc)
    if problem is None:
        view = context.get("view")
        logger.exception("unexpected error in %s", type(view).__name__ if view else "API", exc_info=exc)
        problem = Problem("server-error", "Something went wrong on our side; it has been logged.")
    set_rollback()
    return Response(problem.body(), status=problem.status_code, headers=problem.headers, content_type=CONTENT_TYPE)


@csrf_exempt
def not_found(request, *args, **kwargs):
    """The last /v1 route: an unknown URL is a 404 problem, whatever the method."""
    body = Problem("not-found", f"No API endpoint at {request.path}. See /v1/docs.").body()
    return JsonResponse(body, status=404, content_type=CONTENT_TYPE)


class ProblemSerializer(serializers.Serializer):
    """For the OpenAPI schema: the shape of every error answer."""

    type = serializers.URLField(help_text="https://duetime.dev/problems/<slug>; see docs/api.md.")
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    errors = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        required=False,
        help_text="Validation errors only: one {field, pointer, detail} per bad field.",
    )


DESCRIPTIONS = {
    400: "validation-error, invalid-schedule or malformed-request",
    401: "unauthorized: no token, an unknown one or a revoked one",
    403: "forbidden (the token's kind or queues do not allow this) or insufficient-role (its role does not)",
    404: "not-found (also another tenant's object)",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "stale-lease, concurrency-limit, invalid-state or idempotency-key-in-use",
    412: "precondition-failed: If-Match names a version that is no longer current",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "idempotency-key-reused",
    429: "quota-exceeded or rate-limited (see Retry-After)",
}


def problem_responses(*statuses):
    """drf-spectacular `responses` entries for the problems an operation can answer."""
    # 429: the throttles answer any call; 404: a path that matches no route (a job name with a
    # character names cannot hold, say) is answered by the catch-all not-found problem.
    every = {401, 403, 404, 405, 406, 429} | set(statuses)
    return {
        (status, CONTENT_TYPE): OpenApiResponse(ProblemSerializer, description=DESCRIPTIONS[status])
        for status in sorted(every)
    }
