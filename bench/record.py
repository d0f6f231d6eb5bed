"""Run a benchmark and keep its result: the last line it prints (its JSON) goes into
bench/results/<name>.jsonl with what it ran, on what, from which commit, and when. BENCHMARKS.md
is written from those files (bench/report.py), so every figure it shows names its run.

    .venv/bin/python bench/record.py --name burst -- .venv/bin/python bench/schedule.py --n 200

`--label` tells runs of the same benchmark apart (`before`, `after`); the stack's node count is
read from the running stack, and the releases and the code its services ran (bench/manifest.py)
are kept beside the figures. A benchmark that fails or prints no JSON records nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """What the figures were measured on: they are only comparable on the same."""
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def commit(cwd: Path) -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_manifest() -> dict[str, Any]:
    """The releases and the code the lab's services ran, read once the run is over (a benchmark
    may restart them); what kept it from being read, without a stack."""
    from bench import manifest
    from devstack.config import StackConfig

    try:
        return manifest.of(StackConfig.from_env())
    except Exception as e:  # a record without a manifest still names its commit and machine
        return {"error": f"{type(e).__name__}: {e}"}


def last_json(output: str) -> dict[str, Any] | None:
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                found = json.loads(line)
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--name", required=True, help="which figure this is: burst, half-load, scale-64, ...")
    parser.add_argument("--label", default="", help="tells runs apart: before, after, ...")
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="the checkout whose code ran")
    parser.add_argument(
        "--nodes", type=int, default=int(os.environ.get("NODES", "0")), help="the stack's nodes"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the benchmark, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("give the benchmark to run after --")
    ran = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    sys.stdout.write(ran.stdout)
    result = last_json(ran.stdout)
    if ran.returncode != 0 or result is None:
        raise SystemExit(f"{' '.join(command)} ended {ran.returncode} with no JSON line: nothing recorded")
    record = {
        "name": args.name,
        "label": args.label,
        "nodes": args.nodes,
        "command": command,
        "commit": commit(args.tree),
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "manifest": run_manifest(),
        "result": result,
    }
    if result.get("checks_failed"):
        # Kept, so that a failing run is seen, and shown as failed (bench/report.py).
        print(f"the run failed its checks: {'; '.join(map(str, result['checks_failed']))}")
    args.results.mkdir(parents=True, exist_ok=True)
    with (args.results / f"{args.name}.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"recorded in {args.results / (args.name + '.jsonl')}")


if __name__ == "__main__":
    main()
