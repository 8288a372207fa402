"""Tiny inline-SVG charts (no scripts, no network): line charts with optional log axes, grouped bars."""

from __future__ import annotations

import math
from html import escape

from msgspec import Struct

from ..eventdata import build_types

WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 34, 44
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")


def _ticks(low: float, high: float, log: bool) -> list[float]:
    if log:
        start, end = math.floor(math.log10(low)), math.ceil(math.log10(high))
        steps = (1, 2, 5) if end - start <= 3 else (1,)
        return [m * 10.0**e for e in range(start, end + 1) for m in steps]
    if high == low:
        return [low]
    step = 10 ** math.floor(math.log10((high - low) / 4))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= 6:
            step *= factor
            break
    first = math.floor(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 2)]


def _label(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


class _Scale:
    def __init__(self, low, high, out_low, out_high, log):
        self.log = log
        if log:
            low, high = math.log10(low), math.log10(high)
        if high == low:
            low, high = low - 1, high + 1
        self.low, self.high, self.out_low, self.out_high = low, high, out_low, out_high

    def __call__(self, value):
        v = math.log10(value) if self.log else value
        return self.out_low + (v - self.low) / (self.high - self.low) * (self.out_high - self.out_low)


def _frame(title: str, x_label: str, y_label: str, body: list[str], legend: list[tuple[str, str]]) -> str:
    items = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">',
             f'<text x="{LEFT}" y="18" class="title">{escape(title)}</text>',
             f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 6}" text-anchor="middle" class="axis">{escape(x_label)}</text>',
             f'<text transform="translate(14 {(TOP + HEIGHT - BOTTOM) / 2}) rotate(-90)" text-anchor="middle" '
             f'class="axis">{escape(y_label)}</text>', *body]
    for i, (name, color) in enumerate(legend):
        y = TOP + 6 + i * 16
        items.append(f'<rect x="{WIDTH - RIGHT + 10}" y="{y - 8}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{WIDTH - RIGHT + 24}" y="{y + 1}" class="legend">{escape(name)}</text>')
    items.append("</svg>")
    return "\n".join(items)


def _axes(xs: _Scale, ys: _Scale, x_ticks, y_ticks) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" class="frame"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" class="frame"/>']
    for t in y_ticks:
        y = ys(t)
        if TOP - 1 <= y <= HEIGHT - BOTTOM + 1:
            out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="grid"/>'
                       f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_label(t)}</text>')
    for t, text in x_ticks:
        x = xs(t)
        if LEFT - 1 <= x <= WIDTH - RIGHT + 1:
            out.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" class="tick">{escape(text)}</text>')
    return out


class Line(Struct, frozen=True, kw_only=True):
    """A line chart's series: its points, (x, y) or (x, y, label), and how it is drawn: "line" (a line and a dot per
    point), "step" (a dashed line, no dots) or "dots" (larger dots, no line)."""
    name: str
    points: list[tuple]
    style: str = "line"


class Mark(Struct, frozen=True, kw_only=True):
    """A vertical line across a line chart at x, its label at the top, its title the tooltip, css its class."""
    x: float
    label: str = ""
    title: str | None = None
    css: str = "mark"


class Bars(Struct, frozen=True, kw_only=True):
    """A bar chart's series: a value per category (None: no bar)."""
    name: str
    values: list[float | None]


def _mark(xs: _Scale, mark: Mark) -> str:
    """A vertical line across the plot at mark.x, its label at the top (a change point between two runs)."""
    x = xs(mark.x)
    title = f"<title>{escape(mark.title)}</title>" if mark.title else ""
    return (f'<g class="{escape(mark.css)}" data-x="{mark.x:g}">{title}'
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#b00020" stroke-width="1.2" '
            f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{TOP + 10}" class="tick" fill="#b00020">'
            f'{escape(mark.label)}</text></g>')


