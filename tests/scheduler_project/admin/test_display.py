"""How the portal writes states, instants, schedules and durations."""

import datetime as dt
import shutil
import subprocess

import pytest

from jobs.models import JobDefinition
from runs.models import Run
from scheduler_project.admin.display import STATE_SYMBOLS, derived_state, format_ms, schedule_words, status_text, zoned

UTC = dt.UTC


def test_it_writes_a_state_as_a_symbol_and_its_name_never_as_colour_alone():
    text = str(status_text("dead"))
    assert 'class="dt-state dt-state-dead"' in text
    assert '<span aria-hidden="true">☠ </span>dead' in text
    assert "revoked" in str(status_text("revoked", {"revoked": "✕"}))


@pytest.mark.skipif(not shutil.which("fc-list"), reason="fontconfig (fc-list) is not installed")
def test_every_state_symbol_has_a_glyph_in_the_default_linux_fonts():
    # An emoji (the old discard symbol) rendered as an empty box in Debian's Chromium.
    def in_dejavu(symbol):
        listed = subprocess.run(["fc-list", f":charset={ord(symbol):x}", "family"], capture_output=True, text=True)
        return "DejaVu" in listed.stdout

    assert [s for s in STATE_SYMBOLS.values() if not in_dejavu(s)] == []


def test_it_shows_a_claimable_run_whose_time_has_come_as_ready(clock):
    assert derived_state(Run(state="scheduled", available_at=clock.ago(seconds=1)), clock.now) == "ready"
    assert derived_state(Run(state="retry_wait", available_at=clock.now), clock.now) == "ready"
    assert derived_state(Run(state="scheduled", available_at=clock.ahead(seconds=1)), clock.now) == "scheduled"
    assert derived_state(Run(state="leased", available_at=clock.ago(minutes=1)), clock.now) == "leased"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"schedule_kind": "cron", "cron_expr": "0 2 * * *"}, "at 02:00 every day, Europe/Berlin"),
        (
            {"schedule_kind": "at", "run_at": dt.datetime(2026, 6, 1, 9, 0, tzinfo=UTC)},
            "once at 2026-06-01 11:00 CEST, Europe/Berlin",
        ),
        ({"schedule_kind": "none"}, "on demand only"),
    ],
)
def test_it_says_a_schedule_in_words_in_the_jobs_zone(fields, words):
    assert schedule_words(JobDefinition(time_zone="Europe/Berlin", **fields)) == words


def test_it_says_what_is_wrong_with_a_schedule_it_cannot_read():
    job = JobDefinition(schedule_kind="cron", cron_expr="61 * * * *", time_zone="Europe/Berlin")
    assert schedule_words(job).startswith("invalid schedule: ")


def test_it_shows_an_instant_in_the_jobs_zone_and_in_utc():
    assert zoned(dt.datetime(2026, 6, 1, 9, 0, tzinfo=UTC), "Europe/Berlin") == "2026-06-01 11:00 CEST (09:00 UTC)"
    # Another day in UTC: the UTC side says which.
    assert (
        zoned(dt.datetime(2026, 6, 1, 23, 30, tzinfo=UTC), "Asia/Tokyo")
        == "2026-06-02 08:30 JST (2026-06-01 23:30 UTC)"
    )
    assert zoned(None, "Europe/Berlin") == "—"


def test_it_shows_a_utc_job_once_in_utc():
    assert zoned(dt.datetime(2026, 6, 1, 9, 0, tzinfo=UTC), "UTC") == "2026-06-01 09:00 UTC"
    assert zoned(dt.datetime(2026, 1, 5, 9, 0, tzinfo=UTC), "Europe/London") == "2026-01-05 09:00 GMT (09:00 UTC)"


@pytest.mark.parametrize(
    ("ms", "text"),
    [(None, "—"), (850, "850 ms"), (4_200, "4.2 s"), (210_000, "3.5 min"), (7_200_000, "2.0 h")],
)
def test_it_writes_a_duration_in_the_unit_that_keeps_it_short(ms, text):
    assert format_ms(ms) == text


def test_it_says_an_every_schedule_its_bounds_and_count_in_words(acme, make_job):
    start = dt.datetime(2026, 3, 28, 22, 0, tzinfo=UTC)
    job = make_job(acme, "pulse", schedule_kind="every", every_seconds=5400, start_at=start, time_zone="Europe/Berlin")
    job.remaining_runs, job.next_due_at = 3, start
    assert schedule_words(job) == "every 90 minutes from 2026-03-28 23:00 CET, Europe/Berlin; 3 more runs"
    job.remaining_runs, job.next_due_at = 0, None
    assert schedule_words(job).endswith("; 0 more runs (ended: it ran its remaining_runs)")
