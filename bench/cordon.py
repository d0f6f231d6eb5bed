"""Cordon -> drain latency: how long after `kubectl cordon` Slurm holds the node drained.

    make up && .venv/bin/python bench/cordon.py --times 20

Cordons one Node at a time (round robin over the Slurm nodes), watches slurmrestd until the Slurm
node is drained with the `k8s:` reason, uncordons and waits for the resume. Prints a table, then
one JSON line: {"cordons", "p50", "p99", "max"} in seconds. Target: p99 < 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.schedule import slurm_client
from bench.stats import percentile
from devstack import config
from devstack.table import format_table
from tandem.kube import KubeClient
from tandem.slurm.rest import SlurmRestClient


def _drained(slurm: SlurmRestClient, name: str) -> bool:
    for node in slurm.list_nodes() or []:
        if node.name == name:
            return bool(node.drained and node.reason.startswith("k8s: Node "))
    return False


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--times", type=int, default=20)
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    slurm = slurm_client(cfg)
    names = cfg.slurm_node_names()
    latencies: list[float] = []
    for i in range(args.times):
        slurm_node = names[i % len(names)]
        kube_node = config.kube_node_name(names.index(slurm_node))
        began = time.monotonic()
        raw.merge_patch(f"/api/v1/nodes/{kube_node}", {"spec": {"unschedulable": True}})
        while not _drained(slurm, slurm_node):
            if time.monotonic() - began > 30:
                raise SystemExit(f"{slurm_node} not drained 30 s after {kube_node} was cordoned")
            time.sleep(0.01)
        latencies.append(time.monotonic() - began)
        raw.merge_patch(f"/api/v1/nodes/{kube_node}", {"spec": {"unschedulable": None}})
        while _drained(slurm, slurm_node):
            time.sleep(0.05)
    slurm.close()
    raw.close()
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(
        format_table(
            [
                ["cordons", "p50 s", "p99 s", "max s"],
                [str(len(latencies)), f"{p50:.3f}", f"{p99:.3f}", f"{max(latencies):.3f}"],
            ]
        )
    )
    print(
        json.dumps(
            {
                "cordons": len(latencies),
                "p50": round(p50, 3),
                "p99": round(p99, 3),
                "max": round(max(latencies), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
