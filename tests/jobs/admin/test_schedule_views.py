"""The schedule preview as the operator types, and the heatmap's herd advice."""

import datetime as dt

import pytest
from django.urls import reverse

from jobs.admin.schedule_views import preview_data
from jobs.heatmap import advice, heatmap

PREVIEW = reverse("admin:portal_schedule_preview")


def test_it_previews_the_next_runs_in_the_zone_and_in_utc(as_alice):
    data = as_alice.get(PREVIEW, {"cron_expr": "0 2 * * *", "time_zone": "Europe/Berlin", "count": 3}).json()
    assert data["ok"] and data["description"] == "at 02:00 every day, Europe/Berlin"
    assert len(data["occurrences"]) == 3
    first = data["occurrences"][0]
    assert first["local_text"].endswith(("CET", "CEST")) and first["utc_text"].endswith("UTC")


def test_it_flags_a_run_moved_by_the_spring_gap():
    after = dt.datetime(2026, 3, 7, 12, 0, tzinfo=dt.UTC)
    data = preview_data("30 2 * * *", "America/New_York", after, 2)
    moved = data["occurrences"][0]
    assert moved["local_text"].startswith("Sun 2026-03-08 03:00")
    assert "does not exist" in moved["note"]


def test_it_says_how_to_fix_a_bad_expression_or_zone(as_alice):
    bad_cron = as_alice.get(PREVIEW, {"cron_expr": "0 25 * * *", "time_zone": "UTC"}).json()
    assert not bad_cron["ok"] and bad_cron["field"] == "cron_expr" and "hour" in bad_cron["error"]
    bad_zone = as_alice.get(PREVIEW, {"cron_expr": "0 2 * * *", "time_zone": "Europe/Pariss"}).json()
    assert not bad_zone["ok"] and bad_zone["field"] == "time_zone" and "Europe/Paris" in bad_zone["error"]


def test_it_needs_a_portal_login_for_the_preview(client, db):
    assert client.get(PREVIEW, {"cron_expr": "* * * * *"}).status_code == 302


def test_it_points_out_the_top_of_the_hour_herd_and_the_jitter_that_flattens_it(acme, make_job):
    jobs = [make_job(acme, f"hourly.{i}", cron_expr="0 * * * *") for i in range(30)]
    jobs.append(make_job(acme, "spread.one", cron_expr="17 * * * *"))
    hm = heatmap(jobs, dt.datetime(2026, 6, 1, 9, 30, tzinfo=dt.UTC))
    assert hm.by_minute_of_hour()[0] == 30 * 24 and hm.by_minute_of_hour()[17] == 24
    words = advice(hm)
    assert words["peak_minute"] == 0 and words["herd_jobs"] == 30
    assert "top-of-the-hour herd" in words["text"]
    assert words["suggested_jitter_seconds"] == 1800  # 30 jobs over 30 minutes: one a minute


def test_it_counts_each_jobs_fixed_jitter_offset(acme, make_job):
    job = make_job(acme, "jittered", cron_expr="0 * * * *", jitter_seconds=600)
    hm = heatmap([job], dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC))
    minute = next(m for m, n in enumerate(hm.by_minute_of_hour()) if n)
    assert 0 <= minute < 10 and hm.herd_jobs == {}


def test_it_renders_the_heatmap_page(as_alice, acme, make_job):
    for i in range(5):
        make_job(acme, f"hourly.{i}", cron_expr="0 * * * *")
    page = as_alice.get(reverse("admin:portal_heatmap")).content.decode()
    assert 'data-testid="heatmap"' in page and "busiest minute is :00" in page


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "UTC"])
@pytest.mark.parametrize(
    "day",
    [
        dt.datetime(2026, 3, 8, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 29, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 4, 5, tzinfo=dt.UTC),
    ],
)
def test_it_counts_wildcard_starts_exactly_as_cron_occurrences_does_dst_days_included(zone, day):
    from jobs import cron
    from jobs.heatmap import MINUTES, _starts

    for expr in ("* * * * *", "*/7 1-3 * * *", "0 * * * *", "*/5 * 8 * 1", "30 * * 3 0", "0 2 * * *"):
        end = day + dt.timedelta(minutes=MINUTES)
        expected = [
            int((t - day) / dt.timedelta(minutes=1))
            for t in cron.occurrences(expr, zone, day - dt.timedelta(microseconds=1), MINUTES + 1)
            if t < end
        ]
        assert _starts(expr, zone, day) == expected, expr


def test_the_preview_says_which_runs_a_window_skips_or_holds(as_alice, acme, make_job):
    from calendars.models import Window

    job = make_job(acme, "billing.nightly", cron_expr="0 2 * * *")
    Window.objects.create(
        tenant=acme,
        job=job,
        name="db upgrade",
        kind="recurring",
        cron_expr="0 1 * * *",
        duration_seconds=2 * 3600,
        resume_policy="run_once",
    )
    data = as_alice.get(PREVIEW, {"cron_expr": "0 2 * * *", "time_zone": "UTC", "count": 2, "job": job.pk}).json()
    assert all(o["window"].startswith("held by window 'db upgrade' until") for o in data["occurrences"])
    theirs = as_alice.get(PREVIEW, {"cron_expr": "0 2 * * *", "time_zone": "UTC", "count": 1}).json()
    assert theirs["occurrences"][0]["window"] == ""


