"""Tenant scoping, everywhere in the portal: Alice (acme) never sees Globex, Carol sees all."""

import pytest
from django.urls import reverse

from jobs.models import JobDefinition, Tenant
from scheduler_project.admin import scoping
from tests.fixtures.portal import confirm


@pytest.fixture
def jobs(acme, globex, make_job):
    return (
        make_job(acme, "acme.report", cron_expr="0 2 * * *", time_zone="Europe/Berlin"),
        make_job(globex, "globex.secret", cron_expr="*/5 * * * *"),
    )


def test_it_gives_each_user_their_tenants(alice, bob, carol, acme, globex):
    assert list(scoping.tenants(alice)) == [acme]
    assert list(scoping.tenants(bob)) == [globex]
    assert set(scoping.tenants(carol)) == {acme, globex}
    assert scoping.tenant_ids(carol) is None


def test_it_keeps_non_staff_and_tenantless_staff_out(db, acme, django_user_model, client):
    dave = django_user_model.objects.create_user("dave", password="x-pass-123", is_staff=False)
    acme.members.add(dave)
    erin = django_user_model.objects.create_user("erin", password="x-pass-123", is_staff=True)
    assert not scoping.is_operator(dave)
    assert not scoping.is_operator(erin)
    client.force_login(erin)
    assert client.get("/admin/").status_code == 302  # to the login page


def test_it_lists_only_the_users_tenant_jobs(as_alice, jobs):
    page = as_alice.get(reverse("admin:jobs_jobdefinition_changelist")).content.decode()
    assert "acme.report" in page
    assert "globex.secret" not in page
    assert "globex" not in page  # not even in the tenant filter


def test_it_answers_404_for_another_tenants_job_run_and_dead_letter(as_alice, jobs, make_run, make_dead, clock):
    theirs = jobs[1]
    run = make_run(theirs)
    dead = make_dead(theirs, clock.ago(hours=1))
    assert as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[theirs.pk])).status_code == 404
    assert as_alice.get(reverse("admin:runs_run_change", args=[run.pk])).status_code == 404
    assert as_alice.get(reverse("admin:dlq_deadletter_change", args=[dead.pk])).status_code == 404
    assert as_alice.get(reverse("admin:portal_job", args=[theirs.pk])).status_code == 404
    assert as_alice.get(reverse("admin:portal_overview") + "?tenant=globex").status_code == 404
    assert as_alice.get(reverse("admin:portal_lateness") + "?tenant=globex").status_code == 404
    assert as_alice.get(reverse("admin:portal_heatmap") + "?tenant=globex").status_code == 404


def test_it_ignores_another_tenants_ids_in_an_action(as_alice, jobs):
    ours, theirs = jobs
    url = reverse("admin:jobs_jobdefinition_changelist")
    confirm(as_alice, url, "pause_jobs", [ours.pk, theirs.pk], note="maintenance")
    assert JobDefinition.objects.get(pk=ours.pk).status == "paused"
    assert JobDefinition.objects.get(pk=theirs.pk).status == "active"


def test_it_offers_only_the_users_tenants_when_creating_a_job(as_alice, jobs):
    page = as_alice.get(reverse("admin:jobs_jobdefinition_add")).content.decode()
    assert ">acme<" in page
    assert ">globex<" not in page


def test_it_refuses_to_create_a_job_in_another_tenant(as_alice, globex):
    response = as_alice.post(reverse("admin:jobs_jobdefinition_add"), job_form(globex, "sneaky.job"))
    assert response.status_code == 200  # the form again, with an error
    assert not JobDefinition.objects.filter(name="sneaky.job").exists()


def test_it_shows_a_superuser_every_tenant(as_carol, jobs):
    page = as_carol.get(reverse("admin:jobs_jobdefinition_changelist")).content.decode()
    assert "acme.report" in page and "globex.secret" in page
    assert as_carol.get(reverse("admin:portal_overview") + "?tenant=globex").status_code == 200


def test_it_scopes_the_run_list_and_dead_letters(as_alice, jobs, make_run, make_dead, clock):
    ours, theirs = jobs
    make_run(ours, idempotency_key="ours-1")
    make_run(theirs, idempotency_key="theirs-1")
    make_dead(theirs, clock.now)
    runs = as_alice.get(reverse("admin:runs_run_changelist")).content.decode()
    assert "acme.report" in runs and "globex.secret" not in runs
    dead = as_alice.get(reverse("admin:dlq_deadletter_changelist")).content.decode()
    assert "globex.secret" not in dead


def test_it_lets_members_see_their_tenant_but_not_edit_tenants(as_alice, acme, globex):
    assert as_alice.get(reverse("admin:jobs_tenant_change", args=[acme.pk])).status_code == 200
    assert as_alice.get(reverse("admin:jobs_tenant_change", args=[globex.pk])).status_code == 404
    as_alice.post(reverse("admin:jobs_tenant_change", args=[acme.pk]), {"name": "acme2"})
    assert Tenant.objects.filter(name="acme").exists()


def test_it_scopes_the_audit_log(as_alice, jobs):
    from jobs import audit

    audit.record("user:bob", "pause", jobs[1], note="globex only")
    audit.record("user:alice", "pause", jobs[0], note="acme only")
    page = as_alice.get(reverse("admin:jobs_auditentry_changelist")).content.decode()
    assert "acme only" in page and "globex only" not in page


def job_form(tenant, name, **overrides):
    data = {
        "tenant": str(tenant.pk),
        "name": name,
        "status": "active",
        "schedule_kind": "cron",
        "cron_expr": "0 2 * * *",
        "time_zone": "Europe/Berlin",
        "jitter_seconds": "0",
        "missed_run_policy": "run_once",
        "overlap_policy": "forbid",
        "target_kind": "python",
        "target_ref": "tests.handlers.noop",
        "payload": "{}",
        "queue": "default",
        "priority": "1",
        "timeout_seconds": "900",
        "max_attempts": "5",
        "retry_base_seconds": "30",
        "retry_max_seconds": "1800",
    }
    data.update(overrides)
    return data


def test_it_leaves_the_canaries_out_of_a_superusers_lists_but_opens_their_pages(
    carol, client, acme, make_job, make_run, clock
):
    from runs import canary

    canary.ensure(now=clock.now)
    system = Tenant.objects.get(name="duetime-system")
    canary_job = JobDefinition.objects.filter(tenant=system).order_by("shard").first()
    canary_run = make_run(canary_job)
    make_run(make_job(acme, "acme.report"))
    client.force_login(carol)

    runs = client.get(reverse("admin:runs_run_changelist")).content.decode()
    assert "acme.report" in runs
    assert canary_job.name not in runs  # neither as a row nor in the job filter
    jobs = client.get(reverse("admin:jobs_jobdefinition_changelist")).content.decode()
    assert canary_job.name not in jobs

    filtered = client.get(reverse("admin:runs_run_changelist"), {"tenant": system.pk}).content.decode()
    assert canary_job.name in filtered
    assert client.get(reverse("admin:runs_run_change", args=[canary_run.pk])).status_code == 200
    assert client.get(reverse("admin:portal_job", args=[canary_job.pk])).status_code == 200
