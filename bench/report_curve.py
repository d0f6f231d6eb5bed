"""BENCHMARKS.md's load-curve section (bench/curve.py's runs, issue 55): per run, a table of every
arm at every offered rate, medians with their 95 % intervals over the rounds; each arm's highest
rate within the SLO; and, for the latest run, the curves drawn (bench/plot.py) beside the table."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench import plot

FIGURES_DIR = "bench/figures"
ARMS = ("truly-bare", "bare", "kube-scheduler", "tandem")
ARM_TITLES = {
    "truly-bare": "truly bare Slurm (no Tandem prolog)",
    "bare": "bare Slurm in a Tandem cluster",
    "kube-scheduler": "kube-scheduler's default scheduler",
    "tandem": "Tandem",
}
API_OF = {"tandem": "tandem_api", "kube-scheduler": "kube_scheduler_api"}
COLUMNS = (
    ("p50", "p50 s"),
    ("p99", "p99 s"),
    ("p99.9", "p99.9 s"),
    ("max", "max s"),
    ("tandem_cpu", "Tandem's services CPU ms/Pod"),
    ("kube_scheduler_cpu", "kube-scheduler CPU ms/Pod"),
    ("machine_cpu", "whole machine CPU ms/Pod"),
)


def _interval(figure: Mapping[str, float] | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['median']:.3g} [{figure['low']:.3g}, {figure['high']:.3g}]"


def _rates(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted({rate for by_rate in summary.values() for rate in by_rate}, key=float)


def table(result: Mapping[str, Any]) -> list[str]:
    summary = result.get("summary") or {}
    capacity = float(result.get("capacity") or 0) or 1.0
    head = ["offered /s", "of capacity", "arm", "runs", *(title for _, title in COLUMNS), "API requests/Pod"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rate in _rates(summary):
        for arm in ARMS:
            figures = (summary.get(arm) or {}).get(rate)
            if figures is None:
                continue
            failed = f" ({figures['failed']} **failed**)" if figures.get("failed") else ""
            api = API_OF.get(arm)
            cells = [
                rate,
                f"{float(rate) / capacity:.0%}",
                ARM_TITLES.get(arm, arm),
                f"{figures.get('runs')}{failed}",
                *(_interval(figures.get(key)) for key, _ in COLUMNS),
                _interval(figures.get(api)) if api else "-",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def slo_lines(result: Mapping[str, Any]) -> list[str]:
    within = result.get("highest_within_slo") or {}
    share = result.get("highest_within_slo_vs_truly_bare") or {}
    bare = within.get("bare")
    of_bare = {arm: best / bare for arm, best in within.items() if best is not None and bare}
    out = []
    for arm in ARMS:
        if arm in within:
            best = within[arm]
            said = f"{best:g}/s" if best is not None else "none of the rates"
            ratios = [
                f"{found[arm]:.2f} of {whose}"
                for found, whose in ((share, "truly bare's"), (of_bare, "bare's"))
                if found.get(arm) is not None
            ]
            out.append(f"- {ARM_TITLES[arm]}: {said}" + (f" ({', '.join(ratios)})" if ratios else ""))
    return out


def _series(
    result: Mapping[str, Any], figure: str, arms: tuple[str, ...] = ARMS
) -> dict[str, list[plot.Point]]:
    summary = result.get("summary") or {}
    series: dict[str, list[plot.Point]] = {}
    for arm in arms:
        for rate, figures in (summary.get(arm) or {}).items():
            f = figures.get(figure)
            if f is not None:
                series.setdefault(ARM_TITLES[arm], []).append(
                    plot.Point(float(rate), f["median"], f["low"], f["high"])
                )
    return series


def images(result: Mapping[str, Any]) -> dict[str, str]:
    """Each image's path (from the repository's root) -> its SVG text."""
    drawn: dict[str, str] = {}
    charts: list[tuple[str, str, str, Callable[[], dict[str, list[plot.Point]]], bool]] = [
        ("curve-p50.svg", "p50 latency against offered load", "p50 s", lambda: _series(result, "p50"), True),
        ("curve-p99.svg", "p99 latency against offered load", "p99 s", lambda: _series(result, "p99"), True),
        (
            "curve-cpu.svg",
            "CPU per Pod over its whole life, against offered load",
            "ms per Pod",
            lambda: {
                **{
                    f"{k} (Tandem's services)": v
                    for k, v in _series(result, "tandem_cpu", ("tandem",)).items()
                },
                **{
                    f"{k} (kube-scheduler)": v
                    for k, v in _series(result, "kube_scheduler_cpu", ("kube-scheduler",)).items()
                },
                **{
                    f"{k} (machine)": v
                    for k, v in _series(result, "machine_cpu", ("tandem", "truly-bare")).items()
                },
            },
            False,
        ),
    ]
    for name, title, y_label, series, log_y in charts:
        found = series()
        if found:
            drawn[f"{FIGURES_DIR}/{name}"] = plot.line_chart(
                title, "offered per second", y_label, found, log_y
            )
    return drawn


def section(records: list[dict[str, Any]], describe_run: Callable[[dict[str, Any]], str]) -> list[str]:
    """Every run's table, newest last; the newest's curves drawn."""
    out = [
        "Open-loop Poisson arrivals at fractions of bare Slurm's capacity in a Tandem cluster (the",
        "start rate of a burst of jobs that live as the runs' do, measured first in the run); every",
        "job or Pod lives as long once it runs and then goes (a Pod is deleted: its job's cancel,",
        "epilog and unlock follow), inside the window; latency from each arrival's intended time, not",
        "its send; CPU over the whole window minus each process's idle rate measured just before;",
        "API requests as the API server's audit log counts them, by the arm's scheduler. Each figure",
        "is the median over the rounds [its bootstrap 95 % interval]; two arms differ only where the",
        "intervals do not overlap. The SLO at a rate: truly bare Slurm's p99 there, doubled.",
        "",
    ]
    for record in records:
        result = record["result"]
        out += [
            f"**{describe_run(record)}**: capacity {result.get('capacity')} jobs/s, "
            f"{result.get('rounds')} rounds of {result.get('seconds'):g} s measured after "
            f"{result.get('warmup'):g} s of warm-up at each rate, each job or Pod living "
            f"{result.get('lifetime', 5):g} s",
            "",
            *table(result),
            "",
            "Highest offered rate within the SLO:",
            "",
            *slo_lines(result),
            "",
        ]
    if records:
        for path in images(records[-1]["result"]):
            out += [f"![{path.rsplit('/', 1)[1]}]({path})", ""]
    return out
