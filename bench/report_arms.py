"""BENCHMARKS.md's sections for runs made of interleaved trials on several arms (bench/arms.py):
per run, a line naming it and a table of every row on every arm it applies to, each figure the
median over the rounds [its bootstrap 95 % interval]."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.report_curve import ARM_TITLES, ARMS, _interval

METHOD = (
    "Each row ran on every arm it applies to, interleaved: in each round every arm in turn, the",
    "arms' order rotated from round to round, truly bare Slurm's trials inside one switch to a",
    "slurm.conf without Tandem's prolog and epilog. Each figure is the median over the rounds [its",
    "bootstrap 95 % interval]; two arms differ only where the intervals do not overlap. A trial that",
    "failed a check is counted in `runs` and marked, and its figures are left out.",
)


def is_arms(record: Mapping[str, Any]) -> bool:
    return (record.get("result") or {}).get("method") == "arms"


def table(result: Mapping[str, Any]) -> list[str]:
    figures = [(str(k), str(t)) for k, t in result.get("figures") or []]
    head = ["row", "arm", "runs", *(title for _, title in figures)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in result.get("rows") or []:
        by_arm = row.get("arms") or {}
        for arm in [a for a in ARMS if a in by_arm] + [a for a in by_arm if a not in ARMS]:
            cell = by_arm[arm]
            failed = f" ({cell['failed']} **failed**)" if cell.get("failed") else ""
            lines.append(
                "| "
                + " | ".join(
                    [
                        str(row.get("row")),
                        ARM_TITLES.get(arm) or arm,
                        f"{cell.get('runs')}{failed}",
                        *(_interval(cell.get(key)) for key, _ in figures),
                    ]
                )
                + " |"
            )
    return lines


def section(
    records: list[dict[str, Any]], describe_run: Callable[[dict[str, Any]], str], about: str = ""
) -> list[str]:
    """Every run's table, newest last, under the method's description."""
    out = [*METHOD, *(["", about] if about else []), ""]
    for record in records:
        result = record["result"]
        said = str(result.get("about") or "")
        out += [
            f"**{describe_run(record)}**: {result.get('rounds')} rounds{'; ' + said if said else ''}",
            "",
            *table(result),
            "",
        ]
    return out
