"""The dashboards' SVG charts stay readable when one point is far off the rest."""

import datetime as dt
import re

from runs.admin.charts import axis_top, line_chart

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)


def chart(p99_values):
    points = [{"at": T0 + dt.timedelta(minutes=i), "p50": 50, "p95": 80, "p99": v} for i, v in enumerate(p99_values)]
    return str(
        line_chart(
            points,
            title="Lateness",
            description="p50, p95 and p99 per minute.",
            format_value=lambda ms: f"{ms / 1000:g} s",
            label_time=lambda at: at.strftime("%H:%M"),
        )
    )


def axis_labels(svg):
    return [float(v) for v in re.findall(r'text-anchor="end"[^>]*>([0-9.]+) s<', svg)]


def test_it_scales_the_axis_to_the_largest_value_when_none_is_far_off():
    svg = chart([100, 120, 90, 110, 130])

    assert max(axis_labels(svg)) >= 0.13
    assert "off-scale" not in svg


def test_it_clips_the_axis_below_a_far_outlier_and_labels_it():
    three_hours = 3 * 3600 * 1000
    svg = chart([100, 120, 90, 110, 130, three_hours, 105, 95])

    assert max(axis_labels(svg)) < 1  # the axis stays in the range of the ordinary points
    (label,) = re.findall(r'class="off-scale"[^>]*>([^<]+)<', svg)
    assert label == "&#8593; 10800 s"
    assert "drawn on the top edge" in svg


def test_it_keeps_a_few_points_unclipped():
    assert axis_top([1, 1000]) == (1000, False)
    assert axis_top([]) == (0, False)
