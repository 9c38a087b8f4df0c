"""The tenant actions of the portal (jobs/admin/tenant_pause.py): pause and resume a whole tenant or one of its queues.

Alice runs acme, Bob globex. Each action shows its preview first and asks
for a note, then acts through runs.controls; every portal page of a paused
tenant says so. The portal reads the real clock, so rows sit relative to it.
"""

import pytest
from django.urls import reverse

from jobs.models import AuditEntry, JobDefinition, QueuePause, Tenant
from runs.models import Run
from tests.fixtures.portal import action, confirm

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


def test_it_shows_an_open_failure_breaker_and_closes_it_with_an_audit_note(as_alice, acme, globex, wall_clock):
    Tenant.objects.filter(pk__in=[acme.pk, globex.pk]).update(
        breaker_opened_at=wall_clock.now, breaker_detail="75 % of 120 attempts failed over 5 min"
    )
    listed = as_alice.get(TENANTS).content.decode()
    assert "retries wait (75 % of 120 attempts failed over 5 min)" in listed
    page = as_alice.get(reverse("admin:jobs_tenant_change", args=[acme.pk])).content.decode()
    assert "Failure breaker" in page and "retries wait" in page

    preview = action(as_alice, TENANTS, "close_breakers", [acme.pk], post="preview").content.decode()
    assert "1 tenant(s) have an open failure breaker" in preview
    confirm(as_alice, TENANTS, "close_breakers", [acme.pk], note="upstream fixed")
    assert Tenant.objects.get(pk=acme.pk).breaker_opened_at is None
    assert Tenant.objects.get(pk=globex.pk).breaker_opened_at is not None
    entry = AuditEntry.objects.get(action="breaker_close")
    assert (entry.actor, entry.note, entry.tenant_id) == ("user:alice", "upstream fixed", acme.pk)
    assert "closed" in as_alice.get(TENANTS).content.decode()


def test_the_tenant_page_lists_every_limit_with_its_use(as_alice, acme, make_job, make_run):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=1)
    make_run(make_job(acme, "sync", overlap_policy="allow"), state="leased")

    page = as_alice.get(reverse("admin:jobs_tenant_change", args=[acme.pk])).content.decode()

    assert 'data-testid="tenant-limits"' in page
    row = page.split('<tr data-limit="max_concurrent_runs">')[1].split("</tr>")[0]
    assert "<td>1</td><td>1</td><td>at limit</td>" in row
    assert 'data-limit="failure_breaker"' in page and 'data-limit="max_pending_runs"' in page


def test_queue_limits_are_set_by_superusers_and_audited(as_alice, client, acme, django_user_model):
    from jobs.models import QueueLimit

    add = reverse("admin:jobs_queuelimit_add")
    refused = as_alice.post(add, {"tenant": acme.pk, "queue": "default", "max_running": 2, "rate_per": "second"})
    assert refused.status_code == 403 and not QueueLimit.objects.exists()

    root = django_user_model.objects.create_superuser("root", password="root-pass-123")
    client.force_login(root)
    made = client.post(add, {"tenant": "", "queue": "mail", "max_starts": 10, "rate_per": "minute"})
    assert made.status_code == 302, made.content.decode()[:2000]
    limit = QueueLimit.objects.get()
    assert (limit.tenant, limit.queue, limit.max_starts, limit.rate_per) == (None, "mail", 10, "minute")
    assert AuditEntry.objects.filter(action="create", object_type="jobs.queuelimit").exists()
