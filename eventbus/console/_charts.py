"""Charts as server-rendered SVG: readable without JavaScript, allowed by a strict CSP.

Two shapes cover the console: stacked bars (counts per time bucket by kind, or one bar per run
whose height is its duration) and lines (a total over time). Every mark has a ``<title>``, so
hovering shows the exact figure; the chart as a whole has an ``aria-label``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from markupsafe import Markup, escape

__all__ = ["Bar", "bar_chart", "line_chart", "time_buckets"]

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 20
#: fills by series name; others take the palette in order
COLORS = {
    "pending": "#d97706",
    "dead": "#b91c1c",
    "resolved": "#15803d",
    "succeeded": "#15803d",
    "failed": "#b91c1c",
    "skipped": "#6b7280",
    "abandoned": "#7c3aed",
    "running": "#2563eb",
}
PALETTE = ("#2563eb", "#d97706", "#15803d", "#b91c1c", "#7c3aed", "#0891b2", "#6b7280")


@dataclasses.dataclass(frozen=True, slots=True)
class Bar:
    """One bar: a *label* under it (may be empty) and its values by series, stacked."""

    label: str
    values: Mapping[str, float]
    title: str = ""  #: the tooltip; default: the label and the values


def time_buckets(
    stamps: Iterable[tuple[datetime, str]], *, end: datetime, span: timedelta, count: int
) -> list[Bar]:
    """Count ``(time, series)`` pairs in *count* equal buckets ending at *end*."""
    step = span / count
    start = end - span
    counts: list[dict[str, float]] = [{} for _ in range(count)]
    for at, series in stamps:
        if start <= at < end:
            i = min(count - 1, int((at - start) / step))
            counts[i][series] = counts[i].get(series, 0) + 1
    fmt = "%H:%M" if span <= timedelta(days=2) else "%m-%d"
    bars = []
    for i, values in enumerate(counts):
        left = start + step * i
        label = left.strftime(fmt) if i % max(1, count // 6) == 0 else ""
        shown = ", ".join(f"{k}: {v:g}" for k, v in sorted(values.items())) or "none"
        bars.append(Bar(label, values, f"{left:%Y-%m-%d %H:%M} UTC, {shown}"))
    return bars


def _color(name: str, order: Sequence[str]) -> str:
    return COLORS.get(name) or PALETTE[order.index(name) % len(PALETTE)]


def _nice_max(value: float) -> float:
    """The axis's top: 1, 2 or 5 times a power of ten, at least *value*; below 1 too (runs
    of a few milliseconds would otherwise be 1-pixel bars under a top of 1 s)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        top = float(f"{step}e{exponent}")  # 5e-3, not 5 * 0.001 = 0.005000000000000001
        if value <= top:
            return top
    return float(f"1e{exponent + 1}")


def _frame(label: str, top: float, unit: str) -> list[str]:
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        (
            f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        ),
        f"<title>{escape(label)}</title>",
    ]
    for frac in (0, 0.5, 1):
        if frac == 0.5 and top >= 1 and top % 2:
            continue  # an odd count has no whole half: no line for 0.5
        y = TOP + inner_h * (1 - frac)
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + inner_w}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#d1d5db" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#374151">{top * frac:g}{escape(unit)}</text>'
        )
    return parts


def _figure(svg: list[str], names: Sequence[str]) -> Markup:
    """The chart and its legend, in HTML so that long names wrap on a narrow screen."""
    items = "".join(
        f'<li><svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" '
        f'fill="{_color(name, names)}"/></svg> {escape(name)}</li>'
        for name in names
    )
    legend = f'<ul class="legend">{items}</ul>' if names else ""
    return Markup(f'<figure class="chart">{"".join(svg)}{legend}</figure>')


def bar_chart(bars: Sequence[Bar], *, label: str, unit: str = "") -> Markup:
    """Stacked bars, one per item of *bars*, with a legend of the series found."""
    names = sorted({k for b in bars for k in b.values})
    top = _nice_max(max((sum(b.values.values()) for b in bars), default=0))
    parts = _frame(label, top, unit)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = inner_w / max(1, len(bars))
    width = max(1.0, slot * 0.8)
    for i, bar in enumerate(bars):
        x = LEFT + slot * i + (slot - width) / 2
        y: float = TOP + inner_h
        tip = bar.title or f"{bar.label}: " + ", ".join(
            f"{k} {v:g}{unit}" for k, v in sorted(bar.values.items())
        )
        parts.append(f"<g><title>{escape(tip)}</title>")
        # an invisible full-height box, so that empty buckets show their tooltip too
        parts.append(
            f'<rect x="{x:.1f}" y="{TOP}" width="{width:.1f}" height="{inner_h}" '
            'fill="transparent"/>'
        )
        if bar.values and not any(v > 0 for v in bar.values.values()):
            # a zero (a skipped run's duration): a stub on the axis, so that it shows
            name = next(iter(bar.values))
            parts.append(
                f'<rect x="{x:.1f}" y="{y - 2:.1f}" width="{width:.1f}" height="2" '
                f'fill="{_color(name, names)}"/>'
            )
        for name in names:
            value = bar.values.get(name, 0)
            if value <= 0:
                continue
            h = max(1.0, inner_h * value / top)
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{h:.1f}" '
                f'fill="{_color(name, names)}"/>'
            )
        parts.append("</g>")
        if bar.label:
            parts.append(
                f'<text x="{x + width / 2:.1f}" y="{TOP + inner_h + 13}" text-anchor="middle" '
                f'font-size="11" fill="#374151">{escape(bar.label)}</text>'
            )
    parts.append("</svg>")
    return _figure(parts, names)


def line_chart(
    series: Mapping[str, Sequence[tuple[datetime, float]]],
    *,
    label: str,
    unit: str = "",
    end: datetime | None = None,
) -> Markup:
    """One line per series over a shared time axis, a dot (with its tooltip) per point; with
    *end*, each line goes on at its last value up to *end* (a total that has not moved)."""
    names = sorted(series)
    points = [p for name in names for p in series[name]]
    top = _nice_max(max((v for _, v in points), default=0))
    parts = _frame(label, top, unit)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if points:
        t0 = min(t for t, _ in points)
        t1 = max([t for t, _ in points] + ([end] if end is not None else []))
        span = (t1 - t0).total_seconds()

        def xy(at: datetime, value: float) -> tuple[float, float]:
            frac = (at - t0).total_seconds() / span if span else 0.5
            return LEFT + inner_w * frac, TOP + inner_h * (1 - value / top)

        for name in names:
            color = _color(name, names)
            coords = [xy(t, v) for t, v in sorted(series[name])]
            line = coords + ([xy(t1, sorted(series[name])[-1][1])] if end is not None else [])
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>'
            )
            for (x, y), (t, v) in zip(coords, sorted(series[name]), strict=True):
                parts.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"><title>'
                    f"{escape(name)}: {v:g}{escape(unit)} at {t:%Y-%m-%d %H:%M:%S} UTC"
                    "</title></circle>"
                )
        for at, anchor in ((t0, "start"), (t1, "end")) if span else ((t0, "middle"),):
            x, _ = xy(at, 0)
            parts.append(
                f'<text x="{x:.1f}" y="{TOP + inner_h + 13}" text-anchor="{anchor}" '
                f'font-size="11" fill="#374151">{at:%H:%M:%S}</text>'
            )
    parts.append("</svg>")
    return _figure(parts, names)
