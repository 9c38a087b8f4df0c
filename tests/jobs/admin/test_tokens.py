"""API tokens in the portal: the secret is shown once, revocation is audited."""

from django.urls import reverse

from jobs.models import ApiToken, AuditEntry
from tests.fixtures.portal import confirm


def test_it_creates_a_token_and_shows_its_secret_once(as_alice, acme):
    response = as_alice.post(
        reverse("admin:jobs_apitoken_add"),
        {"tenant": acme.pk, "kind": "worker", "name": "etl", "queue_names": "default, reports"},
    )
    page = response.content.decode()
    token = ApiToken.objects.get(tenant=acme, name="etl")
    assert token.queues == ["default", "reports"]
    secret = page.split('data-testid="token-secret"')[0].rsplit('value="', 1)[1].split('"')[0]
    assert secret.startswith("dt_w_") and ApiToken.hash_secret(secret) == token.secret_hash
    assert "shown only once" in page
    assert secret not in as_alice.get(reverse("admin:jobs_apitoken_changelist")).content.decode()
    assert AuditEntry.objects.filter(action="issue_token", object_id=str(token.pk)).exists()


def test_it_asks_a_worker_token_for_its_queues(as_alice, acme):
    page = as_alice.post(
        reverse("admin:jobs_apitoken_add"), {"tenant": acme.pk, "kind": "worker", "name": "w"}
    ).content.decode()
    assert "list at least one" in page
    assert not ApiToken.objects.exists()


def test_it_revokes_tokens_with_an_audit_note(as_alice, acme):
    token, _ = ApiToken.issue(acme, "team", name="ci")
    confirm(as_alice, reverse("admin:jobs_apitoken_changelist"), "revoke_tokens", [token.pk], note="leaked in a log")
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEntry.objects.get(action="revoke_token").note == "leaked in a log"
