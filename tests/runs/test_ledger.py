"""The ledger of acme's hourly `reports.hourly`: every occurrence of the last hours and its fate.

Times in UTC; the clock is pinned at NOW (09:00), the window is 04:00 to 11:00.
"""

import datetime as dt

import pytest

from jobs.models import AuditEntry, JobDefinition
from runs import ledger, metrics
from runs.models import Run
from tests.conftest import NOW

H = dt.timedelta(hours=1)


def missing_counted(tenant="acme"):
    return metrics.LEDGER_MISSING.labels(tenant)._value.get()


@pytest.fixture
def hourly(acme, make_job):
    job = make_job(acme, "reports.hourly", cron_expr="0 * * * *", time_zone="Europe/Berlin")
    JobDefinition.objects.filter(pk=job.pk).update(created_at=NOW - 10 * H, next_due_at=NOW + H)
    job.refresh_from_db()
    return job


@pytest.fixture
def history(hourly, make_run, make_attempt):
    """04:00 ran late, 05:00 died, 06:00 cancelled by Alice, 07:00 skipped by a window, 08:00 deleted, 09:00 waits."""
    ran = make_run(hourly, "succeeded", due_at=NOW - 5 * H, attempt=2)
    make_attempt(ran, 1, late=dt.timedelta(seconds=3), outcome="failed")
    make_attempt(ran, 2, late=dt.timedelta(seconds=40))
    make_run(hourly, "dead", due_at=NOW - 4 * H, attempt=5, last_error="ValueError: no rows")
    cancelled = make_run(hourly, "cancelled", due_at=NOW - 3 * H, reason="customer asked")
    AuditEntry.objects.create(
        tenant=hourly.tenant, actor="user:alice", action="cancel", object_type="runs.run", object_id=str(cancelled.pk)
    )
    make_run(hourly, "skipped", due_at=NOW - 2 * H, reason="window 'db upgrade' (skip)")
    deleted = make_run(hourly, "succeeded", due_at=NOW - H)
    Run.objects.filter(pk=deleted.pk).delete()  # behind Duetime's back
    make_run(hourly, "scheduled", due_at=NOW)
    return hourly


def fates(page):
    return [(e.at, e.fate) for e in page.entries]


def test_it_gives_every_occurrence_its_fate_and_finds_the_one_deleted_behind_its_back(history):
    before = missing_counted()
    page = ledger.ledger(history, NOW - 5 * H, NOW + 2 * H, NOW)
    assert fates(page) == [
        (NOW - 5 * H, "ran"),
        (NOW - 4 * H, "dead"),
        (NOW - 3 * H, "cancelled"),
        (NOW - 2 * H, "skipped"),
        (NOW - H, "missing"),
        (NOW, "waiting"),
        (NOW + H, "not_yet_due"),
    ]
    ran, dead, cancelled, skipped, missing = page.entries[:5]
    assert (ran.attempts, ran.lateness, ran.detail) == (2, dt.timedelta(seconds=3), "succeeded after 2 attempts")
    assert dead.detail == "ValueError: no rows"
    assert cancelled.cancelled_by == "user:alice" and cancelled.detail == "customer asked"
    assert skipped.detail == "window 'db upgrade' (skip)"
    assert missing.local.isoformat() == "2026-06-01T10:00:00+02:00"
    assert page.missing == 1 and missing_counted() == before + 1


def test_a_summary_row_stands_for_every_occurrence_it_covers(hourly, make_run):
    make_run(hourly, "skipped", due_at=NOW - 3 * H, covers_until=NOW - H, reason="passed over while the job was paused")
    page = ledger.ledger(hourly, NOW - 3 * H, NOW, NOW)
    assert [e.fate for e in page.entries] == ["paused", "paused", "paused"]
    assert page.missing == 0


def test_it_pages_a_long_window_and_says_where_the_next_page_starts(history):
    page = ledger.ledger(history, NOW - 5 * H, NOW + 2 * H, NOW, limit=3)
    assert [e.at for e in page.entries] == [NOW - 5 * H, NOW - 4 * H, NOW - 3 * H]
    assert page.next_start == NOW - 3 * H + dt.timedelta(microseconds=1)
    rest = ledger.ledger(history, page.next_start, NOW + 2 * H, NOW, limit=3)
    assert [e.at for e in rest.entries][0] == NOW - 2 * H


def test_runs_of_an_earlier_schedule_are_listed_and_the_gap_before_the_edit_is_not_missing(hourly, make_run):
    make_run(hourly, "succeeded", due_at=NOW - 4 * H + dt.timedelta(minutes=30))  # a :30 schedule, before an edit
    AuditEntry.objects.filter().delete()
    entry = AuditEntry.objects.create(
        tenant=hourly.tenant,
        actor="user:alice",
        action="update",
        object_type="jobs.jobdefinition",
        object_id=str(hourly.pk),
    )
    AuditEntry.objects.filter(pk=entry.pk).update(at=NOW - 2 * H - dt.timedelta(minutes=15))
    make_run(hourly, "succeeded", due_at=NOW - H)
    page = ledger.ledger(hourly, NOW - 4 * H, NOW, NOW)
    assert fates(page) == [
        (NOW - 4 * H, "before_schedule"),
        (NOW - 4 * H + dt.timedelta(minutes=30), "earlier_schedule"),
        (NOW - 3 * H, "before_schedule"),
        (NOW - 2 * H, "missing"),  # after the edit: the current schedule held
        (NOW - H, "ran"),
    ]
    assert any("earlier schedule" in a for a in page.assumptions)


