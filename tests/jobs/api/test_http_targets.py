"""Alice defines a signed http target over /v1/jobs: method, headers, bearer secret; its signing secret is shown once."""

from jobs.models import AuditEntry, JobDefinition, JobSigningSecret
from tests.fixtures.api import assert_problem, issue, on_demand

URL = "https://public.example/hooks/export"
JOB = "/v1/jobs/billing.export"
ROTATE = "/v1/jobs/billing.export:rotate-signing-secret"


def http_target(**fields):
    return on_demand(target={"kind": "http", "ref": URL, **fields}, payload={}, queue="default")


def test_it_creates_an_http_job_and_shows_its_signing_secret_once(api, acme_team, acme, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-acme"}}
    target = {"method": "PUT", "headers": {"X-Team": "billing"}, "bearer_secret": "billing-api"}
    created = api.put(JOB, token=acme_team, json=http_target(**target))

    assert created.status_code == 201, created.text
    shown = created.json()["target"]
    stored = JobSigningSecret.objects.get(job__name="billing.export")
    assert {k: shown[k] for k in ("kind", "ref", "method", "headers", "bearer_secret")} == {
        "kind": "http",
        "ref": URL,
        **target,
    }
    assert shown["signing_secret"]["secret"] == stored.secret and stored.secret.startswith("jsec_")
    assert shown["signing_secret"]["prefix"] == stored.secret[:12]
    assert "tok-acme" not in created.text, "the bearer secret's value is never shown"

    again = api.get(JOB, token=acme_team).json()["target"]["signing_secret"]
    assert again == {"prefix": stored.secret[:12], "rotated_at": shown["signing_secret"]["rotated_at"]}
    changed = api.put(JOB, token=acme_team, json=http_target(**{**target, "method": "POST"}))
    assert changed.status_code == 200 and "secret" not in changed.json()["target"]["signing_secret"]
    listed = api.get("/v1/jobs", token=acme_team).json()["results"][0]["target"]
    assert listed["signing_secret"]["prefix"] == stored.secret[:12] and "secret" not in listed["signing_secret"]


def test_a_job_of_another_kind_shows_the_defaults_and_no_signing_secret(api, acme_team):
    shown = api.put(JOB, token=acme_team, json=on_demand()).json()["target"]
    assert shown == {
        "kind": "external",
        "ref": None,
        "method": "POST",
        "headers": {},
        "bearer_secret": None,
        "signing_secret": None,
    }


def test_it_refuses_bad_headers_an_unknown_secret_and_a_get_with_a_body_naming_the_body_fields(
    api, acme_team, settings
):
    settings.DUETIME_HTTP_SECRETS = {"globex": {"billing-api": "tok-globex"}}
    body = http_target(method="GET", headers={"Host": "evil.example", "X-Ok": "fine"}, bearer_secret="billing-api")
    body["payload"] = {"account": 1}
    problem = assert_problem(api.put(JOB, token=acme_team, json=body), 400, "validation-error")
    fields = {error["field"]: error["detail"] for error in problem["errors"]}
    assert fields["target.headers"] == "Host is set from the URL (name the host in target.ref)"
    assert fields["target.bearer_secret"].startswith("tenant acme has no http secret named 'billing-api'")
    assert fields["payload"].startswith("a GET sends no body")
    assert "tok-globex" not in problem["detail"] + str(problem["errors"])
    assert not JobDefinition.objects.exists()


def test_it_refuses_a_method_it_does_not_call_with(api, acme_team):
    problem = assert_problem(api.put(JOB, token=acme_team, json=http_target(method="DELETE")), 400, "validation-error")
    assert [error["field"] for error in problem["errors"]] == ["target.method"]


def test_rotating_shows_the_new_secret_once_replaces_the_old_and_is_audited(api, acme_team, acme):
    first = api.put(JOB, token=acme_team, json=http_target()).json()["target"]["signing_secret"]["secret"]
    rotated = api.post(ROTATE, token=acme_team)

    assert rotated.status_code == 200, rotated.text
    body = rotated.json()
    assert body["secret"] != first and body["secret"] == JobSigningSecret.objects.get().secret
    assert body["prefix"] == body["secret"][:12] and body["rotated_at"]
    entry = AuditEntry.objects.get(action="rotate_job_signing_secret")
    assert (entry.tenant, entry.object_repr, entry.detail) == (acme, "billing.export", {"prefix": body["prefix"]})
    assert body["secret"] not in str(entry.detail) + entry.note
    assert "secret" not in api.get(JOB, token=acme_team).json()["target"]["signing_secret"]


def test_only_an_owner_rotates(api, acme, acme_team):
    api.put(JOB, token=acme_team, json=http_target())
    before = JobSigningSecret.objects.get().secret
    assert_problem(api.post(ROTATE, token=issue(acme, "team", role="operator")), 403, "insufficient-role")
    assert JobSigningSecret.objects.get().secret == before


def test_another_tenants_job_is_not_found(api, acme_team, globex_team):
    api.put(JOB, token=acme_team, json=http_target())
    before = JobSigningSecret.objects.get().secret
    assert_problem(api.post(ROTATE, token=globex_team), 404, "not-found")
    assert JobSigningSecret.objects.get().secret == before


def test_a_job_that_is_not_http_has_no_secret_to_rotate(api, acme_team):
    api.put(JOB, token=acme_team, json=on_demand())
    assert_problem(api.post(ROTATE, token=acme_team), 409, "invalid-state")
    assert not JobSigningSecret.objects.exists()
