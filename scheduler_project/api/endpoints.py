"""What every /v1 view shares: bearer tokens, bounded JSON in, problems out, cursor pages.

`TeamEndpoint` and `WorkerEndpoint` are the base classes of the API views;
`offload` lets a long-polling view wait without holding the ASGI server's
one thread for synchronous views.
"""

import functools
import re

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, pagination, parsers, permissions, serializers
from rest_framework.views import APIView

from jobs import roles
from jobs.audit import actor_for_token
from jobs.validation import MAX_JSON_DEPTH, json_depth
from scheduler_project.api.auth import BearerTokenAuthentication, TeamToken, WorkerToken
from scheduler_project.api.problems import Problem, invalid

# A body may hold a payload of DUETIME_MAX_PAYLOAD_BYTES (compact UTF-8 JSON);
# as sent it can be several times larger (\uXXXX escapes, indentation). Bodies
# beyond this factor are refused before they are read.
BODY_SLACK_FACTOR = 6


class BoundedJSONParser(parsers.JSONParser):
    """JSON only, never a body far larger than any acceptable request, nor nested deeper than MAX_JSON_DEPTH.

    Depth is checked here, as the body is parsed, for every /v1 endpoint: no
    view, serializer or payload check ever walks deeper JSON (400
    `malformed-request`).
    """

    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        limit = settings.DUETIME_MAX_PAYLOAD_BYTES * BODY_SLACK_FACTOR + 64 * 1024
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        except ValueError:
            length = 0
        if length > limit:
            raise Problem("payload-too-large", f"The request body is {length} bytes; at most {limit} are read.")
        try:
            data = super().parse(stream, media_type, parser_context)
            too_deep = json_depth(data) > MAX_JSON_DEPTH
        except RecursionError:  # deeper than even the parser can go
            too_deep = True
        if too_deep:
            raise Problem(
                "malformed-request",
                f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays, the most accepted.",
            )
        return data


class CursorPage(pagination.CursorPagination):
    """Opaque cursors: stable under inserts, and each page is one index range scan.

    `limit` is checked rather than silently replaced by the default: a client
    asking for 500 rows learns it gets at most 200.
    """

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200
    ordering = "-id"

    # What a position in a cursor may look like for this ordering; anything else
    # was not made by us, and must not reach a query (PostgreSQL refuses NUL).
    position_pattern = r"^[0-9]{1,19}$"

    def decode_cursor(self, request):
        cursor = super().decode_cursor(request)
        if cursor and cursor.position is not None and not re.fullmatch(self.position_pattern, cursor.position):
            raise exceptions.NotFound(self.invalid_cursor_message)
        return cursor

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= self.max_page_size):
            detail = f"must be a whole number from 1 to {self.max_page_size}"
            raise invalid([{"field": "limit", "pointer": "#", "detail": detail}])
        return int(raw)


PAGE_PARAMETERS = [
    OpenApiParameter("cursor", str, description="From the previous page's `next` or `previous` link."),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": CursorPage.max_page_size},
        description=f"Page size, 1-{CursorPage.max_page_size} (default {CursorPage.page_size}).",
    ),
]


def page_of(item_serializer, name):
    """The schema of one cursor page of `item_serializer` rows (component `name`)."""
    fields = {
        "next": serializers.URLField(allow_null=True, help_text="The next page, or null on the last."),
        "previous": serializers.URLField(allow_null=True, help_text="The previous page, or null on the first."),
        "results": item_serializer(many=True),
        "__doc__": f"One page of {item_serializer.__name__.removesuffix('Serializer')} rows.",
    }
    return type(f"{name}Serializer", (serializers.Serializer,), fields)


class Endpoint(APIView):
    authentication_classes = [BearerTokenAuthentication]
    parser_classes = [BoundedJSONParser]

    @property
    def actor(self):
        return actor_for_token(self.request.auth)


class TeamEndpoint(Endpoint):
    """A team token's endpoint. Reads need the viewer role; every other method needs
    what `method_roles` names for it, owner unless the view says less (jobs/roles.py)."""

    permission_classes = [TeamToken]
    method_roles = {}  # HTTP method -> the role it needs, for methods that need less than owner

    def role_needed(self, request):
        # A method the view does not serve needs nothing: it answers 405 whatever the role.
        if request.method in permissions.SAFE_METHODS or not hasattr(self, request.method.lower()):
            return roles.VIEW
        return self.method_roles.get(request.method, roles.OWN)


class WorkerEndpoint(Endpoint):
    permission_classes = [WorkerToken]


def offload(view):
    """Serve a synchronous view from a worker thread of its own under ASGI.

    Django runs synchronous views in one shared thread per ASGI process, so a
    view that waits (the lease long-poll) would stall every other request.
    Wrapped, the view is an async view that runs the synchronous one in the
    default executor; under WSGI it behaves as before. Executor threads come
    and go with event loops, so the thread's database connection is closed
    when the view returns rather than left for a thread that may not come back.
    """

    def run(request, *args, **kwargs):
        try:
            response = view(request, *args, **kwargs)
            if hasattr(response, "render"):
                response.render()  # renders here, off the shared thread
            return response
        finally:
            connections.close_all()

    async def async_view(request, *args, **kwargs):
        return await sync_to_async(run, thread_sensitive=False)(request, *args, **kwargs)

    functools.update_wrapper(async_view, view)
    del async_view.__wrapped__  # keep it recognised as a coroutine function
    return async_view
