"""Dashboards and the job page: the numbers an operator needs, per tenant, in the run states documented in docs/api.md."""

import datetime as dt

import pytest
from django.urls import reverse

from runs import rollups


@pytest.fixture
def busy_acme(acme, make_job, make_run, make_attempt, make_dead, wall_clock):
    """Acme's last hour: 20 runs that started 1..20 s late, one dead export, a backlog on `reports`.

    On the real clock, which the dashboards read.
    """
    now = wall_clock.now
    job = make_job(acme, "billing.export", cron_expr="*/5 * * * *")
    for i in range(20):
        due = now - dt.timedelta(minutes=30, seconds=i * 30)
        run = make_run(job, state="succeeded", due_at=due)
        make_attempt(run, late=dt.timedelta(seconds=i + 1), ended=due + dt.timedelta(seconds=i + 3))
    reports = make_job(acme, "reports.build", queue="reports")
    make_run(reports, due_at=now - dt.timedelta(minutes=6, seconds=57.5))  # "7.0 min" for the page's next 5 s
    make_run(reports, due_at=now - dt.timedelta(minutes=2))
    make_run(reports, due_at=now + dt.timedelta(minutes=5))
    make_dead(job, now - dt.timedelta(minutes=10), error="Traceback\nKeyError: 'invoice_id'")
    rollups.tick(now)
    return job


def test_it_shows_runs_by_state_backlog_leases_and_dead_letters(as_alice, busy_acme):
    page = as_alice.get(reverse("admin:portal_overview")).content.decode()
    assert "Runs by state" in page
    for state in ("scheduled", "ready", "leased", "retry_wait", "succeeded", "dead", "cancelled", "skipped"):
        assert f"dt-state-{state}" in page
    assert '<th scope="row">reports</th><td>2</td>' in page  # two ready, the third not yet available
    assert "7.0 min" in page  # the oldest ready run has waited about 7 minutes
    assert "billing.export" in page and "Dead letters per job" in page
    assert "<svg" in page and "New dead letters per hour" in page


def test_it_charts_lateness_percentiles_for_the_last_hour_and_day(as_alice, busy_acme):
    page = as_alice.get(reverse("admin:portal_lateness")).content.decode()
    assert page.count('class="portal-chart"') == 2
    assert "series-p50" in page and "series-p95" in page and "series-p99" in page
    assert "over 21 first attempt(s)" in page  # the dead export started too
    assert "p99 2" in page  # about 20 s, read back from the histogram within 12 %


def test_it_shows_the_job_page_with_next_occurrences_history_and_why_it_failed(as_alice, busy_acme):
    page = as_alice.get(reverse("admin:portal_job", args=[busy_acme.pk])).content.decode()
    assert "Next occurrences" in page and "every 5 minutes" in page
    assert "KeyError: &#x27;invoice_id&#x27;" in page  # the last error, readable
    assert 'data-testid="attempts-timeline"' in page and "Attempt 1" in page
    assert 'data-testid="job-history"' in page


def test_it_flags_dst_changes_in_the_next_occurrences(as_alice, acme, make_job):
    job = make_job(acme, "ny.early", cron_expr="30 2 * * *", time_zone="America/New_York")
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert "America/New_York" in page


def test_it_sends_a_user_without_tenants_a_clear_404(client, django_user_model):
    lonely = django_user_model.objects.create_superuser("root", "root@example.com", "root-pass-123")
    client.force_login(lonely)
    assert client.get(reverse("admin:portal_overview")).status_code == 404  # no tenant exists at all
