"""Alice names the owner of a job over /v1/jobs: who is notified of dead letters, skips and lateness."""

from jobs.models import JobDefinition
from tests.fixtures.api import assert_problem, on_demand

OWNER = {
    "email": "billing-oncall@acme.example",
    "webhook_url": "https://hooks.acme.example/duetime",
    "lateness_p99_seconds": 120,
    "skip_streak": 3,
}


def test_it_stores_and_shows_the_owner_contact(api, acme_team, acme):
    response = api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand(owner=OWNER))

    assert response.status_code == 201 and response.json()["owner"] == OWNER
    job = JobDefinition.objects.get(tenant=acme, name="billing.export")
    assert (job.owner_email, job.owner_webhook_url) == (OWNER["email"], OWNER["webhook_url"])
    assert (job.notify_lateness_p99_seconds, job.notify_skip_streak) == (120, 3)


def test_a_put_without_an_owner_clears_it(api, acme_team, acme):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand(owner=OWNER))
    response = api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())

    assert response.json()["owner"] == dict.fromkeys(OWNER)
    job = JobDefinition.objects.get(tenant=acme, name="billing.export")
    assert (job.owner_email, job.owner_webhook_url, job.notify_skip_streak) == ("", "", None)


def test_it_refuses_a_contact_it_cannot_reach_naming_the_body_field(api, acme_team):
    owner = {"email": "oncall at acme", "webhook_url": "ftp://hooks.acme.example/x"}
    problem = assert_problem(
        api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand(owner=owner)), 400, "validation-error"
    )
    fields = {error["field"]: error["detail"] for error in problem["errors"]}
    assert "is not an email address" in fields["owner.email"]
    assert "is not an http(s) URL" in fields["owner.webhook_url"]


def test_it_refuses_a_threshold_that_would_notify_nobody(api, acme_team):
    response = api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand(owner={"skip_streak": 5}))
    (error,) = assert_problem(response, 400, "validation-error")["errors"]
    assert error["field"] == "owner.skip_streak" and "set owner_email or owner_webhook_url" in error["detail"]
    assert not JobDefinition.objects.exists()


def test_it_refuses_a_target_or_webhook_at_a_non_public_address_with_a_problem(api, acme_team, dns):
    dns.add("metadata.google.internal", "169.254.169.254")
    body = on_demand(
        target={"kind": "http", "ref": "http://metadata.google.internal/computeMetadata/v1/"},
        owner={"webhook_url": "http://[::ffff:127.0.0.1]:6379/"},
        payload={},
    )
    problem = assert_problem(api.put("/v1/jobs/billing.export", token=acme_team, json=body), 400, "validation-error")
    fields = {error["field"]: error["detail"] for error in problem["errors"]}
    assert "refused: not a public address" in fields["target.ref"]
    assert "refused: not a public address" in fields["owner.webhook_url"]
    assert not JobDefinition.objects.exists()
