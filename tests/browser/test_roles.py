"""Roles and the portal's hardening in a real browser: Dave only views acme, Alice owns it.

Dave reads every page and finds no button that changes anything; the same
POSTs a button would send, crafted in his browser, are refused (403) and
change nothing. Alice walks every page, forms and confirmations included,
and the browser reports no Content-Security-Policy violation (the `visit`
fixture fails a test that meets one). A guesser locked out of the login sees
how long to wait.
"""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from dlq.models import DeadLetter
from jobs import members
from jobs.definitions import save_definition
from jobs.models import JobDefinition, QueuePause, Tenant
from runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("live_db")]


def job(tenant, name, **fields):
    fields.setdefault("target_ref", "tests.handlers.noop")
    fields.setdefault("schedule_kind", "cron" if fields.get("cron_expr") else "none")
    definition, _ = save_definition(JobDefinition(tenant=tenant, name=name, **fields), "test:setup")
    return definition


@pytest.fixture
def story():
    """acme: Alice its owner, Dave a viewer; a nightly job, a dead letter, a paused queue (the banner)."""
    tenant, _ = Tenant.objects.get_or_create(name="acme", defaults={"task_module_prefixes": "tests.handlers"})
    User = get_user_model()
    alice = User.objects.create_user("alice", password="alice-pass-123", is_staff=True)
    dave = User.objects.create_user("dave", password="dave-pass-123", is_staff=True)
    members.grant(tenant, alice, "owner", actor="test:setup")
    members.grant(tenant, dave, "viewer", actor="test:setup")
    nightly = job(tenant, "billing.nightly", cron_expr="0 2 * * *", time_zone="Europe/Berlin")
    dying = job(tenant, "billing.dies", max_attempts=1)
    due = timezone.now() - dt.timedelta(hours=1)
    run = Run.objects.create(
        job=dying,
        tenant=tenant,
        due_at=due,
        available_at=due,
        state="dead",
        queue="default",
        shard=dying.shard,
        max_attempts=1,
        timeout_seconds=60,
        idempotency_key="billing.dies@1",
        finished_at=due,
        last_error="ValueError: the export file is empty",
    )
    letter = DeadLetter.objects.create(run=run, job=dying, tenant=tenant, last_error=run.last_error, dead_at=due)
    QueuePause.objects.create(tenant=tenant, queue="reports", paused_at=timezone.now())
    return {"tenant": tenant, "nightly": nightly, "run": run, "letter": letter}


def pages(story):
    nightly, run, letter = story["nightly"], story["run"], story["letter"]
    return [
        "/admin/",
        "/admin/dashboard/?tenant=acme",
        "/admin/dashboard/tenants/",
        "/admin/dashboard/lateness/?tenant=acme",
        "/admin/dashboard/heatmap/?tenant=acme",
        f"/admin/dashboard/jobs/{nightly.pk}/",
        f"/admin/dashboard/jobs/{nightly.pk}/ledger/",
        "/admin/jobs/jobdefinition/",
        f"/admin/jobs/jobdefinition/{nightly.pk}/change/",
        "/admin/runs/run/",
        f"/admin/runs/run/{run.pk}/change/",
        "/admin/dlq/deadletter/",
        f"/admin/dlq/deadletter/{letter.pk}/change/",
        "/admin/calendars/window/",
        "/admin/calendars/calendar/",
        "/admin/jobs/apitoken/",
        "/admin/jobs/membership/",
        "/admin/jobs/auditentry/",
        "/admin/jobs/tenant/",
        "/admin/notify/notification/",
        "/admin/notify/signing-secret/?tenant=acme",
    ]


# What a person could press to change something: the controls of every form that posts (log-out aside),
# an action menu, an "add" link.
CONTROLS = """() => [
  ...document.querySelectorAll(
    'form[method=post]:not(#logout-form) button, form[method=post]:not(#logout-form) input[type=submit], '
    + 'select[name=action], a.addlink')
].map(el => el.outerHTML.slice(0, 120))"""

# The POST a button would send, sent from the page itself with the session's CSRF token: {status, text}.
CRAFTED = """async ([url, fields]) => {
  const body = new FormData();
  body.append('csrfmiddlewaretoken', document.cookie.match(/csrftoken=([^;]+)/)[1]);
  for (const [name, value] of fields) body.append(name, value);
  const answer = await fetch(url, {method: 'POST', body, credentials: 'same-origin'});
  return {status: answer.status, text: await answer.text()};
}"""


# The same, as a form the page submits: the browser shows the answer.
SUBMIT = """([url, fields]) => {
  const form = Object.assign(document.createElement('form'), {method: 'post', action: url});
  fields = [['csrfmiddlewaretoken', document.cookie.match(/csrftoken=([^;]+)/)[1]], ...fields];
  for (const [name, value] of fields) form.append(Object.assign(document.createElement('input'), {type: 'hidden', name, value}));
  document.body.append(form);
  form.submit();
}"""


