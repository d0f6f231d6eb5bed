"""Schedule throughput and latency: bare Slurm against Tandem, on the same stack, in one run.

(a) bare Slurm: N placeholder-like jobs straight to slurmrestd; a job counts as running when its
    script starts (it writes the time). Rate = N / (last start - first submit).
(b) Tandem: N Pods; a Pod counts when it is bound (spec.nodeName seen on the watch).

    NODES=64 make up && .venv/bin/python bench/schedule.py --n 200

Prints a table, then one JSON line: bare_rate, tandem_rate, rate_ratio, bare_p50, bare_p99,
tandem_p50, tandem_p99 (seconds). Targets: rate_ratio >= 0.9, tandem_p50 <= bare_p50 + 0.15 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bench import cpu
from devstack import kube, services, stack
from devstack.config import StackConfig
from devstack.table import format_table
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmRestClient
from tandem.v1 import lock_pb2, syncer_pb2, syncer_pb2_grpc

NAMESPACE = "bench"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def slurm_client(cfg: StackConfig) -> SlurmRestClient:
    return SlurmRestClient.from_settings(cfg.slurmrestd_url, "root", "", str(cfg.slurm_dir / "jwt_hs256.key"))


def wait_for_no_jobs(slurm: SlurmRestClient, prefix: str, timeout: float = 120.0) -> None:
    """Until no job of this benchmark phase (named `prefix`...) is left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = slurm.list_jobs() or []
        if not [j for j in jobs if not j.finished and j.name.startswith(prefix)]:
            return
        time.sleep(0.5)
    raise SystemExit("jobs from an earlier phase are still there; is the stack healthy?")


def wait_until_quiet(cfg: StackConfig, timeout: float = 180.0, settle: float = 5.0) -> float:
    """Until every Slurm node is idle and every Node unlocked, then `settle` more seconds: the
    teardown of one phase (200 cancels, epilogs, unlocks) must not be measured as the next one's.
    Returns the seconds waited."""
    started = time.monotonic()
    slurm = slurm_client(cfg)
    channel = grpc.insecure_channel(services.grpc_addresses(cfg)["tandem-syncer"])
    syncer = syncer_pb2_grpc.SyncerServiceStub(channel)
    try:
        while time.monotonic() - started < timeout:
            nodes = slurm.list_nodes() or []
            locks = syncer.ListNodeLocks(syncer_pb2.ListNodeLocksRequest(), timeout=10).locks
            if not any(n.busy for n in nodes) and all(lk.state == lock_pb2.LOCK_STATE_FALSE for lk in locks):
                break
            time.sleep(0.5)
        else:
            raise SystemExit("the stack did not go quiet between phases; is it healthy?")
    finally:
        slurm.close()
        channel.close()
    time.sleep(settle)
    return time.monotonic() - started


Phase = tuple[float, list[float], dict[str, float]]  # rate, latencies, CPU seconds by process


def bare_slurm(cfg: StackConfig, n: int, parallel: int) -> Phase:
    slurm = slurm_client(cfg)
    marks = Path(tempfile.mkdtemp(prefix="tandem-bench-", dir=cfg.state_dir))
    marks.chmod(0o777)
    script = f"#!/bin/bash\ndate +%s.%N > {marks}/$SLURM_JOB_ID\nsleep 3600 &\nwait\n"
    submitted: dict[int, float] = {}
    lock = threading.Lock()

    def submit(i: int) -> None:
        spec = JobSpec(
            name=f"bench-bare-{i}",
            script=script,
            environment={"PATH": "/usr/bin:/bin"},
            cpus=1,
            memory_mb=100,
        )
        t = time.time()
        job_id = slurm.submit_job(spec)
        with lock:
            submitted[job_id] = t

    cpu_before = cpu.sample(stack.all_daemons(cfg))
    first = time.time()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(submit, range(n)))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(list(marks.iterdir())) < n:
        time.sleep(0.1)
    cpu_used = cpu.used_between(cpu_before, cpu.sample(stack.all_daemons(cfg)))
    started = {int(p.name): float(p.read_text() or 0) for p in marks.iterdir() if p.read_text().strip()}
    shutil.rmtree(marks, ignore_errors=True)
    latencies = [started[j] - t for j, t in submitted.items() if j in started]
    last = max(started.values()) if started else time.time()
    for job_id in submitted:
        slurm.cancel_job(job_id, signal="KILL")
    wait_for_no_jobs(slurm, "bench-bare-")
    slurm.close()
    return len(latencies) / (last - first), latencies, cpu_used


