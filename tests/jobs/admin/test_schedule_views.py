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
