"""Confirmation pages of the portal's actions: what a selection the operator cannot see does."""

from django.urls import reverse

from jobs.models import AuditEntry, JobDefinition
from tests.fixtures.portal import action, confirm

CHANGELIST = reverse("admin:jobs_jobdefinition_changelist")


def test_it_refuses_an_action_on_ids_that_are_all_another_tenants(as_alice, acme, globex, make_job):
    theirs = make_job(globex, "globex.secret", cron_expr="*/5 * * * *")
    response = confirm(as_alice, CHANGELIST, "pause_jobs", [theirs.pk], note="crafted")
    page = as_alice.get(response.url if response.status_code == 302 else CHANGELIST).content.decode()
    assert "1 of the 1 selected item(s) do not exist or are not yours; nothing was done." in page
    assert "Paused 0 job(s)" not in page
    assert JobDefinition.objects.get(pk=theirs.pk).status == "active"
    assert not AuditEntry.objects.filter(action="pause").exists()


def test_it_says_which_part_of_a_mixed_selection_it_left_out(as_alice, acme, globex, make_job):
    ours = make_job(acme, "acme.report", cron_expr="*/5 * * * *")
    theirs = make_job(globex, "globex.secret", cron_expr="*/5 * * * *")
    page = action(as_alice, CHANGELIST, "pause_jobs", [ours.pk, theirs.pk]).content.decode()
    assert "1 of the 2 selected item(s) do not exist or are not yours; they are left out." in page
    assert "1 active job(s) will be paused" in page
