"""Maintenance windows in the portal: Alice adds one for acme's job, Bob never sees it."""

import datetime as dt

from django.urls import reverse

from calendars.models import Window
from jobs.models import AuditEntry

ADD = reverse("admin:calendars_window_add")


def form(tenant, job=None, **fields):
    values = {
        "tenant": tenant.pk,
        "job": job.pk if job else "",
        "name": "db upgrade",
        "enabled": "on",
        "resume_policy": "run_once",
        "note": "",
        "kind": "one_off",
        "starts_at_0": "2030-06-01",
        "starts_at_1": "09:30:00",
        "ends_at_0": "2030-06-01",
        "ends_at_1": "12:30:00",
        "cron_expr": "",
        "time_zone": "UTC",
        "duration_seconds": "",
        "calendar": "",
    }
    values.update(fields)
    return values


def test_it_adds_a_window_for_a_job_audited_and_shows_its_next_interval(as_alice, acme, make_job):
    job = make_job(acme, "billing.nightly", cron_expr="0 * * * *")
    answer = as_alice.post(ADD, form(acme, job))
    assert answer.status_code == 302, answer.context["adminform"].form.errors
    window = Window.objects.get(name="db upgrade")
    assert window.job == job and window.resume_policy == "run_once"
    assert AuditEntry.objects.get(action="create", object_type="calendars.window").actor == "user:alice"
    page = as_alice.get(reverse("admin:calendars_window_change", args=[window.pk])).content.decode()
    assert "Sat 2030-06-01 09:30 to Sat 2030-06-01 12:30 UTC: db upgrade" in page
    assert "billing.nightly" in page


def test_a_recurring_window_with_a_bad_cron_is_a_form_error_saying_how_to_fix_it(as_alice, acme):
    answer = as_alice.post(ADD, form(acme, kind="recurring", cron_expr="0 25 * * *", duration_seconds="3600"))
    assert answer.status_code == 200
    assert "hour" in str(answer.context["adminform"].form.errors["cron_expr"])


def test_a_window_naming_another_tenants_job_is_refused(as_alice, acme, globex, make_job):
    theirs = make_job(globex, "secret.job")
    answer = as_alice.post(ADD, form(acme, theirs))
    assert answer.status_code == 200 and "job" in answer.context["adminform"].form.errors
    assert not Window.objects.exists()


def test_bob_sees_no_window_of_acme(as_bob, acme):
    window = Window.objects.create(
        tenant=acme,
        name="acme only",
        starts_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        ends_at=dt.datetime(2030, 1, 2, tzinfo=dt.UTC),
    )
    assert "acme only" not in as_bob.get(reverse("admin:calendars_window_changelist")).content.decode()
    assert as_bob.get(reverse("admin:calendars_window_change", args=[window.pk])).status_code == 404
