"""Where a Pod's time goes: the path through Tandem stage by stage, against the matching stages of
a bare Slurm job, at one offered load, on one stack, in one run.

Tandem's three services export their traces to a collector in this process for the run (they are
restarted with tracing on, and without it after); a bare job's prolog calls the same hooks, whose
span names its job. Each Pod's stages, from its trace (wall clock; one machine):

    created                 the benchmark's POST of the Pod
    submit begins           the scheduler's "submit placeholder job" span starts: the Pod was
                            seen on the watch, queued, validated and judged
    submitted               slurmrestd answered the submit (its client span ends)
    prolog calls            the prolog's lock call reaches the hooks (Slurm scheduled and
                            allocated the job and started its prolog)
    lock held               the syncer answered that call: the Node is locked
    script's started call   the placeholder script's `started` call reaches the hooks
    bind begins             the scheduler's "bind pod" span starts (the syncer told it)
    bound                   the binding written
    Running                 the Pod's phase Running, seen on the watch (kwok's kubelet)

A bare job (a script that writes the time, submitted to slurmrestd): submit begins, submitted,
prolog calls, lock held, script started. The matching rows stand side by side.

    make up && .venv/bin/python bench/latency.py --rate 4 --seconds 15
    NODES=64 make up && .venv/bin/python bench/latency.py --rate 11 --seconds 30

Prints a table of p50/p99 per stage, then one JSON line: {"stages": [{"stage", "bare_p50",
"bare_p99", "tandem_p50", "tandem_p99"}, ...], "total": {...}, "pods": n, "jobs": n}.
Tracing costs CPU of its own: the totals here run a little above bench/schedule.py's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import otlp
from bench.otlp import ExportedSpan
from bench.schedule import (
    NAMESPACE,
    clean_tandem,
    ensure_namespace,
    offer,
    pod_manifest,
    slurm_client,
    wait_for_no_jobs,
    wait_until_quiet,
)
from bench.stats import percentile
from devstack import config
from devstack.config import StackConfig
from devstack.table import format_table
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec

PREFIX = "lat"
# (stage, the mark it starts at, the mark it ends at); a bare job has the marks it shares.
TANDEM_STAGES = (
    ("created -> submit begins (watch, queue, decide)", "created", "submit begins"),
    ("submit to slurmrestd", "submit begins", "submitted"),
    (
        "submitted -> prolog calls (Slurm schedules, allocates, starts the prolog)",
        "submitted",
        "prolog calls",
    ),
    ("prolog lock", "prolog calls", "lock held"),
    ("lock held -> script started", "lock held", "script started"),
    ("script started -> bind begins (syncer, stream, queue)", "script started", "bind begins"),
    ("bind", "bind begins", "bound"),
    ("bound -> Running (kubelet)", "bound", "Running"),
)
TOTAL = ("total: created -> bound (bare: submit -> script started)", "created", "bound")


@dataclass
class Marks:
    """When each stage of one Pod (or one bare job) was reached, in wall-clock seconds."""

    at: dict[str, float] = field(default_factory=dict)

    def between(self, start: str, end: str) -> float | None:
        if start in self.at and end in self.at:
            return self.at[end] - self.at[start]
        return None


def tandem_marks(
    spans: Sequence[ExportedSpan], created: dict[str, float], running: dict[str, float]
) -> list[Marks]:
    """Each Pod's marks, from its trace (the submit span is its root; every hop joins it)."""
    by_trace: dict[str, list[ExportedSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    found = []
    for trace in by_trace.values():
        root = next((s for s in trace if s.name == "submit placeholder job"), None)
        pod = root.attributes.get("k8s.pod", "") if root is not None else ""
        name = pod.partition("/")[2]
        if root is None or name not in created:
            continue
        marks = Marks({"created": created[name], "submit begins": root.start})
        rest = [s for s in trace if s.parent_id == root.span_id and s.name.startswith("slurmrestd POST")]
        marks.at["submitted"] = rest[0].end if rest else root.end
        first = {
            n: min((s for s in trace if s.name == n), key=lambda s: s.start, default=None) for n in _HOPS
        }
        if (lock := first["POST /v1/lock"]) is not None:
            marks.at["prolog calls"], marks.at["lock held"] = lock.start, lock.end
        if (started := first["POST /v1/started"]) is not None:
            marks.at["script started"] = started.start
        if (bind := first["bind pod"]) is not None:
            marks.at["bind begins"], marks.at["bound"] = bind.start, bind.end
        if name in running:
            marks.at["Running"] = running[name]
        found.append(marks)
    return found


_HOPS = ("POST /v1/lock", "POST /v1/started", "bind pod")


def bare_marks(
    spans: Sequence[ExportedSpan], jobs: dict[int, tuple[float, float]], started: dict[int, float]
) -> list[Marks]:
    """Each bare job's marks: its submit (the benchmark's clock), its prolog's lock call (the hooks'
    span names the job), its script's own timestamp."""
    locks: dict[int, ExportedSpan] = {}
    for s in spans:
        job = s.attributes.get("slurm.job_id", "")
        if s.name == "POST /v1/lock" and job.isdigit() and int(job) in jobs:
            locks.setdefault(int(job), s)
    found = []
    for job_id, (begun, answered) in jobs.items():
        # Named as Tandem's marks, so the shared rows line up ("created" is the submit's start).
        marks = Marks({"created": begun, "submit begins": begun, "submitted": answered})
        if (lock := locks.get(job_id)) is not None:
            marks.at["prolog calls"], marks.at["lock held"] = lock.start, lock.end
        if job_id in started:
            marks.at["script started"] = marks.at["bound"] = started[job_id]
        found.append(marks)
    return found


def run_bare(
    cfg: StackConfig, n: int, rate: float
) -> tuple[dict[int, tuple[float, float]], dict[int, float]]:
    slurm = slurm_client(cfg)
    marks = Path(tempfile.mkdtemp(prefix="tandem-latency-", dir=cfg.state_dir))
    marks.chmod(0o777)
    script = f"#!/bin/bash\ndate +%s.%N > {marks}/$SLURM_JOB_ID\nsleep 3600 &\nwait\n"
    submitted: dict[int, tuple[float, float]] = {}
    lock = threading.Lock()

    def submit(i: int) -> None:
        spec = JobSpec(
            name=f"bench-bare-{i}",
            script=script,
            environment={"PATH": "/usr/bin:/bin"},
            cpus=1,
            memory_mb=100,
        )
        begun = time.time()
        job_id = slurm.submit_job(spec)
        with lock:
            submitted[job_id] = (begun, time.time())

    offer(n, submit, 8, rate)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(marks.iterdir())) < n:
        time.sleep(0.1)
    started = {int(p.name): float(p.read_text() or 0) for p in marks.iterdir() if p.read_text().strip()}
    shutil.rmtree(marks, ignore_errors=True)
    for job_id in submitted:
        slurm.cancel_job(job_id, signal="KILL")
    wait_for_no_jobs(slurm, "bench-bare-")
    slurm.close()
    return submitted, started


def run_tandem(cfg: StackConfig, n: int, rate: float) -> tuple[dict[str, float], dict[str, float]]:
    """Creates n Pods at `rate`; returns when each was created and when each was seen Running."""
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    done = threading.Event()

    def watch(version: str) -> None:
        try:
            for event in raw.watch(pods, {"resourceVersion": version}, 300):
                obj = event.get("object") or {}
                name = str((obj.get("metadata") or {}).get("name") or "")
                if name.startswith(f"{PREFIX}-") and (obj.get("status") or {}).get("phase") == "Running":
                    running.setdefault(name, time.time())
                    if len(running) >= n:
                        done.set()
                        return
        except (KubeError, httpx.HTTPError) as e:
            print(f"watch: {e}", flush=True)
            done.set()

    threading.Thread(target=watch, args=(raw.get(pods)["metadata"]["resourceVersion"],), daemon=True).start()

    def create(i: int) -> None:
        name = f"{PREFIX}-{i}"
        begun = time.time()
        raw.post(pods, pod_manifest(name, cfg.scheduler_name))
        created[name] = begun

    offer(n, create, 8, rate)
    if not done.wait(300):
        print(f"only {len(running)} of {n} Pods Running after 300 s", flush=True)
    raw.close()
    return created, running


def table(bare: list[Marks], tandem: list[Marks]) -> tuple[list[list[str]], list[dict[str, Any]]]:
    rows, results = [], []
    for stage, start, end in (*TANDEM_STAGES, TOTAL):
        b = [d for m in bare if (d := m.between(start, end)) is not None]
        t = [d for m in tandem if (d := m.between(start, end)) is not None]
        if stage.startswith("created -> submit"):
            b = []  # a bare job has no Pod to watch for
        result: dict[str, Any] = {"stage": stage}
        cells = [stage]
        for who, values in (("bare", b), ("tandem", t)):
            p50 = round(percentile(values, 0.5), 3) if values else None
            p99 = round(percentile(values, 0.99), 3) if values else None
            result[f"{who}_p50"], result[f"{who}_p99"] = p50, p99
            cells += [f"{p50:.3f}" if p50 is not None else "-", f"{p99:.3f}" if p99 is not None else "-"]
        rows.append(cells)
        results.append(result)
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=4.0, help="jobs, then Pods, offered per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each is offered")
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    n = max(1, int(args.rate * args.seconds))
    with otlp.tracing_to_memory(cfg) as sink:
        wait_until_quiet(cfg)
        jobs, script_started = run_bare(cfg, n, args.rate)
        wait_until_quiet(cfg)
        created, running = run_tandem(cfg, n, args.rate)
        time.sleep(3)  # the services export in batches, a second apart
        spans = sink.snapshot()
        clean_tandem(cfg)
    bare = bare_marks(spans, jobs, script_started)
    tandem = tandem_marks(spans, created, running)
    rows, results = table(bare, tandem)
    print(f"{n} bare jobs and {n} Pods at {args.rate}/s on {cfg.nodes} nodes\n")
    print(format_table([["stage", "bare p50 s", "bare p99 s", "Tandem p50 s", "Tandem p99 s"], *rows]))
    print(json.dumps({"stages": results[:-1], "total": results[-1], "pods": len(tandem), "jobs": len(bare)}))


if __name__ == "__main__":
    main()
