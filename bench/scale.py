"""Scale on four arms (issue 55): many Pods (or jobs) in waves, with plain Slurm jobs mixed in.

Each round is a wave for every arm, the arms interleaved (bench/arms.py): --wave at once, and
--jobs plain 2-second Slurm jobs beside them; its figure is the start rate (the wave's size over
the time from its first create or submit to its last start: a Pod bound, a job's script running),
then the wave goes and the stack is let go quiet before the next arm. Arms:
  truly-bare / bare - one-second jobs to slurmrestd (Slurm without / with Tandem's prolog);
  kube-scheduler    - Pods placed by kube-scheduler's default scheduler;
  tandem            - Pods placed by Tandem.
A wave with errors (a Pod or job not started in time, an API call refused, a plain job that did
not complete) is a failed trial. The run also gives the peak RSS (VmHWM) of Tandem's services,
kube-scheduler, the API server and slurmctld over it.

    NODES=64 make up && .venv/bin/python bench/scale.py --pods 3000

Prints a table, then one JSON line (bench/arms.result, with rss_mib per process).
Targets: 0 errors; RSS <= 200 MiB for the scheduler and the syncer.
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

from bench import arms, lifecycle
from bench.arms import TrialFailed
from bench.lifecycle import ARMS, SLURM_ARMS, TANDEM
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
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec

WATCHED = (
    "tandem-scheduler",
    "tandem-syncer",
    "tandem-hooks",
    "kube-scheduler",
    "kube-apiserver",
    "slurmctld",
)


def peak_rss_mib(pid: int) -> float:
    """From /proc for Tandem's services too: their /metrics shows the current RSS
    (process_resident_memory_bytes) but not its peak, and VmHWM has no process_* equivalent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Wave:
    """A wave of Pods placed by `scheduler` (Tandem's unless named), created at once."""

    def __init__(
        self, cfg: StackConfig, raw: KubeClient, index: int, size: int, scheduler: str | None = None
    ) -> None:
        self.cfg, self.raw, self.index, self.size = cfg, raw, index, size
        self.scheduler = scheduler or cfg.scheduler_name
        tag = "t" if self.scheduler == cfg.scheduler_name else "k"
        self.names = [f"scale-{tag}{index}-{i}" for i in range(size)]
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
            self.raw.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_manifest(name, self.scheduler))
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

    def __init__(self, cfg: StackConfig, wave: int, count: int, arm: str = "") -> None:
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
            self.slurm.submit_job(replace(spec, name=f"scale-plain-{arm}{wave}-{i}")) for i in range(count)
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
    parser.add_argument("--pods", type=int, default=3_000, help="Pods (or jobs) per arm in all")
    parser.add_argument("--wave", type=int, default=500, help="per wave (at most the stack's CPUs)")
    parser.add_argument("--jobs", type=int, default=20, help="plain Slurm jobs mixed into each wave")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a wave may take to start")
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args()
    chosen = [a for a in args.arms.split(",") if a]
    if unknown := set(chosen) - set(ARMS):
        raise SystemExit(f"no arm {', '.join(sorted(unknown))}; the arms are {', '.join(ARMS)}")
    cfg = StackConfig.from_env()
    stack.up(cfg)
    waves = -(-args.pods // args.wave)
    print(
        f"stack: {cfg.nodes} nodes; {waves} waves of {args.wave} per arm, {args.jobs} plain jobs each",
        flush=True,
    )
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    clean_tandem(cfg)
    wait_until_quiet(cfg, timeout=900)

    def wave(arm: str) -> arms.Trial:
        def run(r: int) -> dict[str, float]:
            size = min(args.wave, args.pods - r * args.wave)
            plain = PlainJobs(cfg, r, args.jobs, arm)
            if arm in SLURM_ARMS:
                rate, errors = job_wave(cfg, r, size, arm)
            else:
                scheduler = cfg.scheduler_name if arm == TANDEM else "default-scheduler"
                pods = Wave(cfg, raw, r, size, scheduler)
                _, rate = pods.run(args.timeout)
                clean_tandem(cfg)
                errors = pods.errors
            errors += plain.problems()
            wait_until_quiet(cfg, timeout=900, settle=1.0)
            if errors:
                raise TrialFailed(f"{len(errors)} errors: {'; '.join(errors[:5])}")
            return {"rate": rate}

        return run

    rows = {f"waves of {args.wave}, {args.jobs} plain jobs in each": {arm: wave(arm) for arm in chosen}}
    tried = arms.run(cfg, chosen, waves, rows, lambda line: print(line, flush=True))
    daemons = stack.all_daemons(cfg)
    rss = {name: round(peak_rss_mib(pid), 1) for name in WATCHED if (pid := daemons[name].pid()) is not None}
    raw.close()
    shown = ", ".join(f"{n} {v:.0f}" for n, v in rss.items())
    about = f"{cfg.nodes} nodes; peak RSS over the run (VmHWM, MiB): {shown}"
    result = arms.result(tried, FIGURES, waves, about=about, rss_mib=rss, wave=args.wave)
    print()
    print(arms.text_table(result))
    print(about)
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


FIGURES = (("rate", "started /s (a job's script, a Pod bound)"),)


def job_wave(cfg: StackConfig, index: int, size: int, arm: str) -> tuple[float, list[str]]:
    """A wave of `size` one-second jobs submitted at once: their start rate, and what failed."""
    slurm = slurm_client(cfg)
    try:
        sent, ran, problems = lifecycle.slurm_jobs(cfg, slurm, [0.0] * size, 1.0, f"scale-{arm}-{index}")
    finally:
        slurm.close()
    if not ran or not sent:
        return 0.0, [*problems, "no job ran"]
    first = min(s.intended for s in sent)
    return len(ran) / max(1e-6, max(ran.values()) - first), problems


if __name__ == "__main__":
    main()
