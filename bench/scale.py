"""Scale: many Pods through Tandem on many nodes, in waves, with plain Slurm jobs mixed in.

Each wave creates --wave Pods and submits --jobs plain Slurm jobs, waits until every Pod is bound,
then deletes the Pods and waits for their jobs to go. It prints each wave's rate as it goes, then
the peak RSS (VmHWM) of Tandem's services, the API server and slurmctld, and the errors: Pods not
bound in time, API calls refused, plain jobs that did not complete.

    NODES=1000 make up && .venv/bin/python bench/scale.py --pods 10000 --rate-64 19.0

Last line, JSON: pods, errors, rate (Pods bound per second over all waves), rate_64 (the 64-node
rate passed with --rate-64, for comparison; null without), rate_vs_64, rss_mib (per process).
Targets: 0 errors; RSS <= 200 MiB for the scheduler and the syncer; rate >= 0.9 x rate_64.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from bench.schedule import (
    NAMESPACE,
    clean_tandem,
    ensure_namespace,
    pod_manifest,
    slurm_client,
    wait_until_quiet,
)
from devstack import stack
from devstack.config import StackConfig
from devstack.table import format_table
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec

WATCHED = ("tandem-scheduler", "tandem-syncer", "tandem-hooks", "kube-apiserver", "slurmctld")


def peak_rss_mib(pid: int) -> float:
    """From /proc for Tandem's services too: their /metrics shows the current RSS
    (process_resident_memory_bytes) but not its peak, and VmHWM has no process_* equivalent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Wave:
    def __init__(self, cfg: StackConfig, raw: KubeClient, index: int, size: int) -> None:
        self.cfg, self.raw, self.index, self.size = cfg, raw, index, size
        self.names = [f"scale-{index}-{i}" for i in range(size)]
        self.bound: dict[str, float] = {}
        self.errors: list[str] = []
        self.expected = size
        self._done = threading.Event()

    def run(self, timeout: float) -> tuple[float, float]:
        """Create, wait until bound; returns (seconds from first create to last bind, rate)."""
        version = self.raw.get(f"/api/v1/namespaces/{NAMESPACE}/pods", {"limit": "1"})["metadata"][
            "resourceVersion"
        ]
        watcher = threading.Thread(target=self._watch, args=(version, timeout), daemon=True)
        watcher.start()
        first = time.time()
        with ThreadPoolExecutor(8) as pool:
            created = sum(pool.map(self._create, self.names))
        self.expected = created  # those that failed will never be bound: do not wait for them
        if len(self.bound) >= created:
            self._done.set()
        if not self._done.wait(timeout):
            self.errors.append(
                f"wave {self.index}: {self.size - len(self.bound)} Pods not bound in {timeout:.0f}s"
            )
        last = max(self.bound.values()) if self.bound else time.time()
        took = max(last - first, 1e-6)
        return took, len(self.bound) / took

    def _create(self, name: str) -> bool:
        try:
            self.raw.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_manifest(name, self.cfg.scheduler_name))
        except KubeError as e:
            self.errors.append(f"create {name}: {e}")
            return False
        return True

    def _watch(self, version: str, timeout: float) -> None:
        wanted = set(self.names)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._done.is_set():
            try:
                for event in self.raw.watch(
                    f"/api/v1/namespaces/{NAMESPACE}/pods", {"resourceVersion": version}, 60
                ):
                    obj = event.get("object") or {}
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion", version))
                    name = meta.get("name")
                    if name in wanted and (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
                        self.bound[name] = time.time()
                        if len(self.bound) >= self.expected:
                            self._done.set()
                            return
            except KubeError as e:
                self.errors.append(f"watch: {e}")
                return


class PlainJobs:
    """Plain Slurm jobs (2 s each) submitted beside a wave, watched while it runs: slurmctld
    forgets a finished job after MinJobAge, so its end is caught as it happens."""

    def __init__(self, cfg: StackConfig, wave: int, count: int) -> None:
        self.slurm = slurm_client(cfg)
        self.final: dict[int, str] = {}
        spec = JobSpec(
            name="",
            script="#!/bin/bash\nsleep 2\n",
            environment={"PATH": "/usr/bin:/bin"},
            cpus=1,
            memory_mb=100,
        )
        self.ids = [
            self.slurm.submit_job(replace(spec, name=f"scale-plain-{wave}-{i}")) for i in range(count)
        ]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(2.0) and len(self.final) < len(self.ids):
            for job in self.slurm.list_jobs() or []:
                if job.job_id in self.ids and job.finished:
                    self.final.setdefault(job.job_id, job.state)

    def problems(self, timeout: float = 120.0) -> list[str]:
        """Jobs that did not complete (waiting up to `timeout` for the last to end)."""
        self._thread.join(timeout)
        self._stop.set()
        self.slurm.close()
        return [
            f"plain job {j}: {self.final.get(j, 'not seen ending')}"
            for j in self.ids
            if self.final.get(j) != "COMPLETED"
        ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=10_000, help="Pods in all")
    parser.add_argument("--wave", type=int, default=500, help="Pods per wave (at most the stack's CPUs)")
    parser.add_argument("--jobs", type=int, default=20, help="plain Slurm jobs per wave")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a wave may take to bind")
    parser.add_argument("--rate-64", type=float, help="Pods/s of a 64-node run, to compare with")
    args = parser.parse_args()
    cfg = StackConfig.from_env()
    stack.up(cfg)
    print(
        f"stack: {cfg.nodes} nodes; {args.pods} Pods in waves of {args.wave}, {args.jobs} plain jobs each",
        flush=True,
    )
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    clean_tandem(cfg)
    wait_until_quiet(cfg, timeout=900)
    rows: list[tuple[str, ...]] = [("wave", "Pods bound", "seconds", "Pods/s", "errors")]
    errors: list[str] = []
    bound = 0
    busy = 0.0
    index = 0
    while bound < args.pods and index * args.wave < args.pods:
        size = min(args.wave, args.pods - index * args.wave)
        jobs = PlainJobs(cfg, index, args.jobs)
        wave = Wave(cfg, raw, index, size)
        took, rate = wave.run(args.timeout)
        clean_tandem(cfg)
        wave.errors += jobs.problems()
        errors += wave.errors
        bound += len(wave.bound)
        busy += took
        rows.append((str(index), str(len(wave.bound)), f"{took:.1f}", f"{rate:.1f}", str(len(wave.errors))))
        print(format_table(rows[:1] + rows[-1:]).splitlines()[-1], flush=True)
        index += 1
    daemons = stack.all_daemons(cfg)
    rss = {name: round(peak_rss_mib(pid), 1) for name in WATCHED if (pid := daemons[name].pid()) is not None}
    raw.close()
    print()
    print(format_table(rows))
    print()
    print(format_table([("peak RSS (VmHWM)", "MiB"), *((n, f"{v:.1f}") for n, v in rss.items())]))
    for e in errors[:20]:
        print(f"error: {e}")
    rate = bound / busy if busy else 0.0
    result = {
        "nodes": cfg.nodes,
        "pods": bound,
        "errors": len(errors),
        "rate": round(rate, 2),
        "rate_64": args.rate_64,
        "rate_vs_64": round(rate / args.rate_64, 3) if args.rate_64 else None,
        "rss_mib": rss,
    }
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
