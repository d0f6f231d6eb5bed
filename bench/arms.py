"""Trials of one benchmark on every arm it applies to, interleaved round by round (issue 55).

A trial is one measurement of one row of a table (a gang of 4, a burst of 200) on one arm
(bench/lifecycle.ARMS): it returns its figures, or raises TrialFailed, which is recorded as a
failed trial while the run goes on. Round r runs each arm in the order stats.interleaved gives
(rotated round by round: no arm always first on a warm cache or last after the others'
leftovers), an arm's rows together, and truly bare Slurm's inside one switch of slurm.conf (each
switch restarts slurmctld and every slurmd). A summary gives, per row and arm, each figure's
median and bootstrap 95 % interval over the trials that passed, and how many failed: a trial that
fails a check does not count.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from bench import stats
from bench.lifecycle import TRULY_BARE
from devstack import slurm as devstack_slurm
from devstack.config import StackConfig
from devstack.table import format_table

# Round index -> the trial's figures by name.
Trial = Callable[[int], Mapping[str, float]]


class TrialFailed(Exception):
    """A trial that measured nothing it may claim (a member never bound, a check failed)."""


@contextlib.contextmanager
def slurm_for(cfg: StackConfig, arm: str) -> Iterator[None]:
    """Slurm as the arm runs it: without Tandem's prolog and epilog for truly bare Slurm."""
    if arm == TRULY_BARE:
        # Refused while any job is queued (a cancelled one completing included): waited out.
        deadline = time.monotonic() + 120
        while devstack_slurm.queued_jobs(cfg) and time.monotonic() < deadline:
            time.sleep(0.5)
        with devstack_slurm.without_tandem_hooks(cfg):
            yield
    else:
        yield


def run(
    cfg: StackConfig,
    arms: Sequence[str],
    rounds: int,
    rows: Mapping[str, Mapping[str, Trial]],
    say: Callable[[str], None] = print,
    around: Callable[[str], contextlib.AbstractContextManager[None]] | None = None,
) -> list[dict[str, Any]]:
    """Every row's trial on every arm it names, `rounds` times, interleaved: one record each.
    `around(arm)` holds each arm's block of trials inside Slurm's switch (a churn kept running
    through it, say)."""
    trials: list[dict[str, Any]] = []
    for r, order in enumerate(stats.interleaved(list(arms), rounds)):
        for arm in order:
            todo = [(row, by_arm[arm]) for row, by_arm in rows.items() if arm in by_arm]
            if not todo:
                continue
            with slurm_for(cfg, arm), around(arm) if around else contextlib.nullcontext():
                for row, trial in todo:
                    trials.append(one(r, arm, row, trial))
                    say(line(trials[-1]))
    return trials


def one(r: int, arm: str, row: str, trial: Trial) -> dict[str, Any]:
    try:
        figures, problems = {k: round(float(v), 4) for k, v in trial(r).items()}, []
    except (TrialFailed, SystemExit) as e:
        # The benchmarks' waits stop with SystemExit when their time runs out (each cleans up in
        # its `finally`): inside a trial, that is this trial failed, not the run.
        figures, problems = {}, [str(e) or type(e).__name__]
    return {"round": r, "arm": arm, "row": row, "figures": figures, "problems": problems}


def line(trial: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k} {v:g}" for k, v in trial["figures"].items())
    said = f"round {trial['round']} {trial['arm']} {trial['row']}: {shown or 'nothing'}"
    return f"{said}; problems: {'; '.join(trial['problems'])[:300]}" if trial["problems"] else said


def summarize(trials: Sequence[Mapping[str, Any]], figures: Sequence[str]) -> list[dict[str, Any]]:
    """Per row (in the order first tried) and arm: runs, failed, and each figure's median and
    interval over the trials that passed."""
    grouped: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for t in trials:
        grouped.setdefault(str(t["row"]), {}).setdefault(str(t["arm"]), []).append(t)
    out = []
    for row, by_arm in grouped.items():
        arms: dict[str, dict[str, Any]] = {}
        for arm, of_it in by_arm.items():
            counted = [t for t in of_it if not t["problems"]]
            cell: dict[str, Any] = {"runs": len(of_it), "failed": len(of_it) - len(counted)}
            for figure in figures:
                values = [float(t["figures"][figure]) for t in counted if figure in t["figures"]]
                if values:
                    cell[figure] = stats.median_interval(values).as_json()
            arms[arm] = cell
        out.append({"row": row, "arms": arms})
    return out


def result(
    trials: Sequence[Mapping[str, Any]], figures: Sequence[tuple[str, str]], rounds: int, **more: Any
) -> dict[str, Any]:
    """The run's JSON line: its figures' names and titles, the summary, every trial, and the
    failures (bench/report_arms.py draws the table from it)."""
    return {
        "method": "arms",
        "rounds": rounds,
        "figures": [list(f) for f in figures],
        "rows": summarize(trials, [key for key, _ in figures]),
        "trials": list(trials),
        "checks_failed": [
            f"round {t['round']} {t['arm']} {t['row']}: {p}" for t in trials for p in t["problems"]
        ],
        **more,
    }


def text_table(result: Mapping[str, Any]) -> str:
    """The run's summary as the terminal shows it: a line per row and arm."""
    figures = [(str(k), str(t)) for k, t in result.get("figures") or []]
    rows = [["row", "arm", "runs", *(title for _, title in figures)]]
    for row in result.get("rows") or []:
        for arm, cell in row["arms"].items():
            failed = f" ({cell['failed']} failed)" if cell["failed"] else ""
            rows.append(
                [
                    row["row"],
                    arm,
                    f"{cell['runs']}{failed}",
                    *(
                        f"{c['median']:.3g} [{c['low']:.3g}, {c['high']:.3g}]" if (c := cell.get(k)) else "-"
                        for k, _ in figures
                    ),
                ]
            )
    return format_table(rows)
