"""What writing a placeholder's started marker costs the machine: the script's way (`timeout 10
scontrol update jobid=J extra=...: started`, run where slurmd runs it, inside the Slurm root) against
the syncer's (`POST job/{id}` through slurmrestd, issue 22).

    make up && .venv/bin/python bench/marker.py --writes 100

Writes the Extra field of one held job `--writes` times each way, twice, interleaved. CPU is counted
for the whole machine and for the processes involved: the writer (this benchmark, as the syncer would
be for REST), the processes it starts, slurmctld, slurmrestd and munged. Prints a table, then one
JSON line: {"writes", "scontrol_ms", "rest_ms", "ratio"}, machine CPU per write (the lower of the two
rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench import cpu
from bench.schedule import slurm_client
from devstack import config, slurm
from devstack.table import format_table

WATCHED = ("slurmctld", "slurmrestd", "munged")


def _children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measure(cfg: config.StackConfig, write: Callable[[], None], writes: int) -> dict[str, float]:
    """CPU milliseconds per write: the whole machine and each part."""
    daemons = {name: d for name, d in slurm.daemons(cfg).items() if name in WATCHED}
    before, children = cpu.sample(daemons), _children_seconds()
    started = time.monotonic()
    write()
    wall = time.monotonic() - started
    used = cpu.used_between(before, cpu.sample(daemons))
    per = 1000.0 / writes
    result = {name: used.get(name, 0.0) * per for name in WATCHED}
    result["writer"] = used["benchmark"] * per
    result["processes started"] = (_children_seconds() - children) * per
    result["whole machine"] = used["whole machine"] * per
    result["wall"] = wall * per
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--writes", type=int, default=100)
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    client = slurm_client(cfg)
    out = subprocess.run(
        ["sbatch", "--hold", "--parsable", "--output=/dev/null", "-J", "bench-marker"],
        input="#!/bin/sh\nsleep 60\n",
        env=slurm.slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    job = int(out.strip().split(";")[0])
    root = Path(slurm.root(cfg))
    # One shell in the root runs every write, as a job's script would: the chroot and the shell
    # are started once, not per write.
    write = f'timeout 10 scontrol update jobid={job} extra="s$i: started" || exit 1'
    loop = f"for i in $(seq {args.writes}); do {write}; done"

    def by_scontrol() -> None:
        env = {"SLURM_CONF": str(cfg.slurm_conf), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        subprocess.run(["chroot", str(root), "/bin/sh", "-c", loop], env=env, check=True)

    def by_rest() -> None:
        for i in range(args.writes):
            client.update_job(job, extra=f"r{i}: started")

    rounds: dict[str, list[dict[str, float]]] = {"scontrol": [], "rest": []}
    try:
        for _ in range(2):
            rounds["scontrol"].append(_measure(cfg, by_scontrol, args.writes))
            rounds["rest"].append(_measure(cfg, by_rest, args.writes))
    finally:
        subprocess.run(["scancel", str(job)], env=slurm.slurm_env(cfg), check=False)
        client.close()
    parts = ["whole machine", "writer", "processes started", *WATCHED, "wall"]
    rows = [["ms per write", *(f"{way} {n + 1}" for way in rounds for n in range(2))]]
    for part in parts:
        rows.append([part, *(f"{r[part]:.2f}" for way in rounds for r in rounds[way])])
    print(f"{args.writes} writes of one held job's Extra field, each way, twice\n")
    print(format_table(rows))
    best = {way: min(r["whole machine"] for r in rs) for way, rs in rounds.items()}
    ratio = best["scontrol"] / best["rest"] if best["rest"] > 0 else 0.0
    print(f"\nscontrol costs the machine {ratio:.1f}x what the REST call does")
    result = {
        "writes": args.writes,
        "scontrol_ms": round(best["scontrol"], 2),
        "rest_ms": round(best["rest"], 2),
        "ratio": round(ratio, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
