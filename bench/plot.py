"""Line charts as SVG text, for BENCHMARKS.md's curves (issue 55): each series a line of medians
with its intervals as error bars. No plotting library: the same figures always give the same
bytes, so `bench/report.py --check` can hold the images to the runs as it holds the tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

# One colour per series, in order; distinguishable in print and for the common colour blindnesses.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000")
WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 170, 36, 48


@dataclass(frozen=True)
class Point:
    x: float
    median: float
    low: float
    high: float


def ticks(low: float, high: float, log: bool) -> list[float]:
    """Round values spanning [low, high]: powers of ten (and 2x, 5x when few) on a log axis, else
    steps of 1, 2 or 5 times a power of ten, about five of them."""
    if log:
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
        decades = [10.0**e for e in range(first, last + 1)]
        if len(decades) > 3:
            return decades
        return [d * m for d in decades for m in (1, 2, 5) if low <= d * m <= high * 1.0001] or decades
    span = (high - low) or abs(high) or 1.0
    raw = span / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(k * step, 10) for k in range(first, last + 1)]


def _label(value: float) -> str:
    return f"{value:g}" if abs(value) >= 0.01 or value == 0 else f"{value:.0e}"


def line_chart(
    title: str,
    x_label: str,
    y_label: str,
    series: Mapping[str, Sequence[Point]],
    log_y: bool = False,
) -> str:
    """An SVG chart of each series' medians against x, with error bars from low to high."""
    points = [p for pts in series.values() for p in pts]
    if not points:
        raise ValueError(f"{title}: nothing to draw")
    xs = [p.x for p in points]
    ys = [v for p in points for v in (p.low, p.high, p.median)]
    if log_y:
        ys = [y for y in ys if y > 0] or [1.0]
    x_ticks = ticks(min(0.0, min(xs)), max(xs), log=False)
    y_ticks = ticks(min(ys), max(ys), log=log_y) if log_y else ticks(min(0.0, min(ys)), max(ys), log=False)
    x0, x1 = x_ticks[0], x_ticks[-1]
    y0, y1 = y_ticks[0], y_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / ((x1 - x0) or 1) * plot_w

    def sy(y: float) -> float:
        if log_y:
            y = max(y, y0)
            share = (math.log10(y) - math.log10(y0)) / ((math.log10(y1) - math.log10(y0)) or 1)
        else:
            share = (y - y0) / ((y1 - y0) or 1)
        return TOP + plot_h - share * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for y in y_ticks:
        out.append(
            f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + plot_w}" y2="{sy(y):.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{_label(y)}</text>'
        )
    for x in x_ticks:
        out.append(
            f'<line x1="{sx(x):.1f}" y1="{TOP + plot_h}" x2="{sx(x):.1f}" y2="{TOP + plot_h + 4}" '
            'stroke="#333"/>'
            f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{_label(x)}</text>'
        )
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>'
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text x="16" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {TOP + plot_h / 2:.1f})">{escape(y_label)}</text>'
    )
    for k, (name, pts) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        ordered = sorted(pts, key=lambda p: p.x)
        if len(ordered) > 1:
            path = " ".join(f"{sx(p.x):.1f},{sy(p.median):.1f}" for p in ordered)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in ordered:
            cx = sx(p.x)
            out.append(
                f'<line x1="{cx:.1f}" y1="{sy(p.low):.1f}" x2="{cx:.1f}" y2="{sy(p.high):.1f}" '
                f'stroke="{colour}"/>'
                f'<circle cx="{cx:.1f}" cy="{sy(p.median):.1f}" r="3" fill="{colour}"/>'
            )
        ly = TOP + 14 + 18 * k
        lx = LEFT + plot_w + 12
        out.append(
            f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{lx + 24}" y="{ly}">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
