"""The Idempotency-Key header on the API's POSTs (the rules and the store: jobs/idempotency.py).

`@idempotent` on a view method reads the header, replays the first answer
with `Idempotent-Replayed: true`, or runs the view and keeps its answer.
A key reused for another request or still in flight raises the domain
exception, which the problem table answers (422, 409).
"""

import functools

from drf_spectacular.utils import OpenApiParameter
from rest_framework.response import Response

from jobs import idempotency, identifiers
from jobs.idempotency import HEADER, KEY_PATTERN, MAX_KEY_LENGTH
from scheduler_project.api.problems import Problem

IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER,
    {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH, "pattern": KEY_PATTERN},
    OpenApiParameter.HEADER,
    required=False,
    description="Repeat the request safely: the same key and body replay the first answer for 24 h.",
)


def read_key(request):
    """The request's Idempotency-Key, None when absent; a 400 problem when malformed or a credential.

    The problem never repeats the key: one that carries a credential is not echoed back.
    """
    key = request.headers.get(HEADER)
    if key is None:
        return None
    detail = identifiers.problem(key)
    if detail:
        raise Problem(
            "validation-error", f"{HEADER} {detail}.", errors=[{"field": HEADER, "pointer": "#", "detail": detail}]
        )
    return key


def idempotent(handler):
    """Decorate a DRF view method: honour Idempotency-Key for the caller's tenant."""

    @functools.wraps(handler)
    def wrapper(view, request, *args, **kwargs):
        key = read_key(request)
        if key is None:
            return handler(view, request, *args, **kwargs)
        request_hash = idempotency.fingerprint(request.method, request.path, request.data)
        record, replay = idempotency.begin(request.auth.tenant, key, request_hash)
        if replay:
            return Response(
                record.response_body, status=record.response_status, headers={"Idempotent-Replayed": "true"}
            )
        try:
            response = handler(view, request, *args, **kwargs)
        except BaseException:
            idempotency.finish(record, 500, None)
            raise
        idempotency.finish(record, response.status_code, response.data)
        return response

    return wrapper
