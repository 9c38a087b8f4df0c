"""Job definitions in the portal: columns, the one validation path, and the actions with their previews."""

import datetime as dt

import pytest
from django.urls import reverse

from jobs.models import AuditEntry, JobDefinition, Tenant
from runs import shards
from runs.materialize import materialize
from runs.models import CLAIMABLE_STATES, Run
from runs.rollups import tick
from tests.fixtures.portal import action, confirm
from tests.scheduler_project.admin.test_scoping import job_form

CHANGELIST = reverse("admin:jobs_jobdefinition_changelist")


@pytest.fixture
def nightly(acme, make_job):
    return make_job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="Europe/Berlin")


def test_it_shows_the_schedule_in_words_next_due_in_both_zones_and_the_last_outcome(
    as_alice, nightly, make_run, make_attempt, wall_clock
):
    JobDefinition.objects.filter(pk=nightly.pk).update(next_due_at=dt.datetime(2026, 7, 1, 0, 0, tzinfo=dt.UTC))
    # The real clock: the page shows the lateness of the last 24 hours by it.
    run = make_run(nightly, state="dead", due_at=wall_clock.ago(minutes=5), last_error="ValueError: empty export")
    make_attempt(run, late=dt.timedelta(seconds=3), outcome="failed", ended=wall_clock.ago(minutes=1))
    tick(wall_clock.now)
    page = as_alice.get(CHANGELIST).content.decode()
    assert "at 02:00 every day, Europe/Berlin" in page
    assert "2026-07-01 02:00 CEST (00:00 UTC)" in page
    assert "dead" in page and "ValueError: empty export" in page  # the outcome, its error as a tooltip
    assert "3." in page and " s" in page  # p99 lateness over 24 h, about 3 s


def test_it_creates_a_job_through_the_one_validation_path(as_alice, acme):
    response = as_alice.post(reverse("admin:jobs_jobdefinition_add"), job_form(acme, "reports.daily"))
    assert response.status_code == 302, response.content.decode()[:3000]
    job = JobDefinition.objects.get(tenant=acme, name="reports.daily")
    assert job.next_due_at is not None  # computed by save_definition
    assert AuditEntry.objects.filter(action="create", object_id=str(job.pk), actor="user:alice").exists()


def test_it_chooses_a_jitter_for_a_new_job_left_empty_and_says_what_it_chose(as_alice, acme):
    added = as_alice.post(
        reverse("admin:jobs_jobdefinition_add"),
        job_form(acme, "reports.often", cron_expr="*/5 * * * *", jitter_seconds=""),
        follow=True,
    )
    job = JobDefinition.objects.get(tenant=acme, name="reports.often")
    assert (job.jitter_seconds, job.jitter_is_default) == (30, True)
    assert "Jitter of reports.often: 30 s, chosen by Duetime" in added.content.decode()
    # Its edit page leaves the box empty (Duetime's choice) and says what the jitter is now.
    page = as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[job.pk])).content.decode()
    assert 'name="jitter_seconds"' in page and "Now: 30 s, chosen by Duetime" in page
    stated = as_alice.post(
        reverse("admin:jobs_jobdefinition_change", args=[job.pk]),
        job_form(acme, "reports.often", cron_expr="*/5 * * * *", jitter_seconds="0"),
    )
    assert stated.status_code == 302
    job.refresh_from_db()
    assert (job.jitter_seconds, job.jitter_is_default) == (0, False)  # an explicit 0 opts out


