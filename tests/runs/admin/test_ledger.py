"""The portal's ledger page: linked from the job page, missing occurrences in red and in words."""

import datetime as dt

from django.urls import reverse
from django.utils import timezone

from jobs.models import JobDefinition

H = dt.timedelta(hours=1)


def test_it_shows_a_missing_occurrence_in_red_and_is_linked_from_the_job_page(as_alice, acme, make_job, make_run):
    job = make_job(acme, "reports.hourly", cron_expr="0 * * * *")
    top = timezone.now().replace(minute=0, second=0, microsecond=0)
    JobDefinition.objects.filter(pk=job.pk).update(created_at=top - 10 * H, next_due_at=top + H)
    make_run(job, "succeeded", due_at=top - 2 * H)
    url = reverse("admin:portal_job_ledger", args=[job.pk])
    assert url in as_alice.get(reverse("admin:portal_job", args=[job.pk])).content.decode()
    start = (top - 2 * H).strftime("%Y-%m-%d %H:%M")
    end = (top - H + dt.timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M")
    page = as_alice.get(url, {"start": start, "end": end}).content.decode()
    assert 'class="ledger-missing"' in page and "✗ 1 missing" in page
    assert "dt-state-ran" in page


def test_a_bad_date_says_how_to_write_it(as_alice, acme, make_job):
    job = make_job(acme, "reports.hourly", cron_expr="0 * * * *")
    page = as_alice.get(reverse("admin:portal_job_ledger", args=[job.pk]), {"start": "yesterday"})
    assert "is not a date and time" in page.content.decode()


def test_bob_cannot_open_acmes_ledger(as_bob, acme, make_job):
    job = make_job(acme, "reports.hourly", cron_expr="0 * * * *")
    assert as_bob.get(reverse("admin:portal_job_ledger", args=[job.pk])).status_code == 404
