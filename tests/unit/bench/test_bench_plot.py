"""The curves BENCHMARKS.md shows (bench/plot.py, bench/report_curve.py): drawn from the figures
alone, the same bytes every time, every arm and interval on them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from bench import plot, report_curve

SVG = "{http://www.w3.org/2000/svg}"


def chart(log_y: bool = False) -> str:
    return plot.line_chart(
        "p99 against load",
        "offered per second",
        "p99 s",
        {
            "Tandem": [plot.Point(10, 1.0, 0.8, 1.3), plot.Point(5, 0.5, 0.4, 0.7)],
            "truly bare": [plot.Point(5, 0.3, 0.3, 0.3), plot.Point(10, 0.4, 0.35, 0.6)],
        },
        log_y=log_y,
    )


@pytest.mark.parametrize("log_y", [False, True])
def test_a_chart_is_valid_svg_with_a_line_and_error_bars_per_series(log_y: bool) -> None:
    root = ET.fromstring(chart(log_y))
    assert root.tag == f"{SVG}svg"
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2
    # Each line runs left to right (the points were given out of order).
    xs = [float(p.split(",")[0]) for p in lines[0].get("points", "").split()]
    assert xs == sorted(xs)
    assert len(root.findall(f"{SVG}circle")) == 4
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "Tandem" in texts and "truly bare" in texts and "p99 against load" in texts


def test_a_higher_median_is_drawn_higher_and_its_bar_spans_its_interval() -> None:
    root = ET.fromstring(chart())
    circles = root.findall(f"{SVG}circle")
    cy = {float(c.get("cx", 0)): float(c.get("cy", 0)) for c in circles[:2]}  # Tandem's two points
    left, right = sorted(cy)
    assert cy[right] < cy[left]  # 1.0 s at 10/s above 0.5 s at 5/s (SVG's y grows downwards)


def test_the_same_figures_give_the_same_bytes() -> None:
    assert chart() == chart()


def test_nothing_to_draw_is_refused() -> None:
    with pytest.raises(ValueError, match="nothing to draw"):
        plot.line_chart("t", "x", "y", {})


@pytest.mark.parametrize(
    ("low", "high", "log", "want"),
    [
        (0, 31.5, False, [0, 10, 20, 30, 40]),
        (0, 1.2, False, [0, 0.5, 1.0, 1.5]),
        (0.01, 40, True, [0.01, 0.1, 1, 10, 100]),
    ],
)
def test_ticks_are_round_and_span_the_values(low: float, high: float, log: bool, want: list[float]) -> None:
    found = plot.ticks(low, high, log)
    assert found == pytest.approx(want)
    assert found[0] <= low and found[-1] >= high


def result() -> dict[str, Any]:
    def figures(p50: float, failed: int = 0) -> dict[str, Any]:
        i = {"median": p50, "low": p50 * 0.9, "high": p50 * 1.2}
        return {
            "runs": 5,
            "failed": failed,
            "p50": i,
            "p99": i,
            "tandem_cpu": i,
            "machine_cpu": i,
            "tandem_api": i,
        }

    return {
        "capacity": 20.0,
        "rounds": 5,
        "seconds": 30,
        "warmup": 10,
        "summary": {
            "truly-bare": {"5": figures(0.3), "10": figures(0.4)},
            "tandem": {"5": figures(0.5), "10": figures(0.9, failed=1)},
        },
        "highest_within_slo": {"truly-bare": 10.0, "tandem": 5.0},
        "highest_within_slo_vs_truly_bare": {"truly-bare": 1.0, "tandem": 0.5},
    }


def test_the_section_shows_every_arm_at_every_rate_with_intervals_and_failed_runs() -> None:
    lines = report_curve.section([{"result": result()}], lambda r: "run")
    rows = [line for line in lines if line.startswith("| 5 ") or line.startswith("| 10 ")]
    assert len(rows) == 4
    assert any("Tandem" in r and "1 **failed**" in r and r.startswith("| 10 ") for r in rows)
    assert any(re.search(r"0\.5 \[0\.45, 0\.6\]", r) for r in rows)
    assert "- Tandem: 5/s (0.50 of truly bare's)" in lines
    assert "![curve-p99.svg](bench/figures/curve-p99.svg)" in lines


def test_the_images_are_drawn_from_the_newest_runs_figures() -> None:
    drawn = report_curve.images(result())
    assert set(drawn) == {f"bench/figures/curve-{n}.svg" for n in ("p50", "p99", "cpu")}
    assert "Tandem" in drawn["bench/figures/curve-p99.svg"]
