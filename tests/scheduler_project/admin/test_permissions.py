"""Roles in the portal, checked when used: Dave, a member of acme, is a viewer, an operator or an owner.

The matrix is every portal door that changes something (changelist actions,
change and add forms, the custom pages' POSTs) with every role: an allowed
door changes acme, a refused one answers 403 and changes nothing at all,
whatever the page showed (a crafted POST, or a page from before a demotion).
"""

import datetime as dt
import re

import pytest
from django.urls import reverse

from calendars.models import Calendar, Window
from dlq.models import DeadLetter
from jobs import members
from jobs.models import ApiToken, AuditEntry, JobDefinition, Membership, QueuePause
from notify.models import SigningSecret
from runs.models import Run
from tests.fixtures.portal import confirm, portal_pages
from tests.scheduler_project.admin.test_scoping import job_form

ROLES = ["viewer", "operator", "owner"]
RANK = {role: i for i, role in enumerate(ROLES)}
JOBS = reverse("admin:jobs_jobdefinition_changelist")


@pytest.fixture
def dave(db, django_user_model):
    return django_user_model.objects.create_user("dave", password="dave-pass-123", is_staff=True)


def state(tenant):
    """Everything the portal could change about acme, to tell "nothing changed" exactly."""
    return {
        "jobs": sorted(JobDefinition.objects.filter(tenant=tenant).values_list("name", "status", "version", "queue")),
        "specs": sorted(JobDefinition.objects.filter(tenant=tenant).values_list("name", "applied_spec")),
        "runs": sorted(Run.objects.filter(tenant=tenant).values_list("id", "state")),
        "letters": sorted(DeadLetter.objects.filter(tenant=tenant).values_list("id", "replayed_at", "discarded_at")),
        "paused": (
            type(tenant).objects.get(pk=tenant.pk).paused_at,
            sorted(QueuePause.objects.filter(tenant=tenant).values_list("queue", flat=True)),
            type(tenant).objects.get(pk=tenant.pk).breaker_opened_at,
        ),
        "tokens": sorted(ApiToken.objects.filter(tenant=tenant).values_list("name", "role", "revoked_at")),
        "members": sorted(Membership.objects.filter(tenant=tenant).values_list("user__username", "role")),
        "windows": sorted(Window.objects.filter(tenant=tenant).values_list("name", "enabled")),
        "calendars": sorted(Calendar.objects.filter(tenant=tenant).values_list("name", flat=True)),
        "secrets": sorted(SigningSecret.objects.filter(tenant=tenant).values_list("prefix", flat=True)),
        "audit": AuditEntry.objects.filter(tenant=tenant).count(),
    }


def backfill_window(clock):
    end = clock.ago(hours=1)
    return {"start": (end - dt.timedelta(days=3)).isoformat(), "end": end.isoformat()}


