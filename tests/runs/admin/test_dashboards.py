"""Dashboards and the job page: the numbers an operator needs, per tenant, in the run states documented in docs/api.md."""

import datetime as dt

import pytest
from django.urls import reverse

from jobs.models import Tenant
from runs import presence, rollups


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


def test_it_says_when_the_last_failure_was_recovered_by_a_retry(
    as_alice, acme, make_job, make_run, make_attempt, wall_clock
):
    job = make_job(acme, "billing.retry", cron_expr="0 * * * *", time_zone="UTC")
    run = make_run(job, state="succeeded", due_at=wall_clock.ago(minutes=30))
    make_attempt(run, attempt=1, outcome="failed", error="ConnectionResetError")
    make_attempt(run, attempt=2, late=dt.timedelta(seconds=20))

    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()

    assert 'data-testid="recovered"' in page and "ConnectionResetError" in page
    assert "<caption>In UTC</caption>" in page and "and in UTC" not in page


def test_the_job_page_warns_when_no_running_consumer_takes_its_runs(as_alice, acme, make_job):
    job = make_job(acme, "reports.render", target_kind="external", target_ref="", queue="reports")
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert 'data-testid="job-unserved"' in page
    assert "No running consumer executes &#x27;external&#x27; jobs on queue &#x27;reports&#x27;" in page
    assert "(last seen: never)" in page


def test_the_job_page_does_not_warn_once_a_consumer_announced_itself(as_alice, acme, make_job):
    job = make_job(acme, "billing.export")
    presence.announce("host:7", ["python", "http"], ["default"])
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert 'data-testid="job-unserved"' not in page


def test_the_job_page_warns_when_only_thread_pool_workers_run_a_job_with_a_timeout(as_alice, acme, make_job):
    job = make_job(acme, "billing.export", timeout_seconds=120)
    presence.announce("host:7", ["python", "http"], ["default"], pool="threads")
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert 'data-testid="job-soft-timeouts"' in page
    assert "a handler past its 120 s timeout is recorded timed_out and retried, but keeps running" in page
    edit = as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[job.pk])).content.decode()
    assert "Only thread-pool workers (run_worker --pool threads)" in edit


def test_the_job_page_does_not_warn_about_timeouts_once_a_processes_pool_worker_runs_it(as_alice, acme, make_job):
    job = make_job(acme, "billing.export", timeout_seconds=120)
    presence.announce("host:7", ["python", "http"], ["default"], pool="threads")
    presence.announce("host:8", ["python", "http"], ["default"], pool="processes")
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert 'data-testid="job-soft-timeouts"' not in page and "Only thread-pool workers" not in page


def test_the_job_edit_page_warns_too(as_alice, acme, make_job):
    job = make_job(acme, "reports.render", target_kind="external", target_ref="", queue="reports")
    page = as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[job.pk])).content.decode()
    assert "No running consumer executes &#x27;external&#x27; jobs on queue &#x27;reports&#x27;" in page


def test_it_flags_dst_changes_in_the_next_occurrences(as_alice, acme, make_job):
    job = make_job(acme, "ny.early", cron_expr="30 2 * * *", time_zone="America/New_York")
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert "America/New_York" in page


def test_it_sends_a_user_without_tenants_a_clear_404(client, django_user_model):
    lonely = django_user_model.objects.create_superuser("root", "root@example.com", "root-pass-123")
    client.force_login(lonely)
    assert client.get(reverse("admin:portal_overview")).status_code == 404  # no tenant exists at all


def test_it_opens_on_all_tenants_worst_first_for_someone_who_sees_several(
    as_carol, acme, globex, make_job, make_run, make_dead, wall_clock
):
    Tenant.objects.create(name="initech")  # quiet: left out
    make_run(make_job(acme, "a.job"), due_at=wall_clock.ago(minutes=2))
    make_run(make_job(globex, "g.job"), due_at=wall_clock.ago(minutes=40))  # waiting longest
    make_dead(make_job(acme, "a.dead"), wall_clock.ago(hours=1))

    response = as_carol.get(reverse("admin:portal_overview"))
    assert response.status_code == 302 and response["Location"] == reverse("admin:portal_tenants")

    page = as_carol.get(reverse("admin:portal_tenants")).content.decode()
    table = page.split('data-testid="tenants"')[1]
    assert table.index(">globex<") < table.index(">acme<")
    assert ">initech<" not in table
    assert "2 of 3 tenants" in page


def test_it_shows_one_member_only_their_own_tenants_at_a_glance(as_alice, acme, globex, make_job, make_run, wall_clock):
    make_run(make_job(globex, "g.job"), due_at=wall_clock.ago(minutes=40))
    make_run(make_job(acme, "a.job"), due_at=wall_clock.ago(minutes=2))

    assert as_alice.get(reverse("admin:portal_overview")).status_code == 200  # one tenant: its own overview
    page = as_alice.get(reverse("admin:portal_tenants")).content.decode()
    assert ">acme<" in page and "globex" not in page


def test_it_shows_ready_as_a_part_of_the_waiting_runs_not_one_more_state(as_alice, busy_acme):
    page = as_alice.get(reverse("admin:portal_overview")).content.decode()
    assert (
        '<tr class="portal-subset"><th scope="row">of which <span class="dt-state dt-state-ready">ready</span>' in page
    )
    assert "already counted in scheduled and retry_wait" in page


def test_the_overview_says_plainly_that_no_scheduler_materialised_and_which_canaries_missed(as_alice, acme, wall_clock):
    from runs import canary

    canary.ensure(now=wall_clock.now - dt.timedelta(minutes=5))  # five minutes, nothing run since

    page = as_alice.get(reverse("admin:portal_overview")).content.decode()

    assert "No scheduler has materialised yet: start run_scheduler." in page
    assert "Canaries on 64 shards missed twice (shards 0-63)." in page


def test_the_all_tenants_page_leaves_the_system_tenant_out_and_says_when_no_scheduler_runs(
    as_carol, acme, make_job, make_run, wall_clock
):
    from jobs.models import JobDefinition
    from runs import canary

    canary.ensure(now=wall_clock.now - dt.timedelta(minutes=5))
    make_run(JobDefinition.objects.get(name="canary.shard-12"), due_at=wall_clock.now - dt.timedelta(minutes=1))
    make_run(make_job(acme, "billing.close"), due_at=wall_clock.now - dt.timedelta(minutes=1))

    page = as_carol.get(reverse("admin:portal_tenants")).content.decode()

    assert "acme" in page and "duetime-system" not in page  # both have a ready run; one is the engine's
    assert "No scheduler has materialised yet" in page


def test_the_job_page_lists_an_every_jobs_next_periods_and_says_when_its_count_is_spent(as_alice, acme, make_job):
    from jobs.models import JobDefinition

    start = dt.datetime(2099, 1, 1, 9, 0, tzinfo=dt.UTC)
    job = make_job(acme, "pulse", schedule_kind="every", every_seconds=90, start_at=start, remaining_runs=2)
    JobDefinition.objects.filter(pk=job.pk).update(next_due_at=start)
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert "2099-01-01 09:00:00" in page and "2099-01-01 09:01:30" in page
    assert "2099-01-01 09:03:00" not in page  # two runs left: two shown
    JobDefinition.objects.filter(pk=job.pk).update(next_due_at=None, remaining_runs=0)
    page = as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    assert "ended: it ran its remaining_runs" in page
