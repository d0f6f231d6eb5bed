"""A burst on four arms (issue 55): N jobs or Pods all meant for one instant, each living a few
seconds once it runs and then going, in one run on one stack, the arms interleaved round by round
(bench/arms.py).

    truly-bare      N jobs to slurmrestd, Slurm without Tandem's prolog and epilog
    bare            the same N jobs in a Tandem cluster
    kube-scheduler  N Pods placed by kube-scheduler's default scheduler
    tandem          N Pods placed by Tandem

Each trial is one open-loop run whose arrivals are all at its start (bench/curve.run_arrivals,
bench/lifecycle.py): latency from that one intended instant to each one running (a script started,
a Pod bound), so a send that lags is in it; the start rate is N over the time from that instant to
the last start; CPU over the whole window (create to gone, teardown included) minus each
process's idle rate measured just before, per Pod; API requests per Pod as the API server's audit
log counts them, by the arm's scheduler. A trial that fails a check (a Pod never bound or bound
twice or off its job's node, a node left locked) is a failed trial.

    NODES=64 make up && .venv/bin/python bench/burst.py --n 200 --rounds 5

Prints a table, then one JSON line (bench/arms.result).
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import arms, curve, lifecycle
from bench.arms import TrialFailed
from bench.lifecycle import ARMS, KUBE_SCHEDULER, TANDEM
from bench.schedule import clean_tandem, ensure_namespace, wait_until_quiet
from devstack import stack
from devstack.config import StackConfig

FIGURES = (
    ("rate", "started /s"),
    ("p50", "p50 s"),
    ("p99", "p99 s"),
    ("max", "max s"),
    ("tandem_cpu", "Tandem's services CPU ms/Pod"),
    ("kube_scheduler_cpu", "kube-scheduler CPU ms/Pod"),
    ("machine_cpu", "whole machine CPU ms/Pod"),
    ("api", "API requests/Pod"),
)
# The API requests an arm's Pods cost: those of the scheduler that placed them.
API_OF = {TANDEM: "tandem_api", KUBE_SCHEDULER: "kube_scheduler_api"}


def figures(arm: str, run: lifecycle.ArmRun) -> dict[str, float]:
    """A trial's figures from its run; a run that failed a check is a failed trial."""
    if run.problems:
        raise TrialFailed("; ".join(run.problems)[:500])
    if not run.ran or not run.sent:
        raise TrialFailed("nothing ran")
    record = lifecycle.describe(run)
    first = min(s.intended for s in run.sent)
    out = {"rate": len(run.ran) / max(1e-9, max(run.ran.values()) - first)}
    for name in ("p50", "p99", "max", "tandem_cpu", "kube_scheduler_cpu", "machine_cpu"):
        if (value := curve.pick(record, name)) is not None:
            out[name] = value
    if arm in API_OF:
        out["api"] = curve.pick(record, API_OF[arm]) or 0.0
    return out


def trial(cfg: StackConfig, arm: str, n: int, args: argparse.Namespace) -> arms.Trial:
    def run(r: int) -> dict[str, float]:
        return figures(arm, curve.run_arrivals(cfg, arm, 0.0, [0.0] * n, args, f"b{r}-{n}-{arm}"))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", default="200", help="burst sizes, comma-separated: a row each")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of every arm")
    parser.add_argument("--lifetime", type=float, default=5.0, help="seconds each job or Pod runs")
    parser.add_argument("--quiet", type=float, default=6.0, help="seconds of idle measured before each trial")
    parser.add_argument(
        "--tail", type=float, default=5.0, help="seconds the window stays open after the last lifetime"
    )
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args()
    args.warmup = 0.0  # every arrival is measured: a burst has no steady state to wait for
    chosen = [a for a in args.arms.split(",") if a]
    if unknown := set(chosen) - set(ARMS):
        raise SystemExit(f"no arm {', '.join(sorted(unknown))}; the arms are {', '.join(ARMS)}")
    sizes = [int(n) for n in args.n.split(",") if n]
    cfg = StackConfig.from_env()
    stack.up(cfg)
    ensure_namespace(cfg)
    clean_tandem(cfg)
    wait_until_quiet(cfg)
    if drained := curve.drained_nodes(cfg):
        raise SystemExit(f"nodes drained before the run: {', '.join(sorted(drained))}")
    rows = {f"{n} at once": {arm: trial(cfg, arm, n, args) for arm in chosen} for n in sizes}

    def say(line: str) -> None:
        print(line, flush=True)
        print(line, file=sys.stderr, flush=True)  # bench/record.py shows stdout at the end

    tried = arms.run(cfg, chosen, args.rounds, rows, say)
    about = f"{cfg.nodes} nodes, each job or Pod living {args.lifetime:g} s once it runs"
    result = arms.result(tried, FIGURES, args.rounds, about=about, lifetime=args.lifetime)
    print()
    print(arms.text_table(result))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
