"""One door per control: every control is one domain function, and every door calls it.

For each control in CONTROLS, each of its doors (the API over a live server, the
portal's admin action, the management command) is driven for real while the
domain function is wrapped by a spy: the door must call that function, and the
control must take effect. A door that reaches past it (a view that moves state
through runs.transitions itself, say) fails here, so a fourth door cannot drift
either: add it to CONTROLS.

The table of controls and their doors is docs/api.md's "Every control, every door".
"""

import datetime as dt
import io
from unittest import mock

import pytest
from django.core.management import call_command
from django.urls import reverse

from calendars import edits
from calendars.models import Calendar, Window
from dlq.models import DeadLetter
from jobs import definitions, members, tokens
from jobs.models import ApiToken, AuditEntry, JobDefinition, QueuePause
from runs import backfill, controls
from runs.models import Run
from tests.fixtures.api import issue
from tests.fixtures.portal import confirm

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = reverse("admin:jobs_jobdefinition_changelist")
TENANTS = reverse("admin:jobs_tenant_changelist")
RUNS = reverse("admin:runs_run_changelist")
LETTERS = reverse("admin:dlq_deadletter_changelist")
TOKENS = reverse("admin:jobs_apitoken_changelist")
MEMBERS = reverse("admin:jobs_membership_changelist")


@pytest.fixture
def world(acme, alice, make_job, make_run, make_dead, wall_clock, client, django_user_model, tmp_path):
    """acme with a job, a waiting run, a dead letter, a team token and Erin (a viewer); Alice (owner) logged in."""
    client.force_login(alice)
    erin = django_user_model.objects.create_user("erin", password="erin-pass-123", is_staff=True)
    job = make_job(acme, "billing.nightly", cron_expr="0 * * * *")  # hourly: a backfill window holds some
    return {
        "tenant": acme,
        "job": job,
        "run": make_run(job, due_at=wall_clock.ahead(days=1)),
        "letter": make_dead(make_job(acme, "billing.dies"), wall_clock.ago(hours=1)),
        "team": issue(acme, "team", role="owner"),
        "portal": client,
        "clock": wall_clock,
        "erin": members.grant(acme, erin, "viewer", actor="test"),
        "window": Window.objects.create(
            tenant=acme,
            name="db upgrade",
            kind="one_off",
            starts_at=wall_clock.ahead(days=3),
            ends_at=wall_clock.ahead(days=4),
        ),
        "calendar": Calendar.objects.create(tenant=acme, name="office"),
        "tmp": tmp_path,
    }


def api_call(api, world, method, path, body=None):
    response = api.call(method, path, token=world["team"], json=body if body is not None else {})
    assert response.status_code < 300, response.text
    return response


def portal_action(url, name, ids, **fields):
    def door(api, world):
        page = confirm(world["portal"], url, name, ids(world), **fields)
        assert page.status_code in (200, 302), page.status_code

    return door


def cli_set(*files, prune=False):
    """manage.py apply_schedules with each TOML text of `files` in turn (the last one with --prune if asked)."""

    def door(api, world):
        for index, text in enumerate(files):
            path = world["tmp"] / f"set-{index}.toml"
            path.write_text(text)
            last = index == len(files) - 1
            flags = ["--prune"] if prune and last else []
            call_command("apply_schedules", "--tenant", "acme", str(path), *flags, stdout=io.StringIO())

    return door


FREEZE = """
jobs = {}  # a set of windows alone says so

[windows.freeze]
kind = "one_off"
starts_at = 2027-01-01T00:00:00Z
ends_at = 2027-01-02T00:00:00Z
"""
DB_UPGRADE = """
jobs = {}

[windows."db upgrade"]
kind = "one_off"
starts_at = 2027-02-01T00:00:00Z
ends_at = 2027-02-02T00:00:00Z
"""


def window(world):
    end = world["clock"].now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    return end - dt.timedelta(hours=3), end


def portal_backfill(api, world):
    """The portal's backfill: the action's confirmation, then its progress page's steps (what backfill.js POSTs)."""
    start, end = window(world)
    fields = {"start": f"{start:%Y-%m-%d %H:%M}", "end": f"{end:%Y-%m-%d %H:%M}", "max_runs": 100}
    assert confirm(world["portal"], JOBS, "backfill_jobs", [world["job"].pk], **fields).status_code == 200
    step = {"job": world["job"].pk, "cursor": start.isoformat(), "end": end.isoformat(), "remaining": 100, "note": ""}
    answer = world["portal"].post(reverse("admin:jobs_jobdefinition_backfill_step"), {**step, "ignore_windows": ""})
    assert answer.status_code == 200, answer.content


