"""Latency against offered load, four arms on the same Nodes in one run (issue 55).

Bare Slurm's capacity in a Tandem cluster is measured first: a burst of jobs that live as the
runs' do, so that epilogs overlap later starts as under a steady load (a first try took truly bare
Slurm's burst rate, with no epilogs in it, and at 90 % of that the bare arm's prologs timed out and
drained 62 of 64 nodes). Then, in each of `--rounds` rounds, every arm meets the same Poisson
arrivals at 25, 50, 75 and 90 % of it (bench/lifecycle.py: finite lifetimes, teardown inside
the window, latency from each arrival's intended time). The arms' order rotates from round to
round, and so does the rates' (no arm or rate always first on a warm cache or last after the
others' leftovers). Figures are per-run
values summarised as medians with bootstrap 95 % intervals over the rounds (bench/stats.py).

    NODES=64 make up && .venv/bin/python bench/curve.py --rounds 5 --seconds 60
    .venv/bin/python bench/curve.py --rounds 1 --seconds 15 --fractions 0.25,0.5   # a quick look

The SLO is truly bare Slurm's own p99 at the same rate, doubled: an arm's highest rate within it
is the highest offered rate whose median p99 (and every lower rate's) stays within it.

Prints a table per rate, then one JSON line: capacity, rates, rounds, "summary" (per arm and rate:
p50, p99, p99.9, max as intervals; Tandem's services' and kube-scheduler's CPU ms per Pod; API
requests per Pod by the API server's count), "highest_within_slo" per arm and as a share of truly
bare's, "runs" (every run's own figures, bench/lifecycle.describe) and checks_failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench import cpu, lifecycle, openloop, stats
from bench.arms import slurm_for
from bench.lifecycle import ARMS, KUBE_SCHEDULER, SLURM_ARMS, TANDEM, TRULY_BARE, ArmRun
from bench.schedule import (
    clean_tandem,
    ensure_namespace,
    left_clean,
    slurm_client,
    wait_until_quiet,
)
from devstack import audit, stack
from devstack import slurm as devstack_slurm
from devstack.config import StackConfig
from devstack.table import format_table

FRACTIONS = (0.25, 0.5, 0.75, 0.9)
TANDEM_SERVICES = ("tandem-scheduler", "tandem-syncer", "tandem-hooks")
# The p99 an arm may reach at a rate: this many times truly bare Slurm's there.
SLO_FACTOR = 2.0


def plan(arms: Sequence[str], rates: int, rounds: int) -> list[list[tuple[str, int]]]:
    """Each round's runs in order: the arms rotated round by round, and within an arm the rates
    rotated too. Truly bare's runs of a round stay together (each switch of slurm.conf restarts
    slurmctld and every slurmd)."""
    order = stats.interleaved(list(arms), rounds)
    return [[(arm, (r + k) % rates) for arm in order[r] for k in range(rates)] for r in range(rounds)]


def seed_of(round_index: int, rate_index: int) -> int:
    """The same arrivals for every arm in one round at one rate; others elsewhere."""
    return 1000 * round_index + rate_index


def capacity(cfg: StackConfig, n: int, lifetime: float) -> float:
    """Bare Slurm's capacity in a Tandem cluster: n jobs of the runs' own script (its lifetime,
    so epilogs overlap the later starts as they do under a steady load) submitted at once, over
    the time from the first submit to the last start."""
    slurm = slurm_client(cfg)
    try:
        sent, ran, problems = lifecycle.slurm_jobs(cfg, slurm, [0.0] * n, lifetime, "capacity")
    finally:
        slurm.close()
    if problems or not ran:
        raise SystemExit(f"the capacity burst failed: {'; '.join(problems)[:500]}")
    return len(ran) / (max(ran.values()) - min(s.sent for s in sent))


def drained_nodes(cfg: StackConfig) -> dict[str, str]:
    """Slurm nodes drained now, each with its reason."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-t", "drain,draining,drained", "-o", "%N|%E"],
        env=devstack_slurm.slurm_env(cfg),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def resume(cfg: StackConfig, nodes: Sequence[str]) -> None:
    subprocess.run(
        ["scontrol", "update", f"nodename={','.join(nodes)}", "state=resume"],
        env=devstack_slurm.slurm_env(cfg),
        capture_output=True,
        timeout=30,
        check=False,
    )


