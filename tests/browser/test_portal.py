"""Stories in a real browser against real processes: Alice operates acme, Bob globex.

The scheduler and the worker are separate processes, so every "without a
reload" below is the web process noticing their writes and pushing the change
over the WebSocket.
"""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model

from dlq.models import DeadLetter
from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant
from runs.models import Attempt, Run
from tests.browser.conftest import OVERFLOW
from tests.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("live_db")]


@pytest.fixture
def acme_team():
    acme, _ = Tenant.objects.get_or_create(name="acme", defaults={"task_module_prefixes": "tests.handlers"})
    globex, _ = Tenant.objects.get_or_create(name="globex", defaults={"task_module_prefixes": "tests.handlers"})
    User = get_user_model()
    alice = User.objects.create_user("alice", password="alice-pass-123", is_staff=True)
    bob = User.objects.create_user("bob", password="bob-pass-123", is_staff=True)
    acme.members.add(alice, through_defaults={"role": "owner"})
    globex.members.add(bob, through_defaults={"role": "owner"})
    return acme, globex


def job(tenant, name, **fields):
    fields.setdefault("target_ref", "tests.handlers.noop")
    fields.setdefault("schedule_kind", "cron" if fields.get("cron_expr") else "none")
    definition, _ = save_definition(JobDefinition(tenant=tenant, name=name, **fields), "test:setup")
    return definition


def mark_no_reload(page):
    page.evaluate("window.__stillTheSamePage = true")


def assert_not_reloaded(page):
    assert page.evaluate("window.__stillTheSamePage === true"), "the page was reloaded"


def test_it_creates_a_cron_job_and_shows_its_run_succeed_without_a_reload(visit, acme_team):
    alice = visit("alice", "alice-pass-123")
    page = alice.go("/admin/jobs/jobdefinition/add/")
    page.get_by_label("Tenant").select_option(label="acme")
    page.get_by_label("Name").fill("reports.every-minute")
    page.get_by_label("Cron expr").fill("* * * * *")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    preview = page.locator("#schedule-preview")
    preview.get_by_text("every minute, Europe/Berlin").wait_for()  # the preview follows the typing
    page.get_by_label("Time zone").fill("Europe/Berlinn")
    page.locator("#schedule-preview[data-state=error]").wait_for()
    assert "Europe/Berlin" in preview.inner_text()  # the error suggests the right zone
    alice.shot("preview-error")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    page.get_by_label("Target ref").fill("tests.handlers.noop")
    alice.shot("form-filled")
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_text("was added successfully").wait_for()
    alice.shot("saved")
    created = JobDefinition.objects.get(name="reports.every-minute")

    page = alice.go(f"/admin/dashboard/jobs/{created.pk}/")
    mark_no_reload(page)
    page.wait_for_function("document.body.getAttribute('data-live') === 'connected'")
    history = page.get_by_test_id("job-history")
    history.locator(".dt-state-scheduled, .dt-state-ready, .dt-state-leased, .dt-state-succeeded").first.wait_for(
        timeout=30_000
    )
    alice.shot("run-appeared")
    history.locator(".dt-state-succeeded").first.wait_for(timeout=80_000)  # due at the next minute
    alice.shot("run-succeeded")
    assert_not_reloaded(page)
    assert Run.objects.filter(job=created, state="succeeded").exists()


