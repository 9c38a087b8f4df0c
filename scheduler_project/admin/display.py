"""How the portal writes states, instants, schedules and durations, the same on every page.

A state is always a symbol plus its name (never colour alone); an instant of a
job is shown in the job's zone and in UTC; a duration in the largest unit that
keeps it short.
"""

import datetime as dt

from django.utils.html import format_html

from jobs import cron, occurrences
from jobs.models import JobDefinition

# Glyphs the default fonts of a plain Linux desktop (DejaVu) have: emoji and newer symbols
# render as empty boxes there (tests/scheduler_project/admin/test_display.py checks).
STATE_SYMBOLS = {
    "active": "▶",
    "paused": "‖",
    "cancelled": "✕",
    "scheduled": "◷",
    "ready": "▷",
    "leased": "⟳",
    "retry_wait": "↻",
    "succeeded": "✓",
    "dead": "☠",
    "skipped": "⤼",
    "failed": "✗",
    "timed_out": "◔",
    "lease_expired": "◔",
    "stale": "⊘",
    "open": "●",
    "replayed": "↺",
    "discarded": "⊗",
}


def status_text(value, symbols=STATE_SYMBOLS):
    """A state as a symbol plus its name, so it never depends on colour alone."""
    return format_html(
        '<span class="dt-state dt-state-{}"><span aria-hidden="true">{} </span>{}</span>',
        value,
        symbols.get(value, "•"),
        value,
    )


def derived_state(run, now):
    """The state as the portal shows it: `ready` for a claimable run whose available_at has passed."""
    return "ready" if run.is_ready(now) else run.state


def schedule_words(job):
    """The schedule in plain words, bounds and count included, e.g. "at 02:00 every day, Europe/Berlin"."""
    try:
        words = occurrences.describe(occurrences.Schedule.of(job))
    except (cron.CronError, cron.ZoneError) as exc:
        return f"invalid schedule: {exc}"
    if job.schedule_kind == JobDefinition.ScheduleKind.NONE:
        return words
    if job.remaining_runs is not None:
        words += f"; {job.remaining_runs} more run{'s' * (job.remaining_runs != 1)}"
    ended = occurrences.ended(job) if job.pk is not None else None  # an unsaved job has no next_due_at yet
    if ended:
        words += f" (ended: {ENDED[ended]})"
    return words


# occurrences.ended's reasons, in words.
ENDED = {
    "remaining_runs": "it ran its remaining_runs",
    "end_at": "its end_at has passed",
    "at": "its one run is scheduled",
    "no_occurrence": "its schedule has no further occurrence",
}


def zoned(instant, zone_name):
    """An instant in a job's zone and in UTC: "2026-06-01 11:00 CEST (09:00 UTC)"."""
    if instant is None:
        return "—"
    local = instant.astimezone(cron.get_zone(zone_name))
    utc = instant.astimezone(dt.UTC)
    if zone_name.removeprefix("Etc/") in ("UTC", "UCT", "Universal", "Zulu"):
        return f"{utc:%Y-%m-%d %H:%M} UTC"  # a UTC job: once, not "09:00 UTC (09:00 UTC)"
    same_day = local.date() == utc.date()
    return (
        f"{local:%Y-%m-%d %H:%M %Z} ({utc:%H:%M} UTC)"
        if same_day
        else f"{local:%Y-%m-%d %H:%M %Z} ({utc:%Y-%m-%d %H:%M} UTC)"
    )


def utc_seconds(instant):
    """A list cell's instant: to the second, in UTC and saying so; a narrow column wraps between date and time."""
    if instant is None:
        return "—"
    utc = instant.astimezone(dt.UTC)
    return format_html(
        '<span class="portal-time">{}</span> <span class="portal-time">{} UTC</span>',
        f"{utc:%Y-%m-%d}",
        f"{utc:%H:%M:%S}",
    )


def format_ms(ms):
    """A duration in milliseconds as "850 ms", "4.2 s", "3.5 min" or "2.0 h"; None as "—"."""
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"