# control: (module, function name, {door: callable(api, world)}, effect(world) -> True once it took effect)
CONTROLS = {
    "pause a job": (
        controls,
        "pause_many",
        {
            "api": lambda api, w: api_call(api, w, "POST", "/v1/jobs/billing.nightly:pause"),
            "portal": portal_action(JOBS, "pause_jobs", lambda w: [w["job"].pk]),
        },
        lambda w: JobDefinition.objects.get(pk=w["job"].pk).status == "paused",
    ),
    "resume a job": (
        controls,
        "resume_many",
        {
            "api": lambda api, w: api_call(api, w, "POST", "/v1/jobs/billing.nightly:resume"),
            "portal": portal_action(JOBS, "resume_jobs", lambda w: [w["job"].pk]),
        },
        lambda w: JobDefinition.objects.get(pk=w["job"].pk).status == "active",
    ),
    "pause a tenant": (
        controls,
        "pause_tenant",
        {
            "api": lambda api, w: api_call(api, w, "POST", "/v1/tenant:pause"),
            "portal": portal_action(TENANTS, "pause_tenants", lambda w: [w["tenant"].pk], queue=""),
        },
        lambda w: type(w["tenant"]).objects.get(pk=w["tenant"].pk).paused_at is not None,
    ),
    "pause a queue": (
        controls,
        "pause_tenant",
        {
            "api": lambda api, w: api_call(api, w, "POST", "/v1/tenant:pause", {"queue": "reports"}),
            "portal": portal_action(TENANTS, "pause_tenants", lambda w: [w["tenant"].pk], queue="reports"),
        },
        lambda w: QueuePause.objects.filter(tenant=w["tenant"], queue="reports").exists(),
    ),
    "trigger a job": (
        controls,
        "trigger_many",
        {
            "api": lambda api, w: api_call(api, w, "POST", "/v1/jobs/billing.nightly:trigger"),
            "portal": portal_action(JOBS, "trigger_jobs", lambda w: [w["job"].pk]),
        },
        lambda w: Run.objects.filter(job=w["job"], origin="trigger").exists(),
    ),
    "cancel a run": (
        controls,
        "cancel_runs",
        {
            "api": lambda api, w: api_call(api, w, "POST", f"/v1/runs/{w['run'].pk}:cancel"),
            "portal": portal_action(RUNS, "cancel_runs", lambda w: [w["run"].pk]),
        },
        lambda w: Run.objects.get(pk=w["run"].pk).state == "cancelled",
    ),
    "replay a dead letter": (
        controls,
        "replay_many",
        {
            "api": lambda api, w: api_call(api, w, "POST", f"/v1/dlq/{w['letter'].pk}:replay"),
            "api, many": lambda api, w: api_call(api, w, "POST", "/v1/dlq:replay", {"ids": [w["letter"].pk]}),
            "portal": portal_action(LETTERS, "replay_dead_letters", lambda w: [w["letter"].pk]),
        },
        lambda w: DeadLetter.objects.get(pk=w["letter"].pk).replayed_at is not None,
    ),
    "discard a dead letter": (
        controls,
        "discard_many",
        {
            "api": lambda api, w: api_call(api, w, "POST", f"/v1/dlq/{w['letter'].pk}:discard"),
            "api, many": lambda api, w: api_call(api, w, "POST", "/v1/dlq:discard", {"job": "billing.dies"}),
            "portal": portal_action(LETTERS, "discard_dead_letters", lambda w: [w["letter"].pk]),
        },
        lambda w: DeadLetter.objects.get(pk=w["letter"].pk).discarded_at is not None,
    ),
    "delete a job": (
        controls,
        "delete_many",
        {
            "api": lambda api, w: api_call(api, w, "DELETE", "/v1/jobs/billing.nightly"),
            "portal": portal_action(JOBS, "cancel_jobs", lambda w: [w["job"].pk]),
        },
        lambda w: JobDefinition.objects.get(pk=w["job"].pk).status == "cancelled",
    ),
    "backfill a job": (
        backfill,
        "backfill",
        {
            "api": lambda api, w: api_call(
                api,
                w,
                "POST",
                "/v1/jobs/billing.nightly:backfill",
                {"start": window(w)[0].isoformat(), "end": window(w)[1].isoformat()},
            ),
            "portal": portal_backfill,
            "cli": lambda api, w: call_command(
                "backfill",
                "billing.nightly",
                tenant="acme",
                start=window(w)[0].isoformat(),
                end=window(w)[1].isoformat(),
            ),
        },
        lambda w: Run.objects.filter(job=w["job"], origin="backfill").exists(),
    ),
    "issue a token": (
        tokens,
        "issue",
        {
            "portal": lambda api, w: w["portal"].post(
                reverse("admin:jobs_apitoken_add"),
                {"tenant": w["tenant"].pk, "kind": "team", "name": "door-test", "role": "viewer", "queues": ""},
            ),
            "cli": lambda api, w: call_command(
                "create_token", "--tenant", "acme", "--kind", "team", "--name", "door-test"
            ),
        },
        lambda w: ApiToken.objects.filter(tenant=w["tenant"], name="door-test").exists(),
    ),
    "revoke a token": (
        tokens,
        "revoke",
        {
            "portal": portal_action(
                TOKENS, "revoke_tokens", lambda w: [ApiToken.objects.get(tenant=w["tenant"], kind="team").pk]
            ),
        },
        lambda w: not ApiToken.objects.get(tenant=w["tenant"], kind="team").is_active,
    ),
    "change a member's role": (
        members,
        "grant",
        {
            "portal": lambda api, w: w["portal"].post(
                reverse("admin:jobs_membership_change", args=[w["erin"].pk]), {"role": "operator"}
            ),
        },
        lambda w: type(w["erin"]).objects.get(pk=w["erin"].pk).role == "operator",
    ),
    "remove a member": (
        members,
        "remove",
        {"portal": portal_action(MEMBERS, "remove_members", lambda w: [w["erin"].pk])},
        lambda w: not type(w["erin"]).objects.filter(pk=w["erin"].pk).exists(),
    ),
    "add a maintenance window": (
        edits,
        "save_window",
        {
            "api": lambda api, w: api_call(
                api,
                w,
                "POST",
                "/v1/windows",
                {
                    "name": "freeze",
                    "kind": "one_off",
                    "starts_at": "2027-01-01T00:00:00Z",
                    "ends_at": "2027-01-02T00:00:00Z",
                },
            ),
            "cli": cli_set(FREEZE),
        },
        lambda w: Window.objects.filter(tenant=w["tenant"], name="freeze").exists(),
    ),
    "delete a maintenance window": (
        edits,
        "delete_windows",
        {
            "api": lambda api, w: api_call(api, w, "DELETE", f"/v1/windows/{w['window'].pk}"),
            "portal": lambda api, w: w["portal"].post(
                reverse("admin:calendars_window_delete", args=[w["window"].pk]), {"post": "yes"}
            ),
            "cli": cli_set(DB_UPGRADE, "jobs = {}", prune=True),  # the set adopts the window, then prunes it
        },
        lambda w: not Window.objects.filter(pk=w["window"].pk).exists(),
    ),
    "rotate a job's signing secret": (
        definitions,
        "rotate_signing_secret",
        {
            "api": lambda api, w: api_call(api, w, "POST", "/v1/jobs/billing.hook:rotate-signing-secret"),
            "portal": lambda api, w: w["portal"].post(reverse("admin:portal_job_signing_secret", args=[w["hook"].pk])),
        },
        lambda w: AuditEntry.objects.filter(action="rotate_job_signing_secret", object_id=str(w["hook"].pk)).exists(),
    ),
    "edit a calendar": (
        edits,
        "save_calendar",
        {
            "api": lambda api, w: api_call(api, w, "PUT", "/v1/calendars/office", {"weekend_days": [5, 6]}),
            "cli": cli_set("jobs = {}\n[calendars.office]\nweekend_days = [5, 6]\n"),
        },
        lambda w: Calendar.objects.get(tenant=w["tenant"], name="office").weekend_days == [5, 6],
    ),
}

