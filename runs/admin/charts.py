"""Inline SVG charts for the dashboards: no JavaScript library, no CDN.

Each series is told apart by its line pattern and marker shape as well as its
colour (status is never shown by colour alone), each chart carries a <title>
and <desc> for screen readers, and the pages print the same numbers in a table.
"""

from django.utils.html import escape
from django.utils.safestring import mark_safe

WIDTH, HEIGHT = 720, 240
CLIP_RATIO = 5  # a point this many times above the typical one gets a clipped axis rather than the whole scale
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 36
SERIES_STYLE = {
    "p50": {"color": "#2b6cb0", "dash": "", "marker": "circle"},
    "p95": {"color": "#b7791f", "dash": "8 4", "marker": "square"},
    "p99": {"color": "#c53030", "dash": "2 3", "marker": "triangle"},
}


def _marker(kind, x, y, color):
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>'
    if kind == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{color}"/>'
    return f'<path d="M{x:.1f},{y - 4:.1f} L{x + 4:.1f},{y + 3:.1f} L{x - 4:.1f},{y + 3:.1f} Z" fill="{color}"/>'


def _ticks(top):
    """About five round y-axis ticks up to `top` (ms)."""
    if top <= 0:
        return [0]
    raw = top / 4
    magnitude = 10 ** (len(str(int(raw))) - 1)
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(top // step) + 2)]


def axis_top(values):
    """How high the y axis reaches: the largest value, unless a few are far above the rest.

    Then the axis stops a little above the rest (the 90th percentile of the
    values) so one run hours late does not flatten every other point to the
    floor; the points above it are drawn on the top edge and labelled with
    their value. Returns (top, clipped).
    """
    if not values:
        return 0, False
    ordered = sorted(values)
    typical = max(ordered[int(0.9 * (len(ordered) - 1))], 1)
    if len(ordered) >= 4 and ordered[-1] > CLIP_RATIO * typical:
        return typical * 1.25, True
    return ordered[-1], False


def line_chart(points, *, title, description, format_value, label_time, series=("p50", "p95", "p99"), chart_id="chart"):
    """An SVG line chart of `points` ([{"at", "p50", ...}]); gaps (None) break the line."""
    values = [p[s] for p in points for s in series if p.get(s) is not None]
    top, clipped = axis_top(values)
    ticks = _ticks(top)
    if clipped:
        ticks = [tick for tick in ticks if tick <= top * 1.3] or ticks[:2]
    scale_top = ticks[-1] or 1
    if clipped:
        description += (
            f" The axis stops at {format_value(scale_top)}: points above it are drawn on the top edge, labelled."
        )
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = max(1, len(points) - 1)

    def xy(i, v):
        return LEFT + plot_w * i / n, TOP + plot_h * (1 - v / scale_top)

    parts = [
        f'<svg class="portal-chart" id="{chart_id}" role="img" aria-labelledby="{chart_id}-title {chart_id}-desc" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{chart_id}-title">{escape(title)}</title><desc id="{chart_id}-desc">{escape(description)}</desc>',
    ]
    for tick in ticks:
        _, y = xy(0, tick)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="currentColor">{escape(format_value(tick))}</text>'
        )
    label_every = max(1, len(points) // 6)
    for i, point in enumerate(points):
        if i % label_every == 0:
            x, _ = xy(i, 0)
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - 12}" text-anchor="middle" font-size="11" fill="currentColor">{escape(label_time(point["at"]))}</text>'
            )
    for name in series:
        style = SERIES_STYLE[name]
        path, pen_up = [], True
        for i, point in enumerate(points):
            value = point.get(name)
            if value is None:
                pen_up = True
                continue
            x, y = xy(i, min(value, scale_top))
            if value > scale_top:
                parts.append(
                    f'<text class="off-scale" x="{x:.1f}" y="{y + 14:.1f}" text-anchor="middle" font-size="11" '
                    f'fill="{style["color"]}">&#8593; {escape(format_value(value))}</text>'
                )
            path.append(f"{'M' if pen_up else 'L'}{x:.1f},{y:.1f}")
            pen_up = False
            if len(points) <= 100 or i % 4 == 0:
                parts.append(_marker(style["marker"], x, y, style["color"]))
        if path:
            dash = f' stroke-dasharray="{style["dash"]}"' if style["dash"] else ""
            parts.append(
                f'<path class="series series-{name}" d="{" ".join(path)}" fill="none" stroke="{style["color"]}" stroke-width="2"{dash}/>'
            )
    parts.append(_legend(series))
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _legend(series):
    items, x = [], LEFT
    for name in series:
        style = SERIES_STYLE[name]
        dash = f' stroke-dasharray="{style["dash"]}"' if style["dash"] else ""
        items.append(
            f'<line x1="{x}" x2="{x + 24}" y1="{TOP}" y2="{TOP}" stroke="{style["color"]}" stroke-width="2"{dash}/>'
            f"{_marker(style['marker'], x + 12, TOP, style['color'])}"
            f'<text x="{x + 30}" y="{TOP + 4}" font-size="12" fill="currentColor">{name}</text>'
        )
        x += 80
    return "".join(items)


def bar_chart(points, *, title, description, label_time, chart_id="bars"):
    """Vertical bars of `points` ([{"at", "count"}]), each labelled with its count when non-zero."""
    top = max([p["count"] for p in points] + [1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    width = plot_w / max(1, len(points))
    parts = [
        f'<svg class="portal-chart" id="{chart_id}" role="img" aria-labelledby="{chart_id}-title {chart_id}-desc" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{chart_id}-title">{escape(title)}</title><desc id="{chart_id}-desc">{escape(description)}</desc>',
    ]
    for i, point in enumerate(points):
        h = plot_h * point["count"] / top
        x = LEFT + i * width
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{TOP + plot_h - h:.1f}" width="{max(1, width - 2):.1f}" height="{h:.1f}" fill="#6b46c1"/>'
        )
        if point["count"]:
            parts.append(
                f'<text x="{x + width / 2:.1f}" y="{TOP + plot_h - h - 3:.1f}" text-anchor="middle" font-size="10" fill="currentColor">{point["count"]}</text>'
            )
        if i % 4 == 0:
            parts.append(
                f'<text x="{x + width / 2:.1f}" y="{HEIGHT - 12}" text-anchor="middle" font-size="11" fill="currentColor">{escape(label_time(point["at"]))}</text>'
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))
