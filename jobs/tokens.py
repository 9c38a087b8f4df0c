"""API tokens: who is calling, for which tenant, and what they may do.

A token is issued with `ApiToken.issue` (the secret is shown once; only its
SHA-256 is kept), found again by the secret's hash (`authenticate`), and
revoked by setting `revoked_at`, which takes effect on the next call. Team
tokens manage the tenant's jobs, runs and dead letters as far as their role
allows (viewer, operator, owner: jobs/roles.py; `change_role` changes it,
audited, effective on the next call); worker tokens lease, heartbeat and
complete, and only on their listed queues.

The HTTP side (the bearer authentication class, the token-kind permissions,
the scoping of every lookup to the token's tenant) is scheduler_project/api/auth.py.
"""

import datetime as dt

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs import audit
from jobs.choices import Role
from jobs.models import ApiToken, AuditEntry

# last_used_at is a hint for operators ("is this token still used?"), so it is
# written at most once a minute per token, not on every request.
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


class InvalidToken(Exception):
    """The secret does not name a usable token. The message says why, for the caller."""


class UnknownToken(InvalidToken):
    def __init__(self):
        super().__init__("The token is not known.")


class RevokedToken(InvalidToken):
    def __init__(self, token):
        super().__init__("The token was revoked.")
        self.token = token


class QueueNotAllowed(Exception):
    """A worker token asked for queues it does not list: `allowed` and `wanted`."""

    def __init__(self, allowed, wanted):
        super().__init__(f"This token may lease from the queues {allowed}, not {wanted}.")
        self.allowed, self.wanted = allowed, wanted


def authenticate(secret, now=None):
    """The active token whose secret is `secret`, its use recorded. Raises UnknownToken or RevokedToken."""
    token = ApiToken.objects.select_related("tenant").filter(secret_hash=ApiToken.hash_secret(secret)).first()
    if token is None:
        raise UnknownToken()
    if token.revoked_at is not None:
        raise RevokedToken(token)
    touch(token, now)
    return token


def touch(token, now=None):
    """Record use, at most once per LAST_USED_RESOLUTION (compare-and-set, so racing requests write once)."""
    now = now or timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)


def leasable_queues(token, wanted=None):
    """The queues of `wanted` (default: all the token lists) that `token` may lease from, in order, once each.

    Queues the token does not list are left out; raises QueueNotAllowed when none is left.
    """
    allowed = list(token.queues)
    wanted = wanted or allowed
    queues = [queue for queue in dict.fromkeys(wanted) if queue in allowed]
    if not queues:
        raise QueueNotAllowed(allowed, wanted)
    return queues


def issue(tenant, kind, *, name="", queues=(), role=None, actor, note=""):
    """Every door's "issue a token" (the portal's form, `manage.py create_token`): the token and its audit
    entry in one transaction. Returns `(token, secret)`; the secret is shown once and never kept."""
    with transaction.atomic():
        token, secret = ApiToken.issue(tenant, kind, name=name, queues=queues, role=role)
        detail = {"kind": token.kind, "queues": token.queues, **({"role": token.role} if token.role else {})}
        audit.record(actor, "issue_token", token, detail=detail, note=note)
    return token, secret


def revoke(tokens, *, actor, note="", now=None):
    """Revoke the active tokens among `tokens` (a queryset), one audit entry each. Returns those revoked.

    Revocation is final: the next request with the secret is refused (`authenticate` raises RevokedToken).
    """
    now = now or timezone.now()
    with transaction.atomic():
        revoked = list(
            ApiToken.objects.select_for_update(of=("self",))
            .filter(pk__in=tokens.values("pk"), revoked_at=None)
            .select_related("tenant")
            .order_by("pk")
        )
        ApiToken.objects.filter(pk__in=[t.pk for t in revoked], revoked_at=None).update(revoked_at=now)
        audit.record_many(actor, "revoke_token", revoked, note=note)
    return revoked


def change_role(tokens, role, *, actor, note=""):
    """Give the team tokens among `tokens` (a queryset) the role `role`; one audit entry per token changed.

    Worker tokens and tokens that already have the role are left as they are. Returns the tokens changed.
    """
    role = Role(role)
    with transaction.atomic():
        locked = (
            ApiToken.objects.select_for_update(of=("self",)).select_related("tenant").filter(pk__in=tokens.values("pk"))
        )
        changed = list(locked.filter(kind=ApiToken.Kind.TEAM).exclude(role=role).order_by("pk"))
        ApiToken.objects.filter(pk__in=[t.pk for t in changed]).update(role=role)
        AuditEntry.objects.bulk_create(
            [
                audit.entry(actor, "change_role", t, detail={"role": {"before": t.role, "after": str(role)}}, note=note)
                for t in changed
            ]
        )
    for token in changed:
        token.role = role
    return changed