def test_it_turns_an_invalid_cron_or_zone_into_form_errors_that_say_how_to_fix_them(as_alice, acme):
    response = as_alice.post(
        reverse("admin:jobs_jobdefinition_add"),
        job_form(acme, "reports.bad", cron_expr="61 * * * *", time_zone="Europe/Berlinn"),
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "errorlist" in page
    assert "minute" in page  # the cron message names the field at fault
    assert "Europe/Berlin" in page  # the zone message suggests the right spelling
    assert not JobDefinition.objects.filter(name="reports.bad").exists()


def test_it_previews_a_pause_and_pauses_with_an_audit_note(as_alice, nightly, make_run, wall_clock):
    make_run(nightly, due_at=wall_clock.ahead(minutes=30))  # the real clock: the action reads it
    page = action(as_alice, CHANGELIST, "pause_jobs", [nightly.pk]).content.decode()
    assert "1 active job(s) will be paused" in page
    assert "1 run(s) already scheduled wait" in page
    assert 'name="note"' in page
    assert JobDefinition.objects.get(pk=nightly.pk).status == "active"  # nothing happens before "yes"
    confirm(as_alice, CHANGELIST, "pause_jobs", [nightly.pk], note="database maintenance")
    assert JobDefinition.objects.get(pk=nightly.pk).status == "paused"
    entry = AuditEntry.objects.get(action="pause", object_id=str(nightly.pk))
    assert (entry.actor, entry.note) == ("user:alice", "database maintenance")


def test_it_previews_a_resume_with_the_occurrences_passed_over(as_alice, nightly, wall_clock):
    # The real clock: the preview counts the occurrences passed over until its own "now".
    JobDefinition.objects.filter(pk=nightly.pk).update(status="paused", next_due_at=wall_clock.ago(days=3))
    page = action(as_alice, CHANGELIST, "resume_jobs", [nightly.pk]).content.decode()
    assert "1 paused job(s) will resume" in page
    assert "3 occurrence(s) passed over while paused are recorded as skipped" in page
    confirm(as_alice, CHANGELIST, "resume_jobs", [nightly.pk], note="back")
    assert JobDefinition.objects.get(pk=nightly.pk).status == "active"
    assert Run.objects.filter(job=nightly, state="skipped").exists()


def test_it_triggers_now_and_says_the_overlap_policy_does_not_apply(as_alice, nightly, make_run, wall_clock):
    make_run(nightly, state="leased", due_at=wall_clock.ago(minutes=1))  # the real clock: the action reads it
    page = action(as_alice, CHANGELIST, "trigger_jobs", [nightly.pk]).content.decode()
    assert "1 run(s) will be created" in page
    assert "overlap policy &#x27;forbid&#x27; applies to scheduled occurrences only" in page
    assert "alongside the 1 run(s) already running" in page
    confirm(as_alice, CHANGELIST, "trigger_jobs", [nightly.pk], note="customer asked")
    run = Run.objects.get(job=nightly, origin="trigger")
    # Due at once: from the instant the test began (the action reads the real clock) to the database's now.
    assert run.state == "scheduled" and wall_clock.now <= run.due_at <= shards.database_now()
    assert AuditEntry.objects.get(action="trigger", object_id=str(nightly.pk)).note == "customer asked"


def test_it_triggers_and_resumes_nothing_once_the_tasks_prefix_was_revoked(as_alice, acme, nightly):
    Tenant.objects.filter(pk=acme.pk).update(task_module_prefixes="")  # a superuser's edit

    confirm(as_alice, CHANGELIST, "trigger_jobs", [nightly.pk], note="now")
    JobDefinition.objects.filter(pk=nightly.pk).update(status="paused")
    resumed = confirm(as_alice, CHANGELIST, "resume_jobs", [nightly.pk], note="back")

    said = [str(m) for m in resumed.wsgi_request._messages]  # both pages' messages, none shown yet
    assert said[0].startswith("Nothing triggered: billing.nightly: permission revoked: tenant 'acme' may no longer")
    assert said[-1].startswith("Nothing resumed: billing.nightly: permission revoked")
    assert not Run.objects.filter(job=nightly).exists()
    assert JobDefinition.objects.get(pk=nightly.pk).status == "paused"


def test_it_cancels_a_job_and_its_runs_not_yet_started(as_alice, nightly, make_run, wall_clock):
    waiting = make_run(nightly, due_at=wall_clock.ahead(minutes=30))  # the real clock: the action reads it
    page = action(as_alice, CHANGELIST, "cancel_jobs", [nightly.pk]).content.decode()
    assert "1 run(s) not yet started will be cancelled" in page
    confirm(as_alice, CHANGELIST, "cancel_jobs", [nightly.pk], note="retired")
    assert JobDefinition.objects.get(pk=nightly.pk).status == "cancelled"
    assert Run.objects.get(pk=waiting.pk).state == "cancelled"


@pytest.mark.parametrize(("before", "posted"), [("active", "cancelled"), ("paused", "active")])
def test_it_shows_the_status_read_only_and_ignores_one_posted_with_the_form(
    as_alice, acme, nightly, make_run, wall_clock, before, posted
):
    # A status written by the form would skip what the actions do: cancel the runs of a cancelled
    # job, record the occurrences a resumed job passed over.
    JobDefinition.objects.filter(pk=nightly.pk).update(status=before)
    waiting = make_run(nightly, due_at=wall_clock.ahead(minutes=30))
    change = reverse("admin:jobs_jobdefinition_change", args=[nightly.pk])
    page = as_alice.get(change).content.decode()
    assert 'name="status"' not in page  # shown, not editable
    assert "Changed only by the Pause, Resume and Cancel actions" in page
    response = as_alice.post(change, job_form(acme, nightly.name, status=posted))
    assert response.status_code == 302  # the other fields are saved; the status is not among them
    assert JobDefinition.objects.get(pk=nightly.pk).status == before
    assert Run.objects.get(pk=waiting.pk).state == "scheduled"


def test_it_leaves_no_run_of_a_job_cancelled_in_the_portal_waiting_for_ever(as_alice, nightly, make_run, wall_clock):
    JobDefinition.objects.filter(pk=nightly.pk).update(next_due_at=wall_clock.ahead(seconds=30))
    waiting = [
        make_run(nightly, due_at=wall_clock.ahead(minutes=30)),
        make_run(nightly, due_at=wall_clock.ago(minutes=2)),  # ready
        make_run(nightly, state="retry_wait", due_at=wall_clock.ago(hours=1), available_at=wall_clock.ahead(minutes=5)),
    ]
    done = make_run(nightly, state="succeeded", due_at=wall_clock.ago(days=1))
    confirm(as_alice, CHANGELIST, "cancel_jobs", [nightly.pk], note="retired")
    materialize(wall_clock.ahead(minutes=1))  # the scheduler's next pass adds no run to the cancelled job
    runs = Run.objects.filter(job=nightly)
    assert runs.count() == 4
    assert not runs.filter(state__in=CLAIMABLE_STATES).exists()
    for run in runs.filter(pk__in=[r.pk for r in waiting]):
        assert (run.state, run.reason) == ("cancelled", "job deleted")
        assert run.finished_at is not None
    assert Run.objects.get(pk=done.pk).state == "succeeded"


def test_it_backfills_a_window_with_a_preview_then_chunk_by_chunk(as_alice, nightly, clock):
    end = clock.ago(hours=1)
    start = end - dt.timedelta(days=10)
    window = {"start": start.strftime("%Y-%m-%d %H:%M:%S"), "end": end.strftime("%Y-%m-%d %H:%M:%S"), "max_runs": "7"}
    form = action(as_alice, CHANGELIST, "backfill_jobs", [nightly.pk]).content.decode()
    assert 'name="start"' in form and "Preview" in form
    preview = as_alice.post(
        CHANGELIST,
        {"action": "backfill_jobs", "_selected_action": [nightly.pk], "post": "preview", **window, "note": "outage"},
    )
    text = preview.content.decode()
    assert "7 run(s) will be created for 1 job(s)" in text
    assert "capped" in text
    progress = confirm(as_alice, CHANGELIST, "backfill_jobs", [nightly.pk], **window, note="outage").content.decode()
    assert "data-backfill-job" in progress and 'data-total="7"' in progress
    step_url = reverse("admin:jobs_jobdefinition_backfill_step")
    answer = as_alice.post(
        step_url,
        {"job": nightly.pk, "cursor": start.isoformat(), "end": end.isoformat(), "remaining": 7, "note": "outage"},
    ).json()
    assert answer["created"] == 7 and answer["done"] is True
    assert Run.objects.filter(job=nightly, origin="backfill").count() == 7
    assert AuditEntry.objects.get(action="backfill").note == "outage"


def test_it_refuses_a_backfill_window_in_the_future(as_alice, nightly, wall_clock):
    start, end = wall_clock.ago(days=1), wall_clock.ahead(days=1)  # the future by the real clock, as the form sees it
    window = {"start": start.strftime("%Y-%m-%d %H:%M:%S"), "end": end.strftime("%Y-%m-%d %H:%M:%S"), "max_runs": "100"}
    page = as_alice.post(
        CHANGELIST, {"action": "backfill_jobs", "_selected_action": [nightly.pk], "post": "preview", **window}
    ).content.decode()
    assert "A backfill covers the past" in page
    assert not Run.objects.filter(origin="backfill").exists()


def test_it_steps_a_backfill_only_for_the_users_tenants(as_alice, globex, make_job, clock):
    theirs = make_job(globex, "globex.nightly", cron_expr="0 2 * * *")
    end = clock.ago(hours=1)
    response = as_alice.post(
        reverse("admin:jobs_jobdefinition_backfill_step"),
        {"job": theirs.pk, "cursor": (end - dt.timedelta(days=2)).isoformat(), "end": end.isoformat(), "remaining": 5},
    )
    assert response.status_code == 404
    assert not Run.objects.filter(job=theirs).exists()


def test_it_pauses_all_ten_thousand_jobs_selected_across_pages_and_audits_each(as_carol, acme, clock):
    # How fast is for `manage.py bench` to measure; a test checks that every one of them moved.
    JobDefinition.objects.bulk_create(
        [
            JobDefinition(
                tenant=acme,
                name=f"bulk.{i:05d}",
                schedule_kind="none",
                target_ref="tests.handlers.noop",
                created_at=clock.now,
            )
            for i in range(10_000)
        ]
    )
    ids = list(JobDefinition.objects.filter(tenant=acme).values_list("pk", flat=True)[:100])
    confirm(as_carol, CHANGELIST + "?tenant=" + str(acme.pk), "pause_jobs", ids, select_across="1", note="freeze")
    assert JobDefinition.objects.filter(tenant=acme, status="paused").count() == 10_000
    assert AuditEntry.objects.filter(action="pause", note="freeze").count() == 10_000


def test_it_says_capped_by_quota_when_a_trigger_would_pass_the_pending_quota(as_alice, acme, nightly, make_run):
    make_run(nightly)
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=1)
    confirm(as_alice, CHANGELIST, "trigger_jobs", [nightly.pk], note="now")
    page = as_alice.get(CHANGELIST).content.decode()
    assert "Nothing triggered: capped by quota. Tenant acme may have 1 runs" in page
    assert not Run.objects.filter(job=nightly, origin="trigger").exists()


