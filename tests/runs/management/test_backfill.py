"""`manage.py backfill`: the same service as the portal's action, with a progress bar."""

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command

from jobs.models import AuditEntry, Tenant
from runs.models import Run


def test_it_backfills_a_window_with_a_progress_bar(acme, make_job, clock):
    job = make_job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="Europe/Berlin")
    end = clock.ago(hours=1)
    out = io.StringIO()
    call_command(
        "backfill",
        "billing.nightly",
        tenant="acme",
        start=(end - dt.timedelta(days=5)).isoformat(),
        end=end.isoformat(),
        max_runs=3,
        note="outage 2026-05",
        stdout=out,
    )
    text = out.getvalue()
    assert "[" in text and "3/3 runs" in text
    assert "Created 3 run(s) of acme/billing.nightly (capped at 3" in text
    assert Run.objects.filter(job=job, origin="backfill").count() == 3
    assert AuditEntry.objects.get(action="backfill").note == "outage 2026-05"


def test_it_says_what_it_would_do_on_a_dry_run(acme, make_job):
    make_job(acme, "billing.nightly", cron_expr="0 2 * * *")
    out = io.StringIO()
    call_command(
        "backfill",
        "billing.nightly",
        "--tenant",
        "acme",
        "--start",
        "2026-01-01",
        "--end",
        "2026-01-11",
        "--dry-run",
        stdout=out,
    )
    assert "Would create 10 run(s)" in out.getvalue()
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope", "--tenant", "acme", "--start", "2026-01-01", "--end", "2026-01-02"], "no job 'nope'"),
        (["billing.nightly", "--tenant", "acme", "--start", "yesterday", "--end", "2026-01-02"], "not a date and time"),
        (
            ["billing.nightly", "--tenant", "acme", "--start", "2026-01-02", "--end", "2026-01-01"],
            "must be after start",
        ),
    ],
)
def test_it_explains_bad_input(acme, make_job, args, message):
    make_job(acme, "billing.nightly", cron_expr="0 2 * * *")
    with pytest.raises(CommandError, match=message):
        call_command("backfill", *args)


def test_it_creates_no_run_when_the_window_would_pass_the_pending_quota(acme, make_job, clock):
    job = make_job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="Europe/Berlin")
    Tenant.objects.filter(pk=acme.pk).update(max_pending_runs=2)
    end = clock.ago(hours=1)
    with pytest.raises(CommandError, match="capped by quota, no run created: Tenant acme may have 2 runs"):
        call_command(
            "backfill",
            "billing.nightly",
            tenant="acme",
            start=(end - dt.timedelta(days=5)).isoformat(),
            end=end.isoformat(),
            stdout=io.StringIO(),
        )
    assert not Run.objects.filter(job=job).exists()


def test_it_honours_windows_unless_told_to_ignore_them(acme, make_job, clock):
    from calendars.models import Window

    job = make_job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="UTC")
    end = clock.now.replace(hour=0)
    start = end - dt.timedelta(days=4)
    Window.objects.create(tenant=acme, name="migration", starts_at=start, ends_at=start + dt.timedelta(days=2))
    out = io.StringIO()
    arguments = [
        "backfill",
        "billing.nightly",
        "--tenant",
        "acme",
        "--start",
        start.isoformat(),
        "--end",
        end.isoformat(),
    ]
    call_command(*arguments, "--dry-run", stdout=out)
    assert "Left out: window 'migration' (skip): 2 occurrences" in out.getvalue()
    assert "Would create 2 run(s)" in out.getvalue()
    call_command(*arguments, "--ignore-windows", stdout=io.StringIO())
    assert Run.objects.filter(job=job, origin="backfill").count() == 4