def run_one(cfg: StackConfig, arm: str, rate: float, args: argparse.Namespace, seed: int, tag: str) -> ArmRun:
    arrivals = openloop.poisson_arrivals(rate, args.warmup + args.seconds, seed)
    return run_arrivals(cfg, arm, rate, arrivals, args, tag)


def run_arrivals(
    cfg: StackConfig, arm: str, rate: float, arrivals: list[float], args: argparse.Namespace, tag: str
) -> ArmRun:
    """One arm meeting these arrivals (seconds from the start; the first `args.warmup` of them
    not measured), each living `args.lifetime` once it runs, and what it cost: CPU over the
    window minus the idle measured for `args.quiet` seconds just before, the API server's count,
    and the checks."""
    wait_until_quiet(cfg, settle=1.0)
    idle = lifecycle.idle_rates(cfg, args.quiet)
    slurm = slurm_client(cfg)
    before = cpu.sample_stack(cfg)
    started = time.time()
    try:
        with lifecycle.JobsSeen(slurm) as seen:
            bound: dict[str, Any] = {}
            if arm in SLURM_ARMS:
                sent, ran, problems = lifecycle.slurm_jobs(cfg, slurm, arrivals, args.lifetime, tag)
            else:
                sent, ran, problems, bound = lifecycle.pods(cfg, arm, arrivals, args.lifetime, tag)
            closes = started + arrivals[-1] + args.lifetime + args.tail
            time.sleep(max(0.0, closes - time.time()))
            if arm not in SLURM_ARMS and not lifecycle.pods_gone(cfg, f"{tag}-"):
                problems.append("Pods of the run still there after 120 s")
            wait_until_quiet(cfg, settle=0.0)
        ended = time.time()
        used = cpu.used_between(before, cpu.sample_stack(cfg))
        if arm == TANDEM:
            problems += lifecycle.tandem_checks(cfg, bound, seen.jobs, started)
            problems += left_clean(cfg)
    finally:
        slurm.close()
    drained = drained_nodes(cfg)
    if drained:
        # A prolog that timed out drained its node: said, and the node put back for the next runs.
        reasons = sorted(set(drained.values()))
        problems.append(f"{len(drained)} nodes drained during the run ({'; '.join(reasons)[:200]})")
        resume(cfg, sorted(drained))
    run = ArmRun(arm, rate, sent, ran, args.warmup, sent[0].intended - arrivals[0] if sent else started)
    run.window = ended - started
    run.cpu = lifecycle.minus_idle(used, idle, run.window)
    run.api = audit.requests_by_user(cfg, started, ended)
    run.problems = problems
    return run


def pick(run: Mapping[str, Any], figure: str) -> float | None:
    """One figure of a run's record: a latency percentile, "tandem_cpu", "kube_scheduler_cpu",
    "tandem_api" or "kube_scheduler_api" (per arrival)."""
    if figure in ("p50", "p90", "p99", "p99.9", "max"):
        latency = run.get("latency")
        return None if latency is None else float(latency[figure])
    cpu_ms = run.get("cpu_ms_per_arrival") or {}
    api = run.get("api_per_arrival") or {}
    if figure == "tandem_cpu":
        return sum(float(cpu_ms.get(s, 0.0)) for s in TANDEM_SERVICES)
    if figure == "kube_scheduler_cpu":
        return float(cpu_ms.get("kube-scheduler", 0.0))
    if figure == "machine_cpu":
        return float(cpu_ms.get("whole machine", 0.0))
    if figure == "tandem_api":
        prefix = "system:serviceaccount:tandem:"
        return sum(float(n) for user, n in api.items() if user.startswith(prefix))
    if figure == "kube_scheduler_api":
        return float(api.get(audit.KUBE_SCHEDULER, 0.0))
    raise ValueError(f"no figure {figure!r}")