def test_it_stops_a_backfill_capped_by_quota(as_alice, acme, nightly, clock):
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=3)
    end = clock.ago(hours=1)
    answer = as_alice.post(
        reverse("admin:jobs_jobdefinition_backfill_step"),
        {
            "job": nightly.pk,
            "cursor": (end - dt.timedelta(days=10)).isoformat(),
            "end": end.isoformat(),
            "remaining": 7,
        },
    )
    assert answer.status_code == 429
    assert answer.json()["error"].startswith("capped by quota: Tenant acme may have 3 runs")
    assert not Run.objects.filter(job=nightly).exists()


def test_it_refuses_a_new_job_over_the_definitions_quota_in_the_add_form(as_alice, acme, nightly):
    Tenant.objects.filter(pk=acme.pk).update(max_definitions=1)
    response = as_alice.post(reverse("admin:jobs_jobdefinition_add"), job_form(acme, "reports.daily"))
    assert response.status_code == 200
    assert "Capped by quota: Tenant acme may have 1 job definitions" in response.content.decode()
    assert not JobDefinition.objects.filter(name="reports.daily").exists()


def test_it_refuses_a_task_module_the_tenant_is_not_allowed_in_the_add_form(as_alice, acme):
    response = as_alice.post(
        reverse("admin:jobs_jobdefinition_add"),
        job_form(acme, "reports.demo", target_ref="examples.demo_handlers.hello"),
    )
    page = response.content.decode()
    assert response.status_code == 200 and "errorlist" in page
    assert "may not run tasks from" in page and "DUETIME_TASK_MODULES" in page
    assert not JobDefinition.objects.filter(name="reports.demo").exists()