def tandem(cfg: StackConfig, n: int, parallel: int) -> Phase:
    core = k8s.CoreV1Api(kube.api(cfg))
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as e:
        if e.status != 409:
            raise
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = threading.Event()
    version = raw.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["metadata"]["resourceVersion"]

    def watch() -> None:
        while not done.is_set():
            for event in raw.watch(f"/api/v1/namespaces/{NAMESPACE}/pods", {"resourceVersion": version}, 60):
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if name and (obj.get("spec") or {}).get("nodeName") and name not in bound:
                    bound[name] = time.time()
                    if len(bound) >= n:
                        done.set()
                        return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def pod(i: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"bench-{i}", "namespace": NAMESPACE},
            "spec": {
                "schedulerName": cfg.scheduler_name,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "memory": "100Mi"}},
                    }
                ],
            },
        }

    def create(i: int) -> None:
        t = time.time()
        raw.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod(i))
        created[f"bench-{i}"] = t

    cpu_before = cpu.sample(stack.all_daemons(cfg))
    first = time.time()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(create, range(n)))
    done.wait(600)
    cpu_used = cpu.used_between(cpu_before, cpu.sample(stack.all_daemons(cfg)))
    latencies = [bound[name] - t for name, t in created.items() if name in bound]
    last = max(bound.values()) if bound else time.time()
    raw.close()
    return len(latencies) / (last - first), latencies, cpu_used


def clean_tandem(cfg: StackConfig) -> None:
    """Delete this benchmark's Pods one by one (a collection delete of 1,000 times out) and wait
    for their jobs to go."""
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    names = [
        p["metadata"]["name"] for p in raw.get(f"/api/v1/namespaces/{NAMESPACE}/pods").get("items") or []
    ]

    def delete(name: str) -> None:
        try:
            raw.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", {"gracePeriodSeconds": 0})
        except KubeError as e:
            if not e.not_found:
                print(f"cannot delete {name}: {e}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(delete, names))
    raw.close()
    slurm = slurm_client(cfg)
    wait_for_no_jobs(slurm, f"tandem:{cfg.scheduler_name}/{NAMESPACE}/", timeout=900)
    slurm.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="jobs and Pods per phase")
    parser.add_argument("--parallel", type=int, default=8, help="concurrent submitters/creators")
    args = parser.parse_args()
    cfg = StackConfig.from_env()
    stack.up(cfg)
    print(f"stack: {cfg.nodes} nodes; N={args.n}; {args.parallel} parallel clients", flush=True)
    clean_tandem(cfg)  # what an interrupted earlier run left
    wait_until_quiet(cfg)
    bare_rate, bare, bare_cpu = bare_slurm(cfg, args.n, args.parallel)
    print(f"bare Slurm done: {len(bare)}/{args.n} running", flush=True)
    print(f"quiet again after {wait_until_quiet(cfg):.1f}s", flush=True)
    tandem_rate, pods, tandem_cpu = tandem(cfg, args.n, args.parallel)
    print(f"Tandem done: {len(pods)}/{args.n} bound", flush=True)
    rows = [("", "per second", "p50 s", "p90 s", "p99 s", "max s")]
    for label, rate, lat in (
        ("bare Slurm (submit -> script running)", bare_rate, bare),
        ("Tandem (Pod created -> bound)", tandem_rate, pods),
    ):
        rows.append(
            (
                label,
                f"{rate:.1f}",
                f"{percentile(lat, 0.5):.3f}",
                f"{percentile(lat, 0.9):.3f}",
                f"{percentile(lat, 0.99):.3f}",
                f"{max(lat):.3f}",
            )
        )
    print()
    print(format_table(rows))
    print()
    cpu_rows = [("CPU seconds while measuring", "bare Slurm", "Tandem")]
    for group in sorted(set(bare_cpu) | set(tandem_cpu), key=lambda g: -tandem_cpu.get(g, 0.0)):
        cpu_rows.append((group, f"{bare_cpu.get(group, 0.0):.1f}", f"{tandem_cpu.get(group, 0.0):.1f}"))
    print(format_table(cpu_rows))
    result = {
        "bare_rate": round(bare_rate, 2),
        "tandem_rate": round(tandem_rate, 2),
        "rate_ratio": round(tandem_rate / bare_rate, 3) if bare_rate else 0.0,
        "bare_p50": round(statistics.median(bare), 3),
        "bare_p99": round(percentile(bare, 0.99), 3),
        "tandem_p50": round(statistics.median(pods), 3),
        "tandem_p99": round(percentile(pods, 0.99), 3),
    }
    sys.stdout.flush()
    try:
        clean_tandem(cfg)
    finally:
        # The last line is the machine-readable result, whatever the cleanup said.
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