CASES = [(control, door) for control, (_, _, doors, _) in CONTROLS.items() for door in doors]


def _prepare(control, world):
    if control == "resume a job":
        controls.pause(world["job"], actor="test")
    if control == "rotate a job's signing secret":
        url = "https://public.example/hook"
        world["hook"] = JobDefinition(
            tenant=world["tenant"], name="billing.hook", schedule_kind="none", target_kind="http", target_ref=url
        )
        world["hook"].save()


@pytest.mark.parametrize(("control", "door"), CASES, ids=[f"{c}-{d}" for c, d in CASES])
def test_each_door_calls_the_controls_one_domain_function(control, door, api, world):
    module, name, doors, took_effect = CONTROLS[control]
    _prepare(control, world)
    real = getattr(module, name)
    with mock.patch.object(module, name, wraps=real) as spy:
        doors[door](api, world)
    assert spy.called, f"the {door} door of '{control}' does not call {module.__name__}.{name}"
    assert took_effect(world), f"the {door} door of '{control}' called {name} but nothing changed"


def test_the_door_test_catches_a_door_that_bypasses_its_control(api, world):
    """The spy sees a door that moves state itself: here a stand-in door that cancels through transitions."""
    from runs import transitions

    module, name, _, _ = CONTROLS["cancel a run"]
    with mock.patch.object(module, name, wraps=getattr(module, name)) as spy:
        transitions.cancel_run(world["run"], reason="a door that reached past runs.controls")
    assert not spy.called