def test_it_lets_a_superuser_allow_task_modules_and_audits_it(as_carol, acme):
    form = {
        "name": "acme",
        "max_definitions": "1000",
        "max_pending_runs": "1000000",
        "max_concurrent_runs": "1000",
        "enqueue_rate_per_minute": "60000",
        "task_module_prefixes": "tests.handlers\nexamples.demo_handlers",
    }
    response = as_carol.post(reverse("admin:jobs_tenant_change", args=[acme.pk]), form)
    assert response.status_code == 302, response.content.decode()[:3000]
    acme.refresh_from_db()
    assert acme.task_prefixes == ["tests.handlers", "examples.demo_handlers"]
    entry = AuditEntry.objects.get(action="update", object_type="jobs.tenant")
    assert (entry.actor, entry.tenant) == ("user:carol", acme)
    assert entry.detail["task_module_prefixes"]["added"] == ["examples.demo_handlers"]


TENANT_FORM = {
    "name": "acme",
    "max_definitions": "1000",
    "max_pending_runs": "1000000",
    "max_concurrent_runs": "1000",
    "enqueue_rate_per_minute": "60000",
    "task_module_prefixes": "tests.handlers",
}


def test_it_lets_a_superuser_allow_private_networks_and_audits_what_moved(as_carol, acme):
    acme.private_networks = "10.20.0.0/16"
    acme.save()
    form = {**TENANT_FORM, "private_networks": "fd00:20::/64  # billing v6\n10.30.0.0/16"}
    response = as_carol.post(reverse("admin:jobs_tenant_change", args=[acme.pk]), form)
    assert response.status_code == 302, response.content.decode()[:3000]
    acme.refresh_from_db()
    assert [str(n) for n in acme.allowance.networks] == ["fd00:20::/64", "10.30.0.0/16"]
    entry = AuditEntry.objects.get(action="update", object_type="jobs.tenant")
    assert (entry.actor, entry.tenant) == ("user:carol", acme)
    assert entry.detail["private_networks"]["added"] == ["fd00:20::/64", "10.30.0.0/16"]
    assert entry.detail["private_networks"]["removed"] == ["10.20.0.0/16"]


