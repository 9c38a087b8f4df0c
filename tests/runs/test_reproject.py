"""A zone's rules change under Duetime: its future runs move, audited, and nothing else does.

The test zone is Europe/Berlin as a new tzdata release might have it:
Germany stays on CET (UTC+1) all year from 2026, built with `zic` from a
two-line source. Under the real rules, 1 June 2026 is summer time (CEST,
UTC+2): a daily 09:00 job runs at 07:00 UTC; under the test's, at 08:00 UTC.
"""

import datetime as dt
import os
import shutil
import subprocess
import zoneinfo

import pytest
from django.core.management import call_command

from calendars import zones
from calendars.models import Window, ZoneVersion
from jobs.models import AuditEntry, JobDefinition
from runs import materialize, reproject
from runs.models import Run

UTC = dt.UTC
ZIC = shutil.which("zic") or "/usr/sbin/zic"
NO_SUMMER_TIME = """# Germany keeps CET all year from 2026 (a test release).
Zone Europe/Berlin 0:53:28 - LMT 1893 Apr
                   1:00 - CET
"""
NIGHT = dt.datetime(2026, 6, 2, 6, 59, 30, tzinfo=UTC)  # half a minute before 09:00 CEST on 2 June


@pytest.fixture
def swap_berlin(tmp_path):
    """Call it to make zoneinfo read the test's Europe/Berlin; the real one is back after the test."""
    if not os.path.exists(ZIC):
        pytest.skip("zic is not installed (Debian: libc-bin)")
    original = zoneinfo.TZPATH

    def swap():
        source = tmp_path / "berlin.zi"
        source.write_text(NO_SUMMER_TIME)
        subprocess.run([ZIC, "-d", str(tmp_path / "zoneinfo"), str(source)], check=True)
        (tmp_path / "zoneinfo" / "tzdata.zi").write_text("# version 2026test\n")
        zoneinfo.reset_tzpath(to=[str(tmp_path / "zoneinfo"), *original])
        zoneinfo.ZoneInfo.clear_cache()

    yield swap
    zoneinfo.reset_tzpath(to=list(original))
    zoneinfo.ZoneInfo.clear_cache()
    zones.forget()


@pytest.fixture
def breakfast(acme, make_job):
    """acme's daily 09:00 Berlin job, its run of 2 June materialised (07:00 UTC under the real rules)."""
    job = make_job(acme, "reports.breakfast", cron_expr="0 9 * * *", time_zone="Europe/Berlin")
    JobDefinition.objects.filter(pk=job.pk).update(next_due_at=dt.datetime(2026, 6, 2, 7, 0, tzinfo=UTC))
    materialize.materialize(NIGHT, lookahead=60)
    job.refresh_from_db()
    assert job.next_due_at == dt.datetime(2026, 6, 3, 7, 0, tzinfo=UTC)
    return job


def test_it_moves_the_unclaimed_runs_and_next_due_of_a_changed_zone_and_audits_it(breakfast, swap_berlin):
    assert reproject.reproject(NIGHT).changes == []  # first sight: the zone's rules are recorded
    assert ZoneVersion.objects.get(zone="Europe/Berlin").fingerprint
    swap_berlin()
    result = reproject.reproject(NIGHT)
    [change] = result.changes
    assert (change.zone, change.after, change.jobs, change.cancelled, change.inserted, change.done) == (
        "Europe/Berlin",
        f"2026test ({zoneinfo.TZPATH[0]})",
        1,
        1,
        1,
        True,
    )
    old = Run.objects.get(job=breakfast, due_at=dt.datetime(2026, 6, 2, 7, 0, tzinfo=UTC))
    assert old.state == "cancelled" and "time-zone rules of Europe/Berlin changed" in old.reason
    new = Run.objects.get(job=breakfast, state="scheduled")
    assert new.due_at == dt.datetime(2026, 6, 2, 8, 0, tzinfo=UTC)  # 09:00 CET
    assert new.idempotency_key == "reports.breakfast@2026-06-02T09:00:00+01:00"
    breakfast.refresh_from_db()
    assert breakfast.next_due_at == dt.datetime(2026, 6, 3, 8, 0, tzinfo=UTC)
    entry = AuditEntry.objects.get(action="reproject")
    assert entry.actor == "system:tzdata" and entry.detail["tzdata"]["after"].startswith("2026test")
    assert entry.detail["cancelled"] == ["2026-06-02T07:00:00+00:00"]
    assert entry.detail["inserted"] == ["2026-06-02T08:00:00+00:00"]
    assert entry.detail["next_due_at"]["after"] == "2026-06-03T08:00:00+00:00"
    assert ZoneVersion.objects.get(zone="Europe/Berlin").version.startswith("2026test")
    assert reproject.reproject(NIGHT).changes == []  # done: nothing moves twice