def test_the_heatmap_leaves_out_starts_a_tenant_window_skips_and_shades_its_minutes(as_alice, acme, make_job):
    from calendars.models import Window

    make_job(acme, "ping", cron_expr="* * * * *")
    Window.objects.create(
        tenant=acme, name="nightly freeze", kind="recurring", cron_expr="0 * * * *", duration_seconds=600
    )
    page = as_alice.get(reverse("admin:portal_heatmap")).content
    text = page.decode()
    assert 'heat-window" title="nightly freeze"' in text
    assert "nightly freeze" in text.split('data-testid="heatmap-windows"')[1].split("</p>")[0]
    by_minute = as_alice.get(reverse("admin:portal_heatmap")).context["by_minute"]
    assert by_minute[:10] == [0] * 10 and by_minute[10] == 24  # :00 to :09 held by the freeze every hour


def test_it_previews_an_every_schedule_from_its_start_with_the_clock_change_noted(as_alice):
    data = as_alice.get(
        PREVIEW,
        {
            "schedule_kind": "every",
            "every_seconds": "5400",
            "time_zone": "Europe/Berlin",
            "start_at_0": "2030-03-30",  # the portal's boxes are in UTC: 23:00 CET
            "start_at_1": "22:00:00",
            "count": 4,
        },
    ).json()
    assert data["ok"], data
    assert data["description"] == "every 90 minutes from 2030-03-30 23:00 CET, Europe/Berlin"
    shown = [o["local_text"] for o in data["occurrences"]]
    assert shown == [
        "Sat 2030-03-30 23:00:00 CET",
        "Sun 2030-03-31 00:30:00 CET",
        "Sun 2030-03-31 03:00:00 CEST",
        "Sun 2030-03-31 04:30:00 CEST",
    ]
    assert "still 90 minutes after it" in data["occurrences"][2]["note"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"every_seconds": "0"}, "every_seconds"),
        ({"every_seconds": "1.5"}, "every_seconds"),
        (
            {"every_seconds": "60", "start_at_0": "2030-01-02", "start_at_1": "00:00", "end_at_0": "2030-01-01"},
            "end_at",
        ),
        (
            {
                "every_seconds": "60",
                "start_at_0": "2030-01-02",
                "start_at_1": "00:00",
                "end_at_0": "2030-01-01",
                "end_at_1": "00:00",
            },
            "end_at",
        ),
    ],
)
def test_it_says_how_to_fix_a_bad_period_or_bounds(as_alice, query, field):
    data = as_alice.get(PREVIEW, {"schedule_kind": "every", "time_zone": "UTC", **query}).json()
    assert not data["ok"] and data["field"] == field, data


# ------------------------------------------------------------ every kind on the heatmap

DAY_START = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)


def _expected(job, start=DAY_START):
    """The slow truth: every occurrence of the day listed by jobs.occurrences, jitter added, per minute."""
    from jobs import jitter, occurrences

    shift = dt.timedelta(seconds=jitter.stable_jitter(job.tenant.name, job.name, job.jitter_seconds))
    end = start + dt.timedelta(days=1)
    counts = [0] * (24 * 60)
    times = occurrences.after(occurrences.Schedule.of(job), start - shift - dt.timedelta(microseconds=1), 200_000)
    for t in times:
        if start <= t + shift < end:
            counts[int((t + shift - start) / dt.timedelta(minutes=1))] += 1
    return counts


@pytest.mark.parametrize("jitter_seconds", [0, 45, 600])
def test_it_counts_an_every_90s_job_exactly_per_minute_over_the_day(acme, make_job, jitter_seconds):
    job = make_job(acme, "poll", schedule_kind="every", every_seconds=90, jitter_seconds=jitter_seconds)
    hm = heatmap([job], DAY_START + dt.timedelta(minutes=17))
    assert hm.counts == _expected(job)
    assert sum(hm.counts) == 960 and hm.counts[:6] != [0] * 6 and set(hm.counts) == {0, 1}  # 2 of every 3 minutes


def test_it_counts_an_every_second_job_60_a_minute_without_listing_its_86400_starts(acme, make_job, monkeypatch):
    from jobs import occurrences

    jobs = [make_job(acme, f"tick.{i}", schedule_kind="every", every_seconds=1) for i in range(50)]
    monkeypatch.setattr(occurrences, "after", lambda *a: pytest.fail("an every-second job was listed"))
    hm = heatmap(jobs, DAY_START)
    assert hm.counts == [60 * 50] * (24 * 60)
    # 7 s does not divide a minute: 8 or 9 starts a minute, exactly as listing them says.
    odd = make_job(acme, "odd", schedule_kind="every", every_seconds=7, start_at=DAY_START + dt.timedelta(seconds=3))
    assert set(heatmap([odd], DAY_START).counts) == {8, 9}
    monkeypatch.undo()
    assert heatmap([odd], DAY_START).counts == _expected(odd)