# Each door: (what it needs, how a user walks through it). All POSTs, all of acme.
DOORS = {
    "pause jobs": ("operator", lambda c, s, k: confirm(c, JOBS, "pause_jobs", [s["nightly"].pk])),
    "resume jobs": ("operator", lambda c, s, k: confirm(c, JOBS, "resume_jobs", [s["paused"].pk])),
    "trigger jobs": ("operator", lambda c, s, k: confirm(c, JOBS, "trigger_jobs", [s["nightly"].pk])),
    "backfill a chunk": (
        "operator",
        lambda c, s, k: c.post(
            reverse("admin:jobs_jobdefinition_backfill_step"),
            {
                "job": s["nightly"].pk,
                "cursor": backfill_window(k)["start"],
                "end": backfill_window(k)["end"],
                "remaining": 3,
            },
        ),
    ),
    "cancel runs": (
        "operator",
        lambda c, s, k: confirm(c, reverse("admin:runs_run_changelist"), "cancel_runs", [s["run"].pk]),
    ),
    "replay dead letters": (
        "operator",
        lambda c, s, k: confirm(
            c, reverse("admin:dlq_deadletter_changelist"), "replay_dead_letters", [s["letters"][0].pk]
        ),
    ),
    "discard dead letters": (
        "operator",
        lambda c, s, k: confirm(
            c, reverse("admin:dlq_deadletter_changelist"), "discard_dead_letters", [s["letters"][1].pk]
        ),
    ),
    "pause the tenant": (
        "operator",
        lambda c, s, k: confirm(c, reverse("admin:jobs_tenant_changelist"), "pause_tenants", [s["run"].tenant_id]),
    ),
    "resume a queue": (
        "operator",
        lambda c, s, k: confirm(
            c, reverse("admin:jobs_tenant_changelist"), "resume_tenants", [s["run"].tenant_id], queue="reports"
        ),
    ),
    "close the failure breaker": (
        "operator",
        lambda c, s, k: confirm(c, reverse("admin:jobs_tenant_changelist"), "close_breakers", [s["run"].tenant_id]),
    ),
    "cancel jobs": ("owner", lambda c, s, k: confirm(c, JOBS, "cancel_jobs", [s["nightly"].pk])),
    "adopt into code": ("owner", lambda c, s, k: confirm(c, JOBS, "adopt_into_code", [s["export"].pk])),
    "edit a definition": (
        "owner",
        lambda c, s, k: c.post(
            reverse("admin:jobs_jobdefinition_change", args=[s["nightly"].pk]),
            job_form(s["nightly"].tenant, "billing.nightly", cron_expr="0 3 * * *"),
        ),
    ),
    "add a definition": (
        "owner",
        lambda c, s, k: c.post(reverse("admin:jobs_jobdefinition_add"), job_form(s["nightly"].tenant, "billing.new")),
    ),
    "issue a token": (
        "owner",
        lambda c, s, k: c.post(
            reverse("admin:jobs_apitoken_add"),
            {"tenant": s["token"].tenant_id, "kind": "team", "name": "deploy", "role": "viewer"},
        ),
    ),
    "revoke tokens": (
        "owner",
        lambda c, s, k: confirm(c, reverse("admin:jobs_apitoken_changelist"), "revoke_tokens", [s["token"].pk]),
    ),
    "change a token's role": (
        "owner",
        lambda c, s, k: confirm(
            c, reverse("admin:jobs_apitoken_changelist"), "change_token_roles", [s["token"].pk], role="owner"
        ),
    ),
    "add a member": (
        "owner",
        lambda c, s, k: c.post(
            reverse("admin:jobs_membership_add"), {"tenant": s["token"].tenant_id, "username": "carl", "role": "viewer"}
        ),
    ),
    "change a member's role": (
        "owner",
        lambda c, s, k: c.post(reverse("admin:jobs_membership_change", args=[s["erin"].pk]), {"role": "operator"}),
    ),
    "remove members": (
        "owner",
        lambda c, s, k: confirm(c, reverse("admin:jobs_membership_changelist"), "remove_members", [s["erin"].pk]),
    ),
    "add a window": (
        "owner",
        lambda c, s, k: c.post(
            reverse("admin:calendars_window_add"),
            {
                "tenant": s["token"].tenant_id,
                "name": "freeze",
                "kind": "one_off",
                "enabled": "on",
                "resume_policy": "skip",
                "starts_at_0": "2030-06-01",
                "starts_at_1": "09:30:00",
                "ends_at_0": "2030-06-01",
                "ends_at_1": "12:30:00",
                "time_zone": "UTC",
            },
        ),
    ),
    "delete windows": (
        "owner",
        lambda c, s, k: confirm(c, reverse("admin:calendars_window_changelist"), "delete_selected", [s["window"].pk]),
    ),
    "add a calendar": (
        "owner",
        lambda c, s, k: c.post(
            reverse("admin:calendars_calendar_add"),
            {"tenant": s["token"].tenant_id, "name": "uk", "time_zone": "Europe/London", "weekend": ["6", "7"]},
        ),
    ),
    "rotate the signing secret": (
        "owner",
        lambda c, s, k: c.post(reverse("admin:portal_signing_secret"), {"tenant": "acme"}),
    ),
}


FORMS = {"edit a definition", "add a definition", "issue a token", "add a member", "change a member's role"}
FORMS |= {"add a window", "add a calendar"}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("door", DOORS)
def test_each_role_passes_the_doors_it_may_and_a_refused_door_changes_nothing(
    client, acme, dave, story, clock, django_user_model, role, door
):
    django_user_model.objects.create_user("carl", password="carl-pass-123", is_staff=True)  # to be added
    members.grant(acme, dave, role, actor="test")
    client.force_login(dave)
    needed, walk = DOORS[door]
    before = state(acme)

    response = walk(client, story, clock)

    if RANK[role] >= RANK[needed]:
        assert response.status_code in (200, 302), response.content.decode()[:2000]
        assert state(acme) != before, f"{door} as {role}: allowed, yet nothing changed"
    else:
        assert response.status_code == 403, f"{door} as {role}: {response.status_code}"
        page = response.content.decode()
        assert 'data-testid="forbidden-reason"' in page and "Nothing was changed" in page
        if door not in FORMS:  # Django refuses a form it shows read-only without a reason of its own
            assert f"needs the role {needed} or above" in page, page
        assert state(acme) == before


