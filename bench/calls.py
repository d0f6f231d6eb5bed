"""What one Tandem Pod costs in calls, over its whole life (issue 55): each service's reconciles by
controller, work-queue adds, slurmrestd calls by operation, Kubernetes API requests by verb and
resource (its own count, and the API server's by user), and hook calls by route.

CPU per Pod is noisy on two cores (bench/curve.py needs rounds and intervals to say anything); the
number of calls a Pod causes is nearly the same run after run, and it is what a design change
moves. So a change that claims fewer calls per Pod shows it here, and its CPU in bench/curve.py.

Each counter's idle rate (resyncs, polls, leases) is measured over a quiet window first and taken
away over the run's window, as bench/lifecycle.py does for CPU.

    NODES=64 make up && .venv/bin/python bench/calls.py --pods 200 --rate 5

Prints a table (per Pod, by service and counter) and then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import cpu, lifecycle, openloop
from bench.schedule import clean_tandem, ensure_namespace, wait_until_quiet
from devstack import audit, identities, stack
from devstack.config import StackConfig
from devstack.table import format_table

# The counters read, each with the label that names what was counted.
COUNTERS = {
    "tandem_reconcile_total": "controller",
    "tandem_workqueue_adds_total": "controller",
    "tandem_slurm_api_seconds_count": "operation",
    "tandem_kube_requests_total": "verb,resource",
    "tandem_hook_calls_total": "route",
}
SERVICE_PREFIX = "tandem-"
# Tandem's ServiceAccounts, as the API server's audit names them.
TANDEM_USERS = f"system:serviceaccount:{identities.MAIN.namespace}:"

Ledger = dict[tuple[str, str, str], float]  # (service, counter, what) -> count


def parse(service: str, text: str) -> Ledger:
    """One service's counters as a ledger."""
    found: Ledger = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            label = COUNTERS.get(s.name)
            if label is None:
                continue
            what = ",".join(str(s.labels.get(k, "")) for k in label.split(","))
            key = (service, s.name.removeprefix("tandem_"), what)
            found[key] = found.get(key, 0.0) + s.value
    return found


def sample(cfg: StackConfig) -> Ledger:
    """Every Tandem service's counters now (a service that does not answer counts nothing)."""
    ledger: Ledger = {}
    for group, urls in cpu.tandem_metrics(cfg).items():
        for url in urls:
            try:
                r = httpx.get(url, timeout=5)
                r.raise_for_status()
            except httpx.HTTPError:
                continue
            for key, value in parse(group.removeprefix(SERVICE_PREFIX), r.text).items():
                ledger[key] = ledger.get(key, 0.0) + value
    return ledger


def per_pod(
    before: Ledger, after: Ledger, idle: Mapping[tuple[str, str, str], float], window: float, pods: int
) -> dict[tuple[str, str, str], float]:
    """Each counter's rise over the run, less its idle rate over the window, per Pod."""
    keys = set(after) | set(before)
    return {
        k: (after.get(k, 0.0) - before.get(k, 0.0) - idle.get(k, 0.0) * window) / pods for k in sorted(keys)
    }


def rows(counts: Mapping[tuple[str, str, str], float], floor: float = 0.05) -> list[list[str]]:
    """The table: counters a Pod moved by at least `floor` (idle noise left out)."""
    return [[s, c, w, f"{v:.2f}"] for (s, c, w), v in counts.items() if abs(v) >= floor]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", type=int, default=200)
    p.add_argument("--rate", type=float, default=5.0, help="Poisson arrivals per second")
    p.add_argument("--lifetime", type=float, default=5.0, help="seconds each Pod lives once bound")
    p.add_argument("--quiet", type=float, default=20.0, help="seconds of the idle window")
    p.add_argument("--seed", type=int, default=55)
    args = p.parse_args(argv)
    cfg = StackConfig.from_env()
    stack.up(cfg)
    ensure_namespace(cfg)
    clean_tandem(cfg)
    wait_until_quiet(cfg, settle=1.0)

    idle_before = sample(cfg)
    time.sleep(args.quiet)
    idle_after = sample(cfg)
    idle = {k: (idle_after.get(k, 0.0) - idle_before.get(k, 0.0)) / args.quiet for k in idle_after}

    arrivals = openloop.poisson_arrivals(args.rate, args.pods / args.rate, args.seed)
    before = sample(cfg)
    started = time.time()
    sent, ran, problems, _ = lifecycle.pods(cfg, lifecycle.TANDEM, arrivals, args.lifetime, "calls")
    if not lifecycle.pods_gone(cfg, "calls-"):
        problems.append("Pods of the run still there after 120 s")
    wait_until_quiet(cfg, settle=0.0)
    ended = time.time()
    after = sample(cfg)
    n = len(sent) or 1
    counts = per_pod(before, after, idle, ended - started, n)
    api = audit.requests_by_user(cfg, started, ended)
    tandem_api = {
        u.removeprefix(TANDEM_USERS): c / n for u, c in sorted(api.items()) if u.startswith(TANDEM_USERS)
    }

    print(f"{n} Pods at {args.rate:g}/s, {len(ran)} bound, window {ended - started:.1f} s")
    print(format_table([["service", "counter", "of", "per Pod"], *rows(counts)]))
    by_user = [[u, f"{c:.2f}"] for u, c in tandem_api.items()]
    print(format_table([["user (API server's audit)", "requests per Pod"], *by_user]))
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    print(
        json.dumps(
            {
                "pods": n,
                "bound": len(ran),
                "rate": args.rate,
                "lifetime": args.lifetime,
                "window_s": round(ended - started, 2),
                "per_pod": {"/".join(k): round(v, 3) for k, v in counts.items()},
                "api_per_pod_by_apiserver": {u: round(c, 3) for u, c in tandem_api.items()},
                "problems": problems,
            }
        )
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