def test_it_refuses_a_private_network_that_is_not_a_cidr_with_a_form_error(as_carol, acme):
    form = {**TENANT_FORM, "private_networks": "10.20.0.1/16"}
    page = as_carol.post(reverse("admin:jobs_tenant_change", args=[acme.pk]), form).content.decode()
    assert "errorlist" in page and "did you mean 10.20.0.0/16?" in page
    acme.refresh_from_db()
    assert acme.private_networks == ""
    assert not AuditEntry.objects.filter(object_type="jobs.tenant").exists()


def test_it_does_not_let_a_tenant_member_allow_a_private_network(as_alice, acme):
    response = as_alice.post(
        reverse("admin:jobs_tenant_change", args=[acme.pk]), {**TENANT_FORM, "private_networks": "0.0.0.0/0"}
    )
    assert response.status_code in (302, 403)
    acme.refresh_from_db()
    assert acme.private_networks == ""


def test_it_refuses_an_http_target_at_a_private_address_in_the_add_form(as_alice, acme):
    form = job_form(acme, "reports.push", target_kind="http", target_ref="http://[64:ff9b::a9fe:a9fe]/latest")
    page = as_alice.post(reverse("admin:jobs_jobdefinition_add"), form).content.decode()
    assert "errorlist" in page and "refused: not a public address" in page
    assert not JobDefinition.objects.filter(name="reports.push").exists()


def test_it_does_not_let_a_tenant_member_change_its_task_modules(as_alice, acme):
    response = as_alice.post(reverse("admin:jobs_tenant_change", args=[acme.pk]), {"task_module_prefixes": "os"})
    assert response.status_code in (302, 403)
    acme.refresh_from_db()
    assert acme.task_prefixes == ["tests.handlers"]


def test_it_audits_a_tenant_edit_with_the_diff_of_quotas_and_task_prefixes(as_carol, acme, alice, bob):
    before = AuditEntry.objects.filter(action="update").count()
    form = {
        "name": "acme",
        "max_definitions": "1000",
        "max_pending_runs": "5000",
        "max_concurrent_runs": "1000",
        "enqueue_rate_per_minute": "600",
        "task_module_prefixes": acme.task_module_prefixes + "\nreports.tasks",
        "members": [str(bob.pk)],  # not a field of the tenant's form any more: members are changed on their own page
    }
    response = as_carol.post(reverse("admin:jobs_tenant_change", args=[acme.pk]), form)
    assert response.status_code == 302, response.content.decode()[:3000]
    entry = AuditEntry.objects.filter(action="update").latest("id")
    assert AuditEntry.objects.filter(action="update").count() == before + 1
    assert (entry.actor, entry.tenant, entry.object_type) == ("user:carol", acme, "jobs.tenant")
    assert entry.detail["max_pending_runs"] == {"before": 1_000_000, "after": 5000}
    assert entry.detail["enqueue_rate_per_minute"] == {"before": 60_000, "after": 600}
    assert entry.detail["task_module_prefixes"]["added"] == ["reports.tasks"]
    assert "members" not in entry.detail and list(acme.members.all()) == [alice]
    assert "max_definitions" not in entry.detail and "name" not in entry.detail