def test_a_crafted_post_of_an_action_missing_from_the_menu_is_refused_not_ignored(client, acme, dave, story):
    """Django would answer "No action selected" (200) for an action it does not offer; the portal says 403."""
    members.grant(acme, dave, "viewer", actor="test")
    client.force_login(dave)
    before = state(acme)

    first_step = client.post(JOBS, {"action": "pause_jobs", "_selected_action": [story["nightly"].pk], "index": "0"})

    assert first_step.status_code == 403
    assert "Pause selected jobs needs the role operator or above" in first_step.content.decode()
    assert state(acme) == before


def test_a_member_demoted_mid_session_loses_the_action_at_the_next_request(client, acme, alice, story):
    client.force_login(alice)
    page = client.get(JOBS).content.decode()
    assert 'value="pause_jobs"' in page  # an owner's menu, as the page she has open shows it

    members.grant(acme, alice, "viewer", actor="user:carol")

    assert confirm(client, JOBS, "pause_jobs", [story["nightly"].pk]).status_code == 403
    assert JobDefinition.objects.get(pk=story["nightly"].pk).status == "active"
    assert 'value="pause_jobs"' not in client.get(JOBS).content.decode()


def test_an_action_over_two_tenants_needs_the_role_in_both(client, acme, globex, dave, make_job):
    """Dave owns acme but only views globex: selecting a job of each pauses neither."""
    members.grant(acme, dave, "owner", actor="test")
    members.grant(globex, dave, "viewer", actor="test")
    ours, theirs = make_job(acme, "a.job"), make_job(globex, "g.job")
    client.force_login(dave)

    response = confirm(client, JOBS, "pause_jobs", [ours.pk, theirs.pk])

    assert response.status_code == 403
    assert "in globex" in response.content.decode()
    assert set(JobDefinition.objects.values_list("status", flat=True)) == {"active"}
    assert confirm(client, JOBS, "pause_jobs", [ours.pk]).status_code == 302  # acme alone: his to pause


def test_an_owner_of_one_tenant_edits_only_there(client, acme, globex, dave, make_job):
    members.grant(acme, dave, "owner", actor="test")
    members.grant(globex, dave, "operator", actor="test")
    theirs = make_job(globex, "g.job", cron_expr="0 2 * * *")
    client.force_login(dave)

    add_form = client.get(reverse("admin:jobs_jobdefinition_add")).content.decode()
    edit = client.post(
        reverse("admin:jobs_jobdefinition_change", args=[theirs.pk]), job_form(globex, "g.job", cron_expr="0 5 * * *")
    )
    added = client.post(reverse("admin:jobs_jobdefinition_add"), job_form(globex, "g.new"))

    assert f'<option value="{acme.pk}">acme</option>' in add_form and ">globex</option>" not in add_form
    assert edit.status_code == 403 and JobDefinition.objects.get(pk=theirs.pk).cron_expr == "0 2 * * *"
    assert added.status_code == 200 and not JobDefinition.objects.filter(name="g.new").exists()  # a form error


def posting_buttons(page):
    """The submit buttons of the page's POST forms, the log-out button left out."""
    forms = re.findall(r"<form([^>]*)>(.*?)</form>", page, flags=re.S)
    posting = [body for attrs, body in forms if 'method="post"' in attrs and 'id="logout-form"' not in attrs]
    return [b for body in posting for b in re.findall(r'<button[^>]*>|<input[^>]*type="submit"[^>]*>', body)]


def test_a_viewer_reads_every_page_and_finds_no_way_to_change_anything(client, acme, dave, story):
    members.grant(acme, dave, "viewer", actor="test")
    QueuePause.objects.filter(tenant=acme).delete()
    type(acme).objects.filter(pk=acme.pk).update(paused_at=story["run"].due_at)  # the banner, without its button
    client.force_login(dave)

    for url in portal_pages(story):
        response = client.get(url)
        page = response.content.decode()
        assert response.status_code == 200, url
        assert 'name="action"' not in page, f"an action menu or button on {url}"
        assert 'name="_save"' not in page and 'class="addlink"' not in page, f"a save or add on {url}"
        assert not posting_buttons(page), f"a button that posts on {url}: {posting_buttons(page)}"
    assert "Your tenants and roles: acme (viewer)." in client.get(reverse("admin:index")).content.decode()


def test_an_operator_is_offered_the_operations_but_not_the_owners_actions(client, acme, dave, story):
    members.grant(acme, dave, "operator", actor="test")
    client.force_login(dave)

    menu = client.get(JOBS).content.decode()
    job_page = client.get(reverse("admin:portal_job", args=[story["export"].pk])).content.decode()

    for offered in ("pause_jobs", "resume_jobs", "trigger_jobs", "backfill_jobs"):
        assert f'value="{offered}"' in menu
    for withheld in ("cancel_jobs", "adopt_into_code"):
        assert f'value="{withheld}"' not in menu
    assert 'value="trigger_jobs"' in job_page and 'value="adopt_into_code"' not in job_page