def test_it_creates_an_every_job_with_bounds_previewing_its_periods_and_refusing_an_end_before_its_start(
    visit, acme_team
):
    alice = visit("alice", "alice-pass-123")
    page = alice.go("/admin/jobs/jobdefinition/add/")
    page.get_by_label("Tenant").select_option(label="acme")
    page.get_by_label("Name").fill("reports.pulse")
    page.get_by_label("Schedule kind").select_option("every")
    page.get_by_label("Every seconds").fill("5400")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    page.locator("#id_start_at_0").fill("2030-03-30")
    page.locator("#id_start_at_1").fill("22:00:00")
    preview = page.locator("#schedule-preview")
    preview.get_by_text("every 90 minutes from 2030-03-30 23:00 CET, Europe/Berlin").wait_for()
    assert "still 90 minutes after it" in preview.inner_text()  # the DST change, noted on the run after it
    alice.shot("every-preview")
    page.locator("#id_end_at_0").fill("2030-03-29")
    page.locator("#id_end_at_1").fill("00:00:00")
    page.locator("#schedule-preview[data-state=error]").wait_for()
    page.get_by_label("Target ref").fill("tests.handlers.noop")
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_text("must be after start_at").wait_for()  # the form error, nothing saved
    assert not JobDefinition.objects.filter(name="reports.pulse").exists()
    page.locator("#id_end_at_0").fill("2030-04-30")
    page.get_by_label("Remaining runs").fill("3")
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_text("was added successfully").wait_for()
    created = JobDefinition.objects.get(name="reports.pulse")
    assert (created.every_seconds, created.remaining_runs) == (5400, 3)


def test_it_pauses_resumes_and_triggers_a_job_now(visit, acme_team):
    acme, _ = acme_team
    nightly = job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="Europe/Berlin")
    alice = visit("alice", "alice-pass-123")

    for verb, action, status in (("Pause", "pause_jobs", "paused"), ("Resume", "resume_jobs", "active")):
        page = alice.go("/admin/jobs/jobdefinition/")
        page.get_by_role("row", name="billing.nightly").get_by_role("checkbox").check()
        page.get_by_label("Action:").select_option(action)
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_test_id("action-preview").wait_for()
        alice.shot(f"{verb}-preview")
        page.get_by_label("Audit note").fill(f"{verb} from the browser test")
        page.get_by_role("button", name=verb, exact=True).click()
        page.get_by_text(f"{verb}d 1 job(s).").wait_for()
        alice.shot(f"{verb}-done")
        assert JobDefinition.objects.get(pk=nightly.pk).status == status

    page = alice.go(f"/admin/dashboard/jobs/{nightly.pk}/")
    page.get_by_role("button", name="Trigger now…").click()
    page.get_by_test_id("action-preview").wait_for()
    alice.shot("trigger-preview")
    page.get_by_label("Audit note").fill("a customer asked")
    page.get_by_role("button", name="Trigger now", exact=True).click()
    page.get_by_text("Triggered 1 run(s).").wait_for()
    page = alice.go(f"/admin/dashboard/jobs/{nightly.pk}/")
    mark_no_reload(page)
    page.get_by_test_id("job-history").locator(".dt-state-succeeded").first.wait_for(timeout=30_000)
    alice.shot("triggered-run-succeeded")
    assert_not_reloaded(page)
    assert Run.objects.get(job=nightly, origin="trigger").state == "succeeded"


def test_it_replays_a_dead_letter(visit, acme_team, wall_clock):
    acme, _ = acme_team
    export = job(acme, "billing.export", payload={"month": "2026-05"})
    due = wall_clock.ago(minutes=10)  # the real clock: the portal's worker runs what is due by it
    run = Run.objects.create(
        job=export,
        tenant=acme,
        origin="api",
        due_at=due,
        available_at=due,
        state="dead",
        attempt=1,
        max_attempts=1,
        idempotency_key="export-may",
        queue="default",
        fencing_token=1,
        worker_id="w-old",
        started_at=due,
        finished_at=due + dt.timedelta(seconds=2),
        last_error="Traceback ...\nValueError: the export file is empty: " + "s3://exports/2026-05/" * 12,
    )
    Attempt.objects.create(
        run=run,
        attempt=1,
        fencing_token=1,
        worker_id="w-old",
        available_at=due,
        started_at=due,
        ended_at=due + dt.timedelta(seconds=2),
        outcome="failed",
        error=run.last_error,
    )
    letter = DeadLetter.objects.create(
        run=run, job=export, tenant=acme, last_error=run.last_error, dead_at=due + dt.timedelta(seconds=2)
    )

    alice = visit("alice", "alice-pass-123")
    page = alice.go("/admin/dlq/deadletter/")
    page.get_by_text("ValueError: the export file is empty").first.wait_for()
    assert page.evaluate(OVERFLOW) == []  # a long error is cut to one line, the list fits at 1,280 px
    page.get_by_role("row", name="billing.export").get_by_role("checkbox").check()
    page.get_by_label("Action:").select_option("replay_dead_letters")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_test_id("action-preview").wait_for()
    alice.shot("replay-preview")
    page.get_by_label("Audit note").fill("the file is there now")
    page.get_by_role("button", name="Replay", exact=True).click()
    page.get_by_text("Replayed 1 dead letter(s).").wait_for()
    alice.shot("replayed")
    wait_until(lambda: Run.objects.get(pk=run.pk).state == "succeeded", message="the replayed run to succeed")
    alice.go(f"/admin/runs/run/{run.pk}/")
    assert DeadLetter.objects.get(pk=letter.pk).replayed_at is not None