def test_runs_already_claimed_or_finished_stay_as_they_ran(breakfast, swap_berlin, make_run):
    leased = Run.objects.get(job=breakfast, state="scheduled")
    Run.objects.filter(pk=leased.pk).update(
        state="leased", attempt=1, fencing_token=7, lease_expires_at=NIGHT, started_at=NIGHT
    )
    reproject.reproject(NIGHT)
    swap_berlin()
    [change] = reproject.reproject(NIGHT).changes
    assert change.cancelled == 0
    assert Run.objects.get(pk=leased.pk).state == "leased"


def test_a_dry_run_says_what_would_move_and_moves_nothing(breakfast, swap_berlin, capsys):
    reproject.reproject(NIGHT)
    swap_berlin()
    [change] = reproject.reproject(NIGHT, dry_run=True).changes
    assert (change.jobs, change.cancelled, change.inserted) == (1, 1, 1)
    assert Run.objects.get(job=breakfast).state == "scheduled"
    assert not ZoneVersion.objects.get(zone="Europe/Berlin").rolling_out


def test_the_command_reprojects_and_says_so(breakfast, swap_berlin, capsys, monkeypatch):
    monkeypatch.setattr(reproject.timezone, "now", lambda: NIGHT)
    call_command("reproject_timezones")
    swap_berlin()
    call_command("reproject_timezones", "--dry-run")
    assert "would move 1 job(s), 1 run(s) cancelled, 1 inserted" in capsys.readouterr().out
    call_command("reproject_timezones")
    out = capsys.readouterr().out
    assert "Europe/Berlin: tzdata" in out and "moved 1 job(s)" in out
    assert AuditEntry.objects.get(action="reproject").actor.startswith("cli:")


def test_a_re_projected_run_inside_a_window_is_held_like_any_other(breakfast, swap_berlin):
    Window.objects.create(
        tenant=breakfast.tenant,
        job=breakfast,
        name="db upgrade",
        starts_at=dt.datetime(2026, 6, 2, 7, 30, tzinfo=UTC),
        ends_at=dt.datetime(2026, 6, 2, 9, 0, tzinfo=UTC),
        resume_policy="run_once",
    )
    reproject.reproject(NIGHT)
    swap_berlin()
    reproject.reproject(NIGHT)
    new = Run.objects.get(job=breakfast, state="scheduled")
    assert (new.due_at, new.available_at) == (
        dt.datetime(2026, 6, 2, 8, 0, tzinfo=UTC),
        dt.datetime(2026, 6, 2, 9, 0, tzinfo=UTC),
    )


def test_the_scheduler_step_compares_only_now_and_then(breakfast, swap_berlin, settings, monkeypatch):
    monkeypatch.setattr(reproject, "_next_check", 0.0)
    monkeypatch.setattr(reproject, "_rolling", False)
    settings.DUETIME_TZDATA_CHECK_SECONDS = 3600
    assert reproject.tick(NIGHT) == 0  # first sight
    swap_berlin()
    assert reproject.tick(NIGHT) == 0  # not before an hour has passed
    monkeypatch.setattr(reproject, "_next_check", 0.0)
    assert reproject.tick(NIGHT) == 2  # one cancelled, one inserted
