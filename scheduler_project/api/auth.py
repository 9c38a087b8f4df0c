"""Bearer tokens over HTTP: who is calling (`BearerTokenAuthentication`) and
whether the token's kind may call this endpoint (`TeamToken`, `WorkerToken`),
and a team token's role the method (`TeamToken`: 403 `insufficient-role`).

`Authorization: Bearer <secret>` is looked up by jobs.tokens. The tenant
always comes from the token, never from the request; lookups are narrowed to
it by scheduler_project/api/lookups.py. An address that sends too many
unknown tokens is locked out for a while (scheduler_project/api/throttles.py).
"""

import dataclasses

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from jobs import roles, tokens
from jobs.models import ApiToken
from scheduler_project.api import throttles
from scheduler_project.api.problems import Problem

MISSING = "Send 'Authorization: Bearer <token secret>'."


@dataclasses.dataclass(frozen=True)
class Caller:
    """request.user for API calls: the token and its tenant."""

    token: ApiToken

    is_authenticated = True

    @property
    def tenant(self):
        return self.token.tenant


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        throttles.refuse_locked_out(request)  # 429 before the token is even looked at
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            throttles.count_failure(request)
            raise exceptions.AuthenticationFailed(MISSING)
        try:
            token = tokens.authenticate(secret.strip())
        except tokens.InvalidToken as exc:
            throttles.count_failure(request)
            # DRF's contract: an authenticator raises AuthenticationFailed, so the
            # request is marked unauthenticated and the answer carries the challenge.
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        return Caller(token), token

    def authenticate_header(self, request):
        return 'Bearer realm="duetime"'


class _TokenKind(permissions.BasePermission):
    kind = None
    message = None

    def has_permission(self, request, view):
        token = request.auth
        if not isinstance(token, ApiToken):
            raise exceptions.NotAuthenticated(MISSING)
        if token.kind != self.kind:
            raise Problem("forbidden", self.message)
        return True


class TeamToken(_TokenKind):
    """A team token, whose role allows what the view needs for this method (`view.role_needed(request)`)."""

    kind = ApiToken.Kind.TEAM
    message = "This endpoint needs a team token; worker tokens only lease, heartbeat and complete."

    def has_permission(self, request, view):
        super().has_permission(request, view)
        # Read from the token as authenticated on this request: a role changed a moment ago already counts.
        what = f"{request.method} {request.path}"
        roles.require(request.auth.role, view.role_needed(request), what)
        return True


class WorkerToken(_TokenKind):
    kind = ApiToken.Kind.WORKER
    message = "This endpoint needs a worker token; team tokens manage jobs, runs and dead letters."


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A team token (manage jobs) or a worker token (lease, heartbeat, complete).",
        }