def test_it_charts_lateness_with_data(visit, acme_team, wall_clock):
    acme, _ = acme_team
    steady = job(acme, "metrics.collect")
    now = wall_clock.now  # the real clock: the portal charts the last hour by it
    for i in range(40):
        due = now - dt.timedelta(minutes=50) + dt.timedelta(minutes=i)
        run = Run.objects.create(
            job=steady,
            tenant=acme,
            origin="api",
            due_at=due,
            available_at=due,
            state="succeeded",
            attempt=1,
            idempotency_key=f"m-{i}",
            queue="default",
            fencing_token=1,
            started_at=due,
            finished_at=due + dt.timedelta(seconds=5),
        )
        started = due + dt.timedelta(milliseconds=200 + 150 * i)
        Attempt.objects.create(
            run=run,
            attempt=1,
            fencing_token=1,
            worker_id="w",
            available_at=due,
            started_at=started,
            ended_at=started + dt.timedelta(seconds=1),
            outcome="succeeded",
        )
    # The scheduler process folds them into the rollups on its next ticks.
    from runs.rollups import TenantMinute

    wait_until(
        lambda: sum(TenantMinute.objects.filter(tenant=acme).values_list("first_attempts", flat=True)) >= 40,
        message="the rollups",
    )
    alice = visit("alice", "alice-pass-123")
    page = alice.go("/admin/dashboard/lateness/")
    hour = page.get_by_test_id("lateness-hour")
    assert hour.locator("svg .series-p99").count() == 1
    assert hour.locator("svg .series-p50").count() == 1
    assert "over 40 first attempt(s)" in hour.inner_text()
    page = alice.go("/admin/dashboard/")
    assert "Runs by state" in page.inner_text("body")


def test_it_keeps_a_team_member_out_of_another_tenants_job(visit, acme_team):
    acme, globex = acme_team
    secret = job(acme, "acme.payroll", cron_expr="0 9 * * 1-5", time_zone="Europe/London")
    job(globex, "globex.report", cron_expr="0 8 * * *")
    bob = visit("bob", "bob-pass-123")
    page = bob.go("/admin/jobs/jobdefinition/")
    assert "globex.report" in page.inner_text("#result_list")
    assert "acme.payroll" not in page.content()
    response = bob.page.goto(f"{bob.base}/admin/jobs/jobdefinition/{secret.pk}/change/")
    bob.shot("other-tenant-job")
    assert response.status == 404
    assert bob.page.goto(f"{bob.base}/admin/dashboard/jobs/{secret.pk}/").status == 404
    assert bob.page.goto(f"{bob.base}/admin/dashboard/?tenant=acme").status == 404
    page = bob.go("/admin/runs/run/")
    assert "acme" not in page.inner_text("#changelist")