def test_a_viewer_sees_every_page_but_no_action_and_a_crafted_action_post_is_refused(visit, story):
    dave = visit("dave", "dave-pass-123")
    for path in pages(story):
        page = dave.go(path)
        assert "Not allowed" not in page.title(), path
        assert page.locator("#content").count() == 1, path
        assert page.evaluate(CONTROLS) == [], f"{path}: {page.evaluate(CONTROLS)}"
    banner = dave.go("/admin/").get_by_test_id("paused-banner")
    assert "reports" in banner.inner_text() and banner.get_by_role("button").count() == 0

    nightly, letter = story["nightly"], story["letter"]
    crafted = {
        "pause (a changelist action)": (
            "/admin/jobs/jobdefinition/",
            [["action", "pause_jobs"], ["_selected_action", str(nightly.pk)], ["index", "0"], ["post", "yes"]],
        ),
        "replay (a changelist action)": (
            "/admin/dlq/deadletter/",
            [["action", "replay_dead_letters"], ["_selected_action", str(letter.pk)], ["post", "yes"]],
        ),
        "edit (a change form)": (
            f"/admin/jobs/jobdefinition/{nightly.pk}/change/",
            [["cron_expr", "* * * * *"], ["_save", "Save"]],
        ),
        "backfill (a custom view)": (
            "/admin/jobs/jobdefinition/backfill-step/",
            [["job", str(nightly.pk)], ["cursor", "2026-01-01T00:00:00+00:00"], ["end", "2026-01-02T00:00:00+00:00"]],
        ),
        "rotate the signing secret (a custom view)": ("/admin/notify/signing-secret/", [["tenant", "acme"]]),
    }
    page = dave.go(f"/admin/dashboard/jobs/{nightly.pk}/")
    for what, (url, fields) in crafted.items():
        answer = page.evaluate(CRAFTED, [url, fields])
        assert answer["status"] == 403, f"{what}: {answer['status']}"
    page = dave.go("/admin/jobs/jobdefinition/")  # and as a page: the form a button would have posted
    page.evaluate(SUBMIT, list(crafted["pause (a changelist action)"]))
    page.get_by_test_id("forbidden-reason").wait_for()
    dave.shot("refused")
    assert (
        "Pause selected jobs needs the role operator or above" in page.get_by_test_id("forbidden-reason").inner_text()
    )

    nightly.refresh_from_db()
    letter.refresh_from_db()
    assert (nightly.status, nightly.cron_expr, letter.replayed_at) == ("active", "0 2 * * *", None)
    assert not Run.objects.filter(job=nightly).exists()


def test_an_owner_walks_every_page_and_form_and_the_browser_reports_no_policy_violation(visit, story):
    alice = visit("alice", "alice-pass-123")
    nightly = story["nightly"]
    for path in [*pages(story), "/admin/jobs/jobdefinition/add/", "/admin/calendars/window/add/", "/v1/docs"]:
        alice.go(path)
    alice.page.locator(".swagger-ui .opblock").first.wait_for()  # Swagger UI's own script ran

    page = alice.go("/admin/jobs/jobdefinition/add/")
    page.get_by_label("Cron expr").fill("*/5 * * * *")
    page.locator("#schedule-preview[data-state=ok] table").wait_for()  # the preview script fetched the next runs
    page = alice.go("/admin/jobs/jobdefinition/")
    page.get_by_role("row", name="billing.nightly").get_by_role("checkbox").check()
    page.get_by_label("Action:").select_option("backfill_jobs")
    page.get_by_role("button", name="Run", exact=True).click()
    end = timezone.now() - dt.timedelta(hours=1)
    page.get_by_label("Window start (UTC)").fill(f"{end - dt.timedelta(days=2):%Y-%m-%d %H:%M}")
    page.get_by_label("Window end (UTC)").fill(f"{end:%Y-%m-%d %H:%M}")
    page.get_by_role("button", name="Preview").first.click()
    page.get_by_role("button", name="Start backfill").click()
    page.locator("body[data-backfill=done]").wait_for()  # the progress page's script stepped it through
    page = alice.go(f"/admin/dashboard/jobs/{nightly.pk}/")
    page.wait_for_function("document.body.getAttribute('data-live') === 'connected'")  # the WebSocket: 'self'
    alice.shot("walked")
    assert Run.objects.filter(job=nightly, origin="backfill").count() == 2

    # The policy is enforced, and the watch sees it: a script injected into the page does not run.
    ran = page.evaluate("""() => {
      const script = document.createElement('script');
      script.textContent = 'window.injected = true';
      document.body.append(script);
      return window.injected === true;
    }""")
    page.wait_for_timeout(200)
    assert ran is False
    assert len(alice.csp) == 1 and "script-src" in alice.csp[0]
    alice.csp.clear()  # that one was on purpose; the fixture fails the test on any other


def test_the_login_lockout_says_how_long_to_wait_and_holds_against_the_right_password(browser, portal, story):
    get_user_model().objects.create_user("erin", password="erin-pass-123", is_staff=True)
    members.grant(story["tenant"], get_user_model().objects.get(username="erin"), "viewer", actor="test:setup")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        for password in ["guess-1", "guess-2", "guess-3", "guess-4", "guess-5", "erin-pass-123"]:
            page.goto(portal + "/admin/login/?next=/admin/")
            page.get_by_label("Username").fill("erin")
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Log in").click()
            page.locator(".errornote").first.wait_for()
        message = page.locator(".errornote").first.inner_text()
        page.screenshot(path=str(_shot("login-locked-out")), full_page=True)
        assert "Too many failed logins for this user name" in message
        assert "locked for 15 minute(s)" in message
        assert page.url.startswith(portal + "/admin/login/")  # the right password did not get her in
    finally:
        context.close()


def _shot(name):
    from tests.browser.conftest import SHOTS

    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS / f"roles-{name}.png"
