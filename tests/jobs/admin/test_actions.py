"""The tenant actions of the portal (pause and resume a whole tenant or one of its queues) and Adopt into code.

Alice runs acme, Bob globex. Each action shows its preview first and asks
for a note, then acts through runs.controls; every portal page of a paused
tenant says so. The portal reads the real clock, so rows sit relative to it.
"""

import pytest
from django.urls import reverse

from jobs import schedules
from jobs.models import AuditEntry, JobDefinition, QueuePause, Tenant
from runs.apply import apply_set
from runs.models import Run
from tests.fixtures.portal import action, confirm
from tests.fixtures.schedules import nightly_export, ping, specs
from tests.scheduler_project.admin.test_scoping import job_form

TENANTS = reverse("admin:jobs_tenant_changelist")
CHANGELIST = reverse("admin:jobs_jobdefinition_changelist")


@pytest.fixture
def nightly(acme, make_job):
    return make_job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="Europe/Berlin")


def test_it_asks_which_queue_previews_a_tenant_pause_and_pauses_with_an_audit_note(
    as_alice, acme, nightly, make_run, wall_clock
):
    make_run(nightly, due_at=wall_clock.ahead(minutes=30))
    asked = action(as_alice, TENANTS, "pause_tenants", [acme.pk]).content.decode()
    assert 'name="queue"' in asked and 'name="note"' in asked

    page = action(as_alice, TENANTS, "pause_tenants", [acme.pk], post="preview", queue="").content.decode()
    assert "1 tenant(s) will be paused on every queue" in page
    assert "their 1 active job(s) until resumed; 1 run(s) already scheduled wait, unclaimed" in page
    assert Tenant.objects.get(pk=acme.pk).paused_at is None  # nothing happens before "yes"

    confirm(as_alice, TENANTS, "pause_tenants", [acme.pk], queue="", note="database upgrade")
    assert Tenant.objects.get(pk=acme.pk).paused_at is not None
    entry = AuditEntry.objects.get(action="pause", object_type="jobs.tenant")
    assert (entry.actor, entry.note) == ("user:alice", "database upgrade")


def test_it_refuses_a_queue_that_is_no_queue_name_with_a_form_error(as_alice, acme):
    page = action(as_alice, TENANTS, "pause_tenants", [acme.pk], post="preview", queue="Reports!").content.decode()
    assert "errorlist" in page and "is not a queue name" in page
    assert not QueuePause.objects.exists()


def test_it_shows_a_paused_tenant_on_every_page_of_that_tenant_only(as_alice, client, bob, acme, globex, nightly):
    from runs import controls

    controls.pause_tenant(acme, actor="user:carol")
    controls.pause_tenant(globex, actor="user:carol", queue="reports")
    for url in (
        reverse("admin:index"),
        reverse("admin:jobs_jobdefinition_changelist"),
        reverse("admin:portal_job", args=[nightly.pk]),
    ):
        page = as_alice.get(url).content.decode()
        assert 'data-testid="paused-banner"' in page, url
        assert "<strong>acme</strong> is paused since" in page and "globex" not in page

    client.force_login(bob)
    page = client.get(reverse("admin:index")).content.decode()
    assert "<strong>globex</strong> has paused queue <strong>reports</strong>" in page and "acme" not in page


def test_it_previews_a_resume_with_what_each_job_passed_over_and_resumes_from_the_banner(
    as_alice, acme, nightly, wall_clock
):
    from runs import controls

    controls.pause_tenant(acme, actor="user:alice")
    JobDefinition.objects.filter(pk=nightly.pk).update(next_due_at=wall_clock.ago(days=3))
    # The banner's button opens the preview straight away.
    page = action(as_alice, TENANTS, "resume_tenants", [acme.pk], post="preview", queue="", note="").content.decode()
    assert "1 tenant(s) will resume every queue" in page
    assert "1 job(s) passed over 3 occurrence(s), recorded as skipped" in page

    confirm(as_alice, TENANTS, "resume_tenants", [acme.pk], queue="", note="upgraded")
    assert Tenant.objects.get(pk=acme.pk).paused_at is None
    (summary,) = Run.objects.filter(job=nightly, state="skipped")
    assert "passed over while the tenant was paused" in summary.reason
    assert 'data-testid="paused-banner"' not in as_alice.get(reverse("admin:index")).content.decode()


def test_it_acts_only_on_the_users_own_tenants(as_alice, acme, globex):
    confirm(as_alice, TENANTS, "pause_tenants", [globex.pk], queue="", note="")
    assert Tenant.objects.get(pk=globex.pk).paused_at is None


# --- adopt into code: a job of a declared set accepts its portal edits ---


@pytest.fixture
def declared(acme):
    """acme's billing set, applied: billing.ping and billing.export, declared in code."""
    apply_set(acme, specs(billing_ping=ping(), billing_export=nightly_export()), source="billing", actor="cli:ops")
    return JobDefinition.objects.get(name="billing.ping")


def edit_in_portal(client, job, **changes):
    form = job_form(job.tenant, job.name, cron_expr=job.cron_expr, time_zone=job.time_zone, **changes)
    response = client.post(reverse("admin:jobs_jobdefinition_change", args=[job.pk]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    job.refresh_from_db()


def test_it_adopts_the_portal_edits_into_code_and_prints_the_declaration_to_paste(as_alice, declared):
    edit_in_portal(as_alice, declared, queue="batch")

    preview = action(as_alice, CHANGELIST, "adopt_into_code", [declared.pk]).content.decode()
    assert "1 job(s) declared in code and edited outside it" in preview
    assert "adopt: queue: code &quot;default&quot;, portal &quot;batch&quot;" in preview

    done = confirm(as_alice, CHANGELIST, "adopt_into_code", [declared.pk], note="batch is right").content.decode()
    assert 'data-testid="declaration"' in done
    assert "[jobs.&quot;billing.ping&quot;]" in done and "queue = &quot;batch&quot;" in done
    declared.refresh_from_db()
    assert schedules.drift(declared) == []
    entry = AuditEntry.objects.get(action="adopt")
    assert (entry.actor, entry.note, entry.detail["accepted"][0]["field"]) == ("user:alice", "batch is right", "queue")


def test_it_leaves_jobs_made_in_the_portal_out_of_the_adoption(as_alice, acme, make_job):
    job = make_job(acme, "billing.manual")

    preview = action(as_alice, CHANGELIST, "adopt_into_code", [job.pk]).content.decode()

    assert "1 selected job(s) are not declared in code and are left out" in preview
    assert "Nothing to do." in preview
    assert (
        "No: made in the portal or the API."
        in as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[job.pk])).content.decode()
    )