def test_it_adds_a_maintenance_window_and_the_preview_and_ledger_show_it(visit, acme_team):
    acme, _ = acme_team
    nightly = job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="UTC")
    alice = visit("alice", "alice-pass-123")
    page = alice.go("/admin/calendars/window/add/")
    page.get_by_label("Tenant").select_option(label="acme")
    page.locator("#id_job").select_option(label="billing.nightly")
    page.get_by_label("Name").fill("db upgrade")
    page.get_by_label("Resume policy").select_option("run_once")
    page.get_by_label("Cron expr").fill("0 1 * * *")
    page.get_by_label("Duration seconds").fill("7200")
    page.locator("#id_kind").select_option("recurring")
    alice.shot("window-form")
    page.get_by_role("button", name="Save and continue editing").click()
    page.get_by_text("was added successfully").wait_for()
    intervals = page.get_by_test_id("window-intervals")
    assert "db upgrade" in intervals.inner_text()  # its next windows, 01:00 to 03:00 UTC
    alice.shot("window-saved")
    assert not page.evaluate(OVERFLOW)
    for listing in ("/admin/calendars/window/", "/admin/calendars/calendar/add/"):
        assert not alice.go(listing).evaluate(OVERFLOW), listing

    page = alice.go(f"/admin/jobs/jobdefinition/{nightly.pk}/change/")
    preview = page.locator("#schedule-preview")
    preview.get_by_text("held by window 'db upgrade'").first.wait_for()
    alice.shot("preview-held-by-window")
    assert "(run_once)" in preview.inner_text()

    page = alice.go(f"/admin/dashboard/jobs/{nightly.pk}/")
    page.get_by_test_id("ledger-link").click()
    page.get_by_test_id("ledger").wait_for()
    alice.shot("ledger")
    assert "none missing" in page.get_by_test_id("ledger-summary").inner_text()
    assert not page.evaluate(OVERFLOW)


def test_it_shows_a_portal_edit_of_a_job_declared_in_code_as_drift_and_adopts_it(visit, acme_team):
    from runs.schedule_sets import apply_set
    from tests.fixtures.schedules import nightly_export, ping, specs

    acme, _ = acme_team
    apply_set(acme, specs(billing_ping=ping(), billing_export=nightly_export()), source="billing", actor="cli:ops")
    declared = JobDefinition.objects.get(name="billing.ping")
    alice = visit("alice", "alice-pass-123")

    page = alice.go(f"/admin/jobs/jobdefinition/{declared.pk}/change/")
    page.get_by_text("is declared in code (set billing)").wait_for()
    page.get_by_label("Queue").fill("batch")
    page.get_by_label("Max attempts").fill("9")
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_text("was changed successfully").wait_for()

    page = alice.go("/admin/jobs/jobdefinition/?code=drift")
    assert "set billing ⚠ drift: queue, retry.max_attempts" in page.inner_text("#result_list")
    assert "billing.export" not in page.inner_text("#result_list")  # in sync with its set
    assert not page.evaluate(OVERFLOW)

    page = alice.go(f"/admin/dashboard/jobs/{declared.pk}/")
    drift = page.get_by_test_id("job-drift-table")
    assert [row.inner_text().split("\t") for row in drift.locator("tbody tr").all()] == [
        ["queue", '"default"', '"batch"'],
        ["retry.max_attempts", "5", "9"],
    ]
    assert not page.evaluate(OVERFLOW)
    page.get_by_role("button", name="Adopt into code…").click()
    page.get_by_test_id("action-preview").wait_for()
    alice.shot("adopt-preview")
    page.get_by_label("Audit note").fill("batch is where it belongs")
    page.get_by_role("button", name="Adopt", exact=True).click()
    declaration = page.get_by_test_id("declaration")
    declaration.wait_for()
    alice.shot("declaration-to-paste")
    assert 'queue = "batch"' in declaration.input_value()

    page = alice.go(f"/admin/dashboard/jobs/{declared.pk}/")
    page.get_by_test_id("job-in-sync").wait_for()
    alice.shot("in-sync-after-adoption")