def test_it_counts_only_starts_inside_the_bounds_for_cron_and_every(acme, make_job):
    bounds = {"start_at": DAY_START + dt.timedelta(hours=2), "end_at": DAY_START + dt.timedelta(hours=5, minutes=30)}
    hourly = make_job(acme, "hourly", cron_expr="0 * * * *", **bounds)
    hm = heatmap([hourly], DAY_START)
    assert [m for m, n in enumerate(hm.counts) if n] == [120, 180, 240, 300]  # 11:00 to 14:00, not 14:30 or later
    ping = make_job(acme, "ping", schedule_kind="every", every_seconds=600, **bounds)
    hm = heatmap([ping], DAY_START)
    assert (
        [m for m, n in enumerate(hm.counts) if n]
        == list(range(120, 330, 10))
        == [m for m, n in enumerate(_expected(ping)) if n]
    )
    fast = make_job(acme, "fast", schedule_kind="every", every_seconds=20, **bounds)
    assert sum(heatmap([fast], DAY_START).counts) == 3.5 * 3600 / 20 == sum(_expected(fast))


def test_it_counts_an_at_job_once_inside_the_day_and_its_bounds(acme, make_job):
    once = make_job(acme, "once", schedule_kind="at", run_at=DAY_START + dt.timedelta(hours=3, minutes=7, seconds=30))
    hm = heatmap([once], DAY_START + dt.timedelta(minutes=5))
    assert sum(hm.counts) == 1 and hm.counts[187] == 1
    tomorrow = make_job(acme, "later", schedule_kind="at", run_at=DAY_START + dt.timedelta(days=1, minutes=1))
    assert sum(heatmap([tomorrow], DAY_START).counts) == 0
    jittered = make_job(acme, "late", schedule_kind="at", run_at=DAY_START + dt.timedelta(hours=2), jitter_seconds=600)
    assert sum(heatmap([jittered], DAY_START).counts[120:130]) == 1


def test_an_ended_job_counts_nothing(acme, make_job):
    spent = make_job(acme, "spent", schedule_kind="every", every_seconds=60, remaining_runs=0)
    spent_cron = make_job(acme, "spent.cron", cron_expr="* * * * *", remaining_runs=0)
    over = make_job(acme, "over", schedule_kind="every", every_seconds=60, end_at=DAY_START - dt.timedelta(hours=1))
    past = make_job(acme, "past", schedule_kind="at", run_at=DAY_START - dt.timedelta(minutes=1))
    hm = heatmap([spent, spent_cron, over, past], DAY_START)
    assert sum(hm.counts) == 0 and advice(hm)["peak_minute"] is None
    left = make_job(acme, "left", schedule_kind="every", every_seconds=60, remaining_runs=3)
    assert sum(heatmap([left], DAY_START).counts) > 0  # not ended yet


def test_every_jobs_herd_only_when_their_starts_fall_on_one_minute_of_the_hour(acme, make_job):
    spread = [make_job(acme, f"poll.{i}", schedule_kind="every", every_seconds=60) for i in range(10)]
    hm = heatmap(spread, DAY_START)
    assert hm.herd_jobs == {} and advice(hm)["suggested_jitter_seconds"] == 0
    hourly = [make_job(acme, f"sync.{i}", schedule_kind="every", every_seconds=3600) for i in range(30)]
    words = advice(heatmap(hourly + spread, DAY_START))
    assert words["peak_minute"] == 0 and words["herd_jobs"] == 30 and words["suggested_jitter_seconds"] > 0


def test_the_heatmap_page_counts_every_jobs(as_alice, acme, make_job):
    make_job(acme, "poll", schedule_kind="every", every_seconds=60)
    make_job(acme, "tick", schedule_kind="every", every_seconds=1)
    make_job(acme, "never", schedule_kind="none")
    response = as_alice.get(reverse("admin:portal_heatmap"))
    assert response.context["job_count"] == 2
    assert response.context["by_minute"] == [24 * 61] * 60
    assert "2 active scheduled job(s)" in response.content.decode()


def test_the_heatmap_holds_an_every_jobs_starts_in_a_tenant_window(as_alice, acme, make_job):
    from calendars.models import Window

    make_job(acme, "poll", schedule_kind="every", every_seconds=30)
    Window.objects.create(
        tenant=acme, name="nightly freeze", kind="recurring", cron_expr="0 * * * *", duration_seconds=600
    )
    by_minute = as_alice.get(reverse("admin:portal_heatmap")).context["by_minute"]
    assert by_minute[:10] == [0] * 10 and by_minute[11:] == [24 * 2] * 49  # skipped: the default policy
    assert by_minute[10] == 24 * 2