def line_chart(title: str, series: list[Line], *, x_label: str, y_label: str, log_x=False, log_y=False,
               x_ticks: list[tuple[float, str]] | None = None, marks: list[Mark] | None = None) -> str:
    """Lines, each of points (x, y) or (x, y, label); points with None or (on a log axis) ≤ 0 are left out. A
    point's label is its tooltip and its data-label. marks: each a vertical line at its x."""
    clean = []
    for s in series:
        points = [(p[0], p[1], p[2] if len(p) > 2 else None) for p in s.points
                  if p[0] is not None and p[1] is not None and (not log_x or p[0] > 0) and (not log_y or p[1] > 0)]
        if points:
            clean.append(Line(name=s.name, points=points, style=s.style))
    if not clean:
        return _frame(title, x_label, y_label, ['<text x="200" y="150" class="axis">no data</text>'], [])
    all_x = [x for s in clean for x, _, _ in s.points]
    all_y = [y for s in clean for _, y, _ in s.points]
    low_y = min(all_y) if log_y else min(0.0, min(all_y))
    xs = _Scale(min(all_x), max(all_x), LEFT + 8, WIDTH - RIGHT - 8, log_x)
    ys = _Scale(low_y, max(all_y) * (1 if log_y else 1.05), HEIGHT - BOTTOM, TOP, log_y)
    ticks = x_ticks or [(t, _label(t)) for t in _ticks(min(all_x), max(all_x), log_x)]
    body = _axes(xs, ys, ticks, _ticks(low_y, max(all_y), log_y))
    body += [_mark(xs, m) for m in marks or []]
    legend = []
    for i, s in enumerate(clean):
        color = PALETTE[i % len(PALETTE)]
        legend.append((s.name, color))
        coords = " ".join(f"{xs(x):.1f},{ys(y):.1f}" for x, y, _ in s.points)
        if s.style != "dots":
            dashes = ' stroke-dasharray="5 3"' if s.style == "step" else ""
            body.append(f'<polyline class="series" data-name="{escape(s.name)}" points="{coords}" fill="none" '
                        f'stroke="{color}" stroke-width="1.8"{dashes}/>')
        if s.style == "step":
            continue
        radius = 4.5 if s.style == "dots" else 2.6
        for x, y, text in s.points:
            named = f' data-label="{escape(text)}"' if text else ""
            body.append(f'<circle cx="{xs(x):.1f}" cy="{ys(y):.1f}" r="{radius}" fill="{color}"{named}><title>'
                        f'{escape(s.name)}: {escape(text) + ", " if text else ""}{_label(x)}, {y:,.1f}'
                        f'</title></circle>')
    return _frame(title, x_label, y_label, body, legend)


def bar_chart(title: str, categories: list[str], series: list[Bars], *, y_label: str) -> str:
    """Grouped bars: each series a value per category."""
    values = [v for s in series for v in s.values if v is not None]
    if not values or not categories:
        return _frame(title, "", y_label, ['<text x="200" y="150" class="axis">no data</text>'], [])
    ys = _Scale(0, max(values) * 1.05 or 1, HEIGHT - BOTTOM, TOP, False)
    band = (WIDTH - RIGHT - LEFT) / len(categories)
    width = band * 0.8 / len(series)
    body = _axes(_Scale(0, 1, 0, 1, False), ys, [], _ticks(0, max(values), False))
    legend = []
    for j, s in enumerate(series):
        color = PALETTE[j % len(PALETTE)]
        legend.append((s.name, color))
        for i, v in enumerate(s.values):
            if v is None:
                continue
            x = LEFT + i * band + band * 0.1 + j * width
            body.append(f'<rect class="bar" x="{x:.1f}" y="{ys(v):.1f}" width="{width:.1f}" '
                        f'height="{HEIGHT - BOTTOM - ys(v):.1f}" fill="{color}"><title>{escape(categories[i])} '
                        f'{escape(s.name)}: {v:,.2f}</title></rect>')
    for i, name in enumerate(categories):
        body.append(f'<text x="{LEFT + (i + 0.5) * band:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" '
                    f'class="tick">{escape(name)}</text>')
    return _frame(title, "", y_label, body, legend)


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
