"""An http job in the portal: its call's fields, its signing secret shown once, rotated by owners only (audited)."""

import pytest
from django.urls import reverse

from jobs.models import AuditEntry, JobDefinition, JobSigningSecret
from tests.scheduler_project.admin.test_scoping import job_form

URL = "https://public.example/hooks/export"
ADD = reverse("admin:jobs_jobdefinition_add")


def http_form(tenant, name="billing.export", **overrides):
    fields = dict(target_kind="http", target_ref=URL, http_method="PUT", http_headers='{"X-Team": "billing"}')
    return job_form(tenant, name, **{**fields, **overrides})


def secret_page(job):
    return reverse("admin:portal_job_signing_secret", args=[job.pk])


@pytest.fixture
def http_job(acme, make_job):
    return make_job(acme, "billing.export", target_kind="http", target_ref=URL, payload={})


def test_adding_an_http_job_shows_its_secret_once_on_the_answer_itself(as_alice, acme):
    answer = as_alice.post(ADD, http_form(acme))

    assert answer.status_code == 200, answer.content.decode()[:3000]
    job = JobDefinition.objects.get(tenant=acme, name="billing.export")
    assert (job.http_method, job.http_headers) == ("PUT", {"X-Team": "billing"})
    secret = JobSigningSecret.objects.get(job=job).secret
    page = answer.content.decode()
    assert f'value="{secret}"' in page and "shown only once" in page
    assert secret not in answer.cookies.output(), "never in a message cookie"
    later = as_alice.get(secret_page(job)).content.decode()
    assert secret not in later and secret[:12] in later
    edit = as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[job.pk])).content.decode()
    assert secret not in edit and secret[:12] in edit and secret_page(job) in edit


def test_saving_it_again_does_not_show_the_secret_again(as_alice, acme):
    as_alice.post(ADD, http_form(acme))
    job = JobDefinition.objects.get(tenant=acme, name="billing.export")
    saved = as_alice.post(reverse("admin:jobs_jobdefinition_change", args=[job.pk]), http_form(acme, http_method="GET"))
    assert saved.status_code == 302
    assert JobDefinition.objects.get(pk=job.pk).http_method == "GET"


def test_a_python_job_saved_without_the_http_fields_keeps_their_defaults(as_alice, acme):
    assert as_alice.post(ADD, job_form(acme, "reports.daily")).status_code == 302
    job = JobDefinition.objects.get(name="reports.daily")
    assert (job.http_method, job.http_headers, job.http_bearer_secret) == ("POST", {}, "")
    assert not JobSigningSecret.objects.exists()


def test_it_turns_a_bad_header_into_a_form_error(as_alice, acme):
    page = as_alice.post(ADD, http_form(acme, http_headers='{"Transfer-Encoding": "chunked"}')).content.decode()
    assert "Transfer-Encoding is a hop-by-hop header" in page
    assert not JobDefinition.objects.exists()


def test_an_owner_rotates_and_sees_the_new_secret_once_audited(as_alice, acme, http_job):
    rotated = as_alice.post(secret_page(http_job))

    stored = JobSigningSecret.objects.get(job=http_job)
    assert f'value="{stored.secret}"' in rotated.content.decode()
    entry = AuditEntry.objects.get(action="rotate_job_signing_secret")
    assert (entry.actor, entry.object_repr, entry.detail) == ("user:alice", "billing.export", {"prefix": stored.prefix})
    again = as_alice.post(secret_page(http_job)).content.decode()
    assert stored.secret not in again, "the old secret no longer signs, and is not shown"


def test_an_operator_sees_the_prefix_but_may_not_rotate(client, acme, http_job, django_user_model):
    dave = django_user_model.objects.create_user("dave", password="dave-pass-123", is_staff=True)
    acme.members.add(dave, through_defaults={"role": "operator"})
    client.force_login(dave)
    JobSigningSecret.rotate(http_job, http_job.created_at)
    page = client.get(secret_page(http_job)).content.decode()
    assert JobSigningSecret.objects.get().prefix in page and "rotate-job-signing-secret" not in page
    assert client.post(secret_page(http_job)).status_code == 403
    assert not AuditEntry.objects.filter(action="rotate_job_signing_secret").exists()


def test_another_tenants_job_is_not_found(as_bob, http_job):
    assert as_bob.get(secret_page(http_job)).status_code == 404
    assert as_bob.post(secret_page(http_job)).status_code == 404
    assert not JobSigningSecret.objects.exists()