FIGURES = (
    "p50",
    "p99",
    "p99.9",
    "max",
    "tandem_cpu",
    "kube_scheduler_cpu",
    "machine_cpu",
    "tandem_api",
    "kube_scheduler_api",
)


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per arm, per rate (as its record's string): each figure's median and interval over the
    rounds whose runs passed their checks, and how many failed one."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        grouped.setdefault((str(run["arm"]), f"{float(run['rate']):g}"), []).append(run)
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for (arm, rate), of_it in sorted(grouped.items()):
        counted = [r for r in of_it if not r.get("problems")]  # a run that failed a check does not count
        figures: dict[str, Any] = {"runs": len(of_it), "failed": len(of_it) - len(counted)}
        for figure in FIGURES:
            values = [v for r in counted if (v := pick(r, figure)) is not None]
            if values:
                figures[figure] = stats.median_interval(values).as_json()
        summary.setdefault(arm, {})[rate] = figures
    return summary


def highest_within_slo(summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, float | None]:
    """Per arm: its highest rate whose median p99 is within SLO_FACTOR x truly bare's there."""
    reference = summary.get(TRULY_BARE) or {}
    found: dict[str, float | None] = {}
    for arm, by_rate in summary.items():
        p99 = {
            float(rate): figures["p99"]["median"]
            for rate, figures in by_rate.items()
            if "p99" in figures and "p99" in reference.get(rate, {})
        }
        limits = {
            float(rate): SLO_FACTOR * reference[rate]["p99"]["median"]
            for rate in by_rate
            if "p99" in reference.get(rate, {})
        }
        within = {rate: value for rate, value in p99.items() if value <= limits[rate]}
        best = None
        for rate in sorted(p99):
            if rate not in within:
                break
            best = rate
        found[arm] = best
    return found


def table(summary: Mapping[str, Mapping[str, Mapping[str, Any]]], capacity: float) -> str:
    """A row per rate and arm: latency, CPU per Pod (Tandem's three services; kube-scheduler;
    the whole machine) and the API requests per Pod of the arm's scheduler, each a median
    [95 % interval] over the rounds."""
    rows: list[tuple[str, ...]] = [
        (
            "offered /s",
            "of capacity",
            "arm",
            "runs",
            "p50 s",
            "p99 s",
            "max s",
            "Tandem CPU ms/Pod",
            "kube-scheduler CPU ms/Pod",
            "machine CPU ms/Pod",
            "API req/Pod",
        )
    ]
    rates = sorted({float(r) for by_rate in summary.values() for r in by_rate})
    for rate in rates:
        for arm in ARMS:
            figures = (summary.get(arm) or {}).get(f"{rate:g}")
            if figures is None:
                continue
            api = API_OF.get(arm)
            failed = f" ({figures['failed']} failed)" if figures["failed"] else ""
            rows.append(
                (
                    f"{rate:.1f}",
                    f"{rate / capacity:.0%}",
                    arm,
                    f"{figures['runs']}{failed}",
                    *(
                        shown(figures, name)
                        for name in ("p50", "p99", "max", "tandem_cpu", "kube_scheduler_cpu", "machine_cpu")
                    ),
                    shown(figures, api) if api else "-",
                )
            )
    return format_table(rows)


# The API requests an arm's Pods cost: those of the scheduler that placed them.
API_OF = {TANDEM: "tandem_api", KUBE_SCHEDULER: "kube_scheduler_api"}


def shown(figures: Mapping[str, Any], name: str) -> str:
    f = figures.get(name)
    return "-" if f is None else f"{f['median']:.3g} [{f['low']:.3g}, {f['high']:.3g}]"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds (pairs) of every arm and rate"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds of each run")
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="seconds of arrivals before the measured ones"
    )
    parser.add_argument("--lifetime", type=float, default=5.0, help="seconds each job or Pod runs")
    parser.add_argument("--quiet", type=float, default=8.0, help="seconds of idle measured before each run")
    parser.add_argument(
        "--tail", type=float, default=10.0, help="seconds the window stays open after the last lifetime"
    )
    parser.add_argument(
        "--fractions", default=",".join(map(str, FRACTIONS)), help="offered rates, of capacity"
    )
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--capacity", type=float, help="bare Slurm's jobs/s, instead of measuring it")
    parser.add_argument(
        "--burst",
        type=int,
        default=1200,
        help="jobs in the capacity burst (300 measured 50/s, 1,200 31/s: long enough for a steady state)",
    )
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"no arm {', '.join(sorted(unknown))}; the arms are {', '.join(ARMS)}")
    fractions = [float(f) for f in args.fractions.split(",") if f]
    cfg = StackConfig.from_env()
    stack.up(cfg)
    ensure_namespace(cfg)
    clean_tandem(cfg)
    wait_until_quiet(cfg)
    if drained := drained_nodes(cfg):
        raise SystemExit(f"nodes drained before the run: {', '.join(sorted(drained))}")
    measured = args.capacity or capacity(cfg, args.burst, args.lifetime)
    rates = [round(f * measured, 2) for f in fractions]
    said = f"stack: {cfg.nodes} nodes; bare Slurm's capacity {measured:.1f} jobs/s; rates {rates}"
    print(said, flush=True)
    print(said, file=sys.stderr, flush=True)
    runs: list[dict[str, Any]] = []
    for r, round_plan in enumerate(plan(arms, len(rates), args.rounds)):
        by_arm: dict[str, list[int]] = {}
        for arm, k in round_plan:
            by_arm.setdefault(arm, []).append(k)
        for arm, rate_order in by_arm.items():
            with slurm_for(cfg, arm):
                for k in rate_order:
                    run = run_one(cfg, arm, rates[k], args, seed_of(r, k), f"c{r}-{k}-{arm}")
                    record = lifecycle.describe(run)
                    record["round"] = r
                    runs.append(record)
                    lat = record["latency"] or {}
                    line = (
                        f"round {r} {arm} at {rates[k]}/s: {record['measured']} measured, "
                        f"p50 {lat.get('p50', float('nan')):.3f} p99 {lat.get('p99', float('nan')):.3f} s, "
                        f"slip max {record['slip_max']:.3f} s, window {record['window_s']:.0f} s"
                    )
                    if record["problems"]:
                        line += f"; problems: {'; '.join(record['problems'])[:300]}"
                    print(line, flush=True)
                    print(line, file=sys.stderr, flush=True)  # bench/record.py shows stdout at the end
    summary = summarize(runs)
    within = highest_within_slo(summary)
    print()
    print(table(summary, measured))
    bare_best = within.get(TRULY_BARE)
    print()
    for arm in arms:
        best = within.get(arm)
        share = f" ({best / bare_best:.2f} of truly bare's)" if best and bare_best else ""
        print(f"{arm}: highest rate within the SLO (p99 <= {SLO_FACTOR:g} x truly bare's): {best}{share}")
    result = {
        "capacity": round(measured, 2),
        "fractions": fractions,
        "rates": rates,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "warmup": args.warmup,
        "lifetime": args.lifetime,
        "summary": summary,
        "highest_within_slo": within,
        "highest_within_slo_vs_truly_bare": {
            arm: (round(best / bare_best, 3) if best and bare_best else None) for arm, best in within.items()
        },
        "runs": runs,
        "checks_failed": [
            f"round {r['round']} {r['arm']} at {r['rate']}/s: {p}" for r in runs for p in r["problems"]
        ],
    }
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
