"""Jobs declared in code, in the portal (jobs/admin/drift.py): marked, editable, drift shown, adopted into code.

Acme's billing set declares billing.ping and billing.export; Alice edits one
in the portal. The portal reads the real clock, so the set is applied by it.
"""

import pytest
from django.urls import reverse

from jobs import schedules
from jobs.models import AuditEntry, JobDefinition
from runs.schedule_sets import apply_set
from tests.fixtures.portal import action, confirm
from tests.fixtures.schedules import nightly_export, ping, specs
from tests.scheduler_project.admin.test_scoping import job_form

CHANGELIST = reverse("admin:jobs_jobdefinition_changelist")


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


def test_it_marks_jobs_of_a_set_and_warns_that_an_edit_is_drift(as_alice, declared):
    page = as_alice.get(CHANGELIST).content.decode()
    assert page.count('data-testid="code-in-sync"') == 2 and "set billing ✓" in page

    edit = as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[declared.pk])).content.decode()
    assert "is declared in code (set billing)" in edit and "no drift" in edit


def test_it_shows_a_portal_edit_as_drift_field_by_field_in_the_list_the_form_and_the_job_page(as_alice, declared):
    edit_in_portal(as_alice, declared, queue="batch", max_attempts="9")

    listed = as_alice.get(CHANGELIST + "?code=drift").content.decode()
    assert "billing.ping" in listed and "billing.export" not in listed
    assert "set billing ⚠ drift: queue, retry.max_attempts" in listed
    in_sync = as_alice.get(CHANGELIST + "?code=sync").content.decode()
    assert "billing.export" in in_sync and "billing.ping" not in in_sync

    form = as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[declared.pk])).content.decode()
    assert (
        'data-testid="drift-table"' in form
        and "<td>queue</td><td>&quot;default&quot;</td><td>&quot;batch&quot;</td>" in form
    )

    page = as_alice.get(reverse("admin:portal_job", args=[declared.pk])).content.decode()
    assert 'data-testid="job-drift-table"' in page
    assert '<th scope="row">retry.max_attempts</th><td>5</td><td>9</td>' in page


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
