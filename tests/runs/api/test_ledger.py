"""GET /v1/jobs/{name}/ledger: Alice asks why acme's job did not run; Bob's token never sees it."""

import datetime as dt
from urllib.parse import urlencode

import pytest
from django.utils import timezone

from jobs.models import JobDefinition
from runs import metrics
from tests.fixtures.api import assert_problem

H = dt.timedelta(hours=1)


@pytest.fixture
def hourly(api, acme, make_job):
    job = make_job(acme, "reports.hourly", cron_expr="0 * * * *")
    top = timezone.now().replace(minute=0, second=0, microsecond=0)
    JobDefinition.objects.filter(pk=job.pk).update(created_at=top - 10 * H, next_due_at=top + H)
    job.refresh_from_db()
    job.top = top
    return job


def test_it_lists_a_window_with_fates_and_counts_the_missing(api, acme_team, hourly, make_run):
    top = hourly.top
    make_run(hourly, "succeeded", due_at=top - 3 * H)
    make_run(hourly, "skipped", due_at=top - 2 * H, reason="window 'db upgrade' (skip)")
    before = metrics.LEDGER_MISSING.labels("acme")._value.get()
    start, end = (top - 3 * H).isoformat(), (top - H + dt.timedelta(minutes=1)).isoformat()
    query = urlencode({"start": start, "end": end, "limit": 2})
    answer = api.get(f"/v1/jobs/reports.hourly/ledger?{query}", token=acme_team)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [r["fate"] for r in body["results"]] == ["ran", "skipped"]
    assert body["results"][1]["detail"] == "window 'db upgrade' (skip)" and body["next"]
    rest = api.get(body["next"], token=acme_team).json()
    assert [r["fate"] for r in rest["results"]] == ["missing"] and rest["missing"] == 1 and rest["next"] is None
    assert metrics.LEDGER_MISSING.labels("acme")._value.get() >= before + 1  # the live server shares this process


def test_it_refuses_a_backwards_window_and_hides_other_tenants_jobs(api, acme_team, globex_team, hourly):
    now = timezone.now()
    query = urlencode({"start": now.isoformat(), "end": (now - H).isoformat()})
    answer = api.get(f"/v1/jobs/reports.hourly/ledger?{query}", token=acme_team)
    assert_problem(answer, 400, "validation-error")
    naive = api.get("/v1/jobs/reports.hourly/ledger?start=2026-06-01T09:00", token=acme_team)
    assert_problem(naive, 400, "validation-error")
    assert_problem(api.get("/v1/jobs/reports.hourly/ledger", token=globex_team), 404, "not-found")
