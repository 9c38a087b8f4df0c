"""Acme's tokens: a secret names one token of one tenant, until it is revoked;
a worker token leases only from the queues it lists.

Over HTTP (401, 403, 404 for Globex's objects): tests/jobs/api/test_tokens.py.
"""

import pytest

from jobs import tokens
from jobs.models import ApiToken
from jobs.tokens import InvalidToken, QueueNotAllowed, RevokedToken, UnknownToken


@pytest.fixture
def acme_worker_token(acme):
    """Acme's worker token for the default and reports queues, and its secret."""
    return ApiToken.issue(acme, "worker", name="renderer", queues=["default", "reports"])


def test_it_finds_the_token_and_its_tenant_by_the_secret(acme, acme_worker_token, clock):
    token, secret = acme_worker_token

    found = tokens.authenticate(secret, now=clock.now)

    assert (found.pk, found.tenant.name, found.kind) == (token.pk, "acme", "worker")


def test_it_keeps_only_a_hash_of_the_secret(acme_worker_token):
    token, secret = acme_worker_token

    assert secret not in (token.secret_hash, token.prefix)
    assert token.secret_hash == ApiToken.hash_secret(secret)


def test_it_does_not_know_a_made_up_secret(acme_worker_token, clock):
    with pytest.raises(UnknownToken) as refused:
        tokens.authenticate("dt_w_not-a-real-secret", now=clock.now)

    assert isinstance(refused.value, InvalidToken)
    assert str(refused.value) == "The token is not known."


def test_it_refuses_a_revoked_token(acme_worker_token, clock):
    token, secret = acme_worker_token
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=clock.ago(minutes=1))

    with pytest.raises(RevokedToken) as refused:
        tokens.authenticate(secret, now=clock.now)

    assert isinstance(refused.value, InvalidToken)
    assert refused.value.token.pk == token.pk


def test_it_notes_when_a_token_was_last_used_at_most_once_a_minute(acme_worker_token, clock):
    token, secret = acme_worker_token

    tokens.authenticate(secret, now=clock.now)
    first = clock.now
    tokens.authenticate(secret, now=clock.advance(seconds=59))
    token.refresh_from_db()
    assert token.last_used_at == first

    tokens.authenticate(secret, now=clock.advance(seconds=2))
    token.refresh_from_db()
    assert token.last_used_at == clock.now


def test_it_leases_from_every_queue_the_token_lists_by_default(acme_worker_token):
    token, _ = acme_worker_token

    assert tokens.leasable_queues(token) == ["default", "reports"]


def test_it_leaves_out_queues_the_token_does_not_list(acme_worker_token):
    token, _ = acme_worker_token

    assert tokens.leasable_queues(token, ["reports", "payroll", "reports"]) == ["reports"]


def test_it_refuses_a_lease_on_queues_the_token_does_not_list(acme_worker_token):
    token, _ = acme_worker_token

    with pytest.raises(QueueNotAllowed) as refused:
        tokens.leasable_queues(token, ["payroll"])

    assert (refused.value.allowed, refused.value.wanted) == (["default", "reports"], ["payroll"])


def test_a_team_token_is_an_operator_unless_told_and_a_worker_token_has_no_role(acme):
    team, _ = ApiToken.issue(acme, "team")
    owner, _ = ApiToken.issue(acme, "team", role="owner")
    worker, _ = ApiToken.issue(acme, "worker", queues=["default"], role="owner")

    assert (team.role, owner.role, worker.role) == ("operator", "owner", "")


def test_the_database_refuses_a_worker_token_with_a_role_and_a_team_token_without(acme):
    from django.db import IntegrityError, transaction

    token, _ = ApiToken.issue(acme, "worker", queues=["default"])
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiToken.objects.filter(pk=token.pk).update(role="owner")
    team, _ = ApiToken.issue(acme, "team")
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiToken.objects.filter(pk=team.pk).update(role="")


def test_it_changes_the_role_of_team_tokens_only_and_audits_each(acme, acme_worker_token):
    from jobs.models import AuditEntry

    ci, _ = ApiToken.issue(acme, "team", name="ci")
    deploy, _ = ApiToken.issue(acme, "team", name="deploy", role="owner")
    worker, _ = acme_worker_token

    changed = tokens.change_role(ApiToken.objects.all(), "owner", actor="user:alice", note="ci applies schedules")

    assert [t.pk for t in changed] == [ci.pk]
    assert dict(ApiToken.objects.values_list("name", "role")) == {"ci": "owner", "deploy": "owner", "renderer": ""}
    entry = AuditEntry.objects.get(action="change_role")
    assert (entry.object_id, entry.tenant, entry.note) == (str(ci.pk), acme, "ci applies schedules")
    assert entry.detail == {"role": {"before": "operator", "after": "owner"}}