def test_occurrences_of_a_paused_job_after_its_pause_wait_for_the_resume(hourly):
    JobDefinition.objects.filter(pk=hourly.pk).update(status="paused", next_due_at=NOW - 2 * H)
    hourly.refresh_from_db()
    page = ledger.ledger(hourly, NOW - 2 * H, NOW + H, NOW)
    assert [e.fate for e in page.entries] == ["paused", "paused", "paused"]


def test_it_refuses_a_window_backwards_or_a_page_too_long(hourly):
    with pytest.raises(ValueError):
        ledger.ledger(hourly, NOW, NOW - H, NOW)
    with pytest.raises(ValueError):
        ledger.ledger(hourly, NOW - H, NOW, NOW, limit=ledger.MAX_LIMIT + 1)


def test_an_occurrence_older_than_the_history_kept_is_expired_not_missing(hourly, settings):
    """Retention drops whole days of runs: what is gone past DUETIME_RETENTION_DAYS is not a bug."""
    settings.DUETIME_RETENTION_DAYS = 30
    JobDefinition.objects.filter(pk=hourly.pk).update(created_at=NOW - dt.timedelta(days=40))
    hourly.refresh_from_db()
    before = missing_counted()

    old = ledger.ledger(hourly, NOW - dt.timedelta(days=35), NOW - dt.timedelta(days=35) + 3 * H, NOW)
    recent = ledger.ledger(hourly, NOW - dt.timedelta(days=29), NOW - dt.timedelta(days=29) + 3 * H, NOW)

    assert {e.fate for e in old.entries} == {"expired"}
    assert {e.fate for e in recent.entries} == {"missing"}
    assert missing_counted() == before + len(recent.entries)


# --------------------------------------------------------------- every, bounds, remaining_runs

BERLIN_SPRING = dt.datetime(2026, 3, 28, 22, 0, tzinfo=dt.UTC)  # 23:00 CET; clocks jump 02:00 -> 03:00 at 01:00 UTC


def test_an_every_jobs_ledger_keeps_its_90_minute_spacing_across_the_dst_change(acme, make_job, make_run):
    """Europe/Berlin springs forward on 29 March 2026 at 02:00 CET: the runs stay 90 minutes apart."""
    job = make_job(
        acme, "pulse", schedule_kind="every", every_seconds=5400, start_at=BERLIN_SPRING, time_zone="Europe/Berlin"
    )
    later = BERLIN_SPRING + 4 * 90 * dt.timedelta(minutes=1)
    JobDefinition.objects.filter(pk=job.pk).update(created_at=BERLIN_SPRING - H, next_due_at=later)
    job.refresh_from_db()
    times = [BERLIN_SPRING + k * dt.timedelta(minutes=90) for k in range(4)]
    for at in times[:2] + times[3:]:  # the third, 03:00 CEST, has no record
        make_run(job, "succeeded", due_at=at)
    page = ledger.ledger(job, BERLIN_SPRING, later, later)
    assert [f"{e.local:%H:%M %Z}" for e in page.entries] == ["23:00 CET", "00:30 CET", "03:00 CEST", "04:30 CEST"]
    assert [e.fate for e in page.entries] == ["ran", "ran", "missing", "ran"]
    assert {b.at - a.at for a, b in zip(page.entries, page.entries[1:])} == {dt.timedelta(minutes=90)}


def test_the_occurrences_after_a_spent_count_have_ended_not_gone_missing(acme, make_job, make_run):
    job = make_job(acme, "thrice", schedule_kind="every", every_seconds=3600, start_at=NOW - 6 * H)
    JobDefinition.objects.filter(pk=job.pk).update(created_at=NOW - 7 * H, next_due_at=None, remaining_runs=0)
    job.refresh_from_db()
    for k in (6, 5, 4):
        make_run(job, "succeeded", due_at=NOW - k * H)
    page = ledger.ledger(job, NOW - 6 * H, NOW + H, NOW)
    assert fates(page) == [
        (NOW - 6 * H, "ran"),
        (NOW - 5 * H, "ran"),
        (NOW - 4 * H, "ran"),
        (NOW - 3 * H, "ended"),
        (NOW - 2 * H, "ended"),
        (NOW - H, "ended"),
        (NOW, "ended"),
    ]
    assert page.missing == 0


def test_a_ledger_lists_only_the_occurrences_inside_the_bounds(acme, make_job, make_run):
    job = make_job(acme, "bounded", cron_expr="0 * * * *", start_at=NOW - 3 * H, end_at=NOW - H)
    JobDefinition.objects.filter(pk=job.pk).update(created_at=NOW - 10 * H, next_due_at=None)
    job.refresh_from_db()
    make_run(job, "succeeded", due_at=NOW - 3 * H)
    make_run(job, "succeeded", due_at=NOW - 2 * H)
    page = ledger.ledger(job, NOW - 6 * H, NOW + 2 * H, NOW)
    assert fates(page) == [(NOW - 3 * H, "ran"), (NOW - 2 * H, "ran")]
    assert "(start_at, end_at) included" in page.assumptions[0]