def test_it_audits_a_new_tenant_with_its_quotas(as_carol):
    form = {
        "name": "initech",
        "max_definitions": "10",
        "max_pending_runs": "100",
        "max_concurrent_runs": "5",
        "enqueue_rate_per_minute": "60",
        "task_module_prefixes": "",
    }
    response = as_carol.post(reverse("admin:jobs_tenant_add"), form)
    assert response.status_code == 302, response.content.decode()[:3000]
    entry = AuditEntry.objects.get(action="create", object_type="jobs.tenant")
    assert entry.tenant.name == "initech"
    assert entry.detail["max_pending_runs"] == {"before": None, "after": 100}


def test_it_counts_the_runs_a_resume_releases(as_alice, nightly, make_run, wall_clock):
    make_run(nightly, due_at=wall_clock.ahead(minutes=30))  # the real clock: the action reads it
    make_run(nightly, due_at=wall_clock.ahead(minutes=40))
    JobDefinition.objects.filter(pk=nightly.pk).update(status="paused")
    page = action(as_alice, CHANGELIST, "resume_jobs", [nightly.pk]).content.decode()
    assert "2 run(s) scheduled before the pause become claimable again at once." in page


def test_it_creates_an_every_job_with_bounds_and_a_count_from_the_form(as_alice, acme):
    form = job_form(
        acme,
        "reports.pulse",
        schedule_kind="every",
        cron_expr="",
        every_seconds="90",
        start_at_0="2030-01-01",
        start_at_1="09:00:00",
        end_at_0="2030-01-02",
        end_at_1="09:00:00",
        remaining_runs="10",
    )
    response = as_alice.post(reverse("admin:jobs_jobdefinition_add"), form)
    assert response.status_code == 302, response.content.decode()[:3000]
    job = JobDefinition.objects.get(tenant=acme, name="reports.pulse")
    assert (job.every_seconds, job.remaining_runs) == (90, 10)
    assert job.next_due_at == dt.datetime(2030, 1, 1, 9, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"every_seconds": "0"}, "every_seconds", "the period must be between 1 second"),
        ({"every_seconds": ""}, "every_seconds", "needs a period in seconds"),
        (
            {
                "every_seconds": "60",
                "start_at_0": "2030-01-02",
                "start_at_1": "00:00",
                "end_at_0": "2030-01-01",
                "end_at_1": "00:00",
            },
            "end_at",
            "must be after start_at",
        ),
    ],
)
def test_it_turns_a_bad_period_or_an_end_before_the_start_into_form_errors(as_alice, acme, fields, field, says):
    form = job_form(acme, "reports.bad", schedule_kind="every", cron_expr="", **fields)
    response = as_alice.post(reverse("admin:jobs_jobdefinition_add"), form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert says in " ".join(errors[field]), errors
    assert not JobDefinition.objects.filter(name="reports.bad").exists()


def test_it_refuses_a_backfill_from_the_year_1_with_a_message(as_alice, nightly, wall_clock):
    window = {"start": "0001-01-01 00:00:00", "end": wall_clock.ago(days=1).strftime("%Y-%m-%d %H:%M:%S")}
    page = as_alice.post(
        CHANGELIST,
        {"action": "backfill_jobs", "_selected_action": [nightly.pk], "post": "preview", "max_runs": "100", **window},
    ).content.decode()
    assert "between 1970-01-01 and 9990-12-31" in page
    assert not Run.objects.filter(origin="backfill").exists()


@pytest.mark.parametrize("cursor", ["2026-02-30T00:00:00+00:00", "0001-01-01T00:00:00+00:00", "2026-01-01T00:00:00"])
def test_a_crafted_backfill_step_is_a_400_not_a_500(as_alice, nightly, clock, cursor):
    response = as_alice.post(
        reverse("admin:jobs_jobdefinition_backfill_step"),
        {"job": nightly.pk, "cursor": cursor, "end": clock.ago(hours=1).isoformat(), "remaining": 5},
    )
    assert response.status_code == 400 and response.json()["error"]
    assert not Run.objects.filter(origin="backfill").exists()


@pytest.mark.parametrize("levels", [65, 10_000])
def test_it_refuses_a_payload_nested_too_deep_in_the_add_form(as_alice, acme, levels):
    payload = '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)
    response = as_alice.post(reverse("admin:jobs_jobdefinition_add"), job_form(acme, "reports.deep", payload=payload))
    page = response.content.decode()
    assert response.status_code == 200 and "errorlist" in page
    assert "nests deeper than 64 levels of objects and arrays" in page
    assert not JobDefinition.objects.filter(name="reports.deep").exists()
