"""Bearer tokens for the API: who is calling, for which tenant, and what they may do.

`Authorization: Bearer <secret>` is looked up by the secret's SHA-256. The
tenant always comes from the token, never from the request, and every API
lookup goes through `scoped()`, so another tenant's object is simply not
found (404). Team tokens manage jobs, runs and dead letters; worker tokens
lease, heartbeat and complete on their listed queues only.
"""

import dataclasses
import datetime as dt

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from jobs.models import ApiToken
from scheduler_project.api.problems import Problem

# last_used_at is a hint for operators ("is this token still used?"), so it is
# written at most once a minute per token, not on every request.
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


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
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise exceptions.AuthenticationFailed("Send 'Authorization: Bearer <token secret>'.")
        token = (
            ApiToken.objects.select_related("tenant").filter(secret_hash=ApiToken.hash_secret(secret.strip())).first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("The token is not known.")
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("The token was revoked.")
        touch(token)
        return Caller(token), token

    def authenticate_header(self, request):
        return 'Bearer realm="duetime"'


def touch(token, now=None):
    """Record use, at most once per LAST_USED_RESOLUTION (compare-and-set, so racing requests write once)."""
    now = now or timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)


class _TokenKind(permissions.BasePermission):
    kind = None
    message = None

    def has_permission(self, request, view):
        token = request.auth
        if not isinstance(token, ApiToken):
            raise exceptions.NotAuthenticated("Send 'Authorization: Bearer <token secret>'.")
        if token.kind != self.kind:
            raise Problem("forbidden", self.message)
        return True


class TeamToken(_TokenKind):
    kind = ApiToken.Kind.TEAM
    message = "This endpoint needs a team token; worker tokens only lease, heartbeat and complete."


class WorkerToken(_TokenKind):
    kind = ApiToken.Kind.WORKER
    message = "This endpoint needs a worker token; team tokens manage jobs, runs and dead letters."


def tenant_of(request):
    return request.auth.tenant


def scoped(request, queryset):
    """`queryset` narrowed to the caller's tenant: the one gate of every API lookup."""
    return queryset.filter(tenant_id=request.auth.tenant_id)


def get_scoped(request, queryset, what, **lookup):
    """The caller's tenant's object matching `lookup`, or a 404 problem (also for other tenants' objects)."""
    found = scoped(request, queryset).filter(**lookup).first()
    if found is None:
        described = ", ".join(f"{key.split('__')[0]} {value}" for key, value in lookup.items())
        raise Problem("not-found", f"No {what} with {described}.")
    return found


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A team token (manage jobs) or a worker token (lease, heartbeat, complete).",
        }
