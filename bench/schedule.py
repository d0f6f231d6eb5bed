"""Schedule throughput and latency: bare Slurm, Tandem and the Kubernetes floor, on the same
stack, in one run.

(a) bare Slurm: N placeholder-like jobs straight to slurmrestd; a job counts as running when its
    script starts (it writes the time). Rate = N / (last start - first submit). Twice: truly bare
    (slurm.conf without Tandem's prolog and epilog, as a site without Tandem runs it), then in a
    Tandem cluster (every job's prolog locks its Node through Tandem, as Slurm's users meet it).
(b) Tandem: N Pods; a Pod counts when it is bound (spec.nodeName seen on the watch).
(c) kube-scheduler's default scheduler: the same N Pods on the same Nodes, placed by the lab's
    kube-scheduler (the peer every Kubernetes user knows): its rate, latency, CPU and API requests.
(d) the Kubernetes floor: N Pods the benchmark creates and binds itself (no Tandem, no Slurm):
    what the API server, etcd and kwok cost per Pod on this machine. With (a) it bounds what
    Tandem can reach here: limit_rate = cores / (bare CPU s per job + floor CPU s per Pod).

    NODES=64 make up && .venv/bin/python bench/schedule.py --n 200
    .venv/bin/python bench/schedule.py --rate 12 --seconds 30    # an offered load, not a burst

Prints tables, then one JSON line: truly_bare_rate, bare_rate, tandem_rate, floor_rate, rate_ratio,
truly_bare_rate_ratio, hooks_cpu_ms_per_job (the whole machine's, bare phase minus truly bare),
limit_rate, limit_ratio, own_cpu_ms_per_pod (Tandem's three services, Tandem phase minus bare phase),
api_requests_per_pod (Kubernetes API calls Tandem made, by its own count), and, as the API server
counts them in its audit log (devstack.audit), api_requests_per_pod_by_apiserver (from the first
create to every Pod and job gone) and kube_scheduler_api_requests_per_pod; kube-scheduler's rate,
p50/p99 and CPU per Pod; p50/p99 of each phase (seconds); and checks_failed: what the Tandem phase
did wrong (a Pod never bound, bound twice or off its own job's nodes, a job, lock or taint left
after it; bench/checks.py), empty when the run counts.
Targets: limit_ratio >= 0.9, own_cpu_ms_per_pod <= 5, api_requests_per_pod <= 5; at an offered load
of half the bare rate, tandem_p50 <= bare_p50 + 0.15 s and tandem_p99 <= bare_p99 + 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s

from bench import checks, cpu, openloop
from bench.stats import percentile
from devstack import audit, config, identities, kube, services, stack
from devstack import slurm as devstack_slurm
from devstack.config import StackConfig
from devstack.table import format_table
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmRestClient
from tandem.v1 import lock_pb2, syncer_pb2, syncer_pb2_grpc

NAMESPACE = "bench"
FLOOR_SCHEDULER = "bench-floor"  # no scheduler serves it: the benchmark binds these Pods itself
TANDEM_SERVICES = ("tandem-scheduler", "tandem-syncer", "tandem-hooks")


def slurm_client(cfg: StackConfig) -> SlurmRestClient:
    return devstack_slurm.admin_client(cfg)


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
    channel = services.operator_channel(cfg, services.grpc_addresses(cfg)["tandem-syncer"])
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


def offer(count: int, act: Callable[[int], None], parallel: int, rate: float | None) -> None:
    """Call act(0..count-1): as fast as `parallel` clients go, or paced at `rate` per second."""
    if rate is None:
        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(act, range(count)))
        return
    # Enough clients that a slow call never holds back the schedule.
    openloop.offer([i / rate for i in range(count)], act, workers=max(parallel, int(rate * 2) + 4))


def kube_requests(cfg: StackConfig) -> float | None:
    """Kubernetes API requests Tandem's three services made so far (the sum of their
    tandem_kube_requests_total, watches included), or None when none of them exports it."""
    total = 0.0
    found = False
    ports = (cfg.ports.scheduler_health, cfg.ports.syncer_health, cfg.ports.hooks_http)
    for port in ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        values = re.findall(r"^tandem_kube_requests_total(?:\{[^}]*\})? (\S+)$", text, re.M)
        found = found or bool(values)
        total += sum(float(v) for v in values)
    return total if found else None


def bare_slurm(cfg: StackConfig, n: int, parallel: int, rate: float | None) -> Phase:
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

    cpu_before = cpu.sample_stack(cfg)
    first = time.time()
    offer(n, submit, parallel, rate)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(list(marks.iterdir())) < n:
        time.sleep(0.1)
    cpu_used = cpu.used_between(cpu_before, cpu.sample_stack(cfg))
    started = {int(p.name): float(p.read_text() or 0) for p in marks.iterdir() if p.read_text().strip()}
    shutil.rmtree(marks, ignore_errors=True)
    latencies = [started[j] - t for j, t in submitted.items() if j in started]
    last = max(started.values()) if started else time.time()
    for job_id in submitted:
        slurm.cancel_job(job_id, signal="KILL")
    wait_for_no_jobs(slurm, "bench-bare-")
    slurm.close()
    return len(latencies) / (last - first), latencies, cpu_used


# The arms that create Pods, and the scheduler each Pod names.
TANDEM, KUBE_SCHEDULER, FLOOR = "tandem", "kube-scheduler", "floor"
# What each arm's Pods are named after (<prefix>-<i>).
POD_PREFIX = {TANDEM: "bench", KUBE_SCHEDULER: "kube", FLOOR: "floor"}


def pod_names(arm: str, n: int) -> list[str]:
    return [f"{POD_PREFIX[arm]}-{i}" for i in range(n)]


def tandem(cfg: StackConfig, n: int, parallel: int, rate: float | None, arm: str = TANDEM) -> Phase:
    """Tandem's phase; with `arm` KUBE_SCHEDULER the same Pods placed by kube-scheduler's default
    scheduler (the Kubernetes peer every user knows, on the same Nodes); with FLOOR the Kubernetes
    floor, the same Pods bound by the benchmark (round robin over the kwok Nodes, through the
    pods/binding subresource)."""
    floor = arm == FLOOR
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    failed: list[str] = []
    done = threading.Event()
    lock = threading.Lock()
    prefix = POD_PREFIX[arm]
    scheduler = {TANDEM: cfg.scheduler_name, KUBE_SCHEDULER: "default-scheduler", FLOOR: FLOOR_SCHEDULER}[arm]

    def settle() -> None:
        # Done when every Pod whose create (and, for the floor, binding) worked is bound.
        with lock:
            if len(bound) >= n - len(failed):
                done.set()

    def seen(obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if (
            isinstance(name, str)
            and name.startswith(f"{prefix}-")
            and (obj.get("spec") or {}).get("nodeName")
            and name not in bound
        ):
            bound[name] = time.time()
            settle()

    def watch(version: str) -> None:
        while not done.is_set():
            try:
                for event in raw.watch(pods_path, {"resourceVersion": version}, 60):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: list again below
                        raise KubeError(int(obj.get("code") or 0), "", str(obj.get("message")))
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    seen(obj)
                    if done.is_set():
                        return
            except (KubeError, httpx.HTTPError) as e:
                if done.is_set():
                    return
                print(f"watch: {e}; listing again", flush=True)
                time.sleep(0.5)
                try:
                    listing = raw.get(pods_path)
                except (KubeError, httpx.HTTPError) as again:
                    print(f"list: {again}", flush=True)
                    continue
                for obj in listing.get("items") or []:
                    seen(obj)
                version = listing["metadata"]["resourceVersion"]

    watcher = threading.Thread(
        target=watch, args=(raw.get(pods_path)["metadata"]["resourceVersion"],), daemon=True
    )
    watcher.start()

    nodes = kube_node_names(raw) if floor else []
    if floor and not nodes:
        raise SystemExit("no Node hosts a slurmd Pod: nowhere to bind the floor's Pods")

    def create(i: int) -> None:
        name = f"{prefix}-{i}"
        t = time.time()
        try:
            raw.post(pods_path, pod_manifest(name, scheduler))
            created[name] = t
            if floor:
                raw.post(
                    f"{pods_path}/{name}/binding",
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": name, "namespace": NAMESPACE},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i % len(nodes)]},
                    },
                )
        except (KubeError, httpx.HTTPError) as e:
            print(f"{name}: {e}", flush=True)
            with lock:
                failed.append(name)
            settle()

    cpu_before = cpu.sample_stack(cfg)
    first = time.time()
    offer(n, create, parallel, rate)
    if not done.wait(600):
        print(f"only {len(bound)} of {n} Pods bound after 600 s", flush=True)
    cpu_used = cpu.used_between(cpu_before, cpu.sample_stack(cfg))
    latencies = [bound[name] - t for name, t in created.items() if name in bound]
    last = max(bound.values()) if bound else time.time()
    raw.close()
    return len(latencies) / (last - first), latencies, cpu_used


def ensure_namespace(cfg: StackConfig) -> None:
    kube.ensure_namespace(k8s.CoreV1Api(kube.api(cfg)), NAMESPACE)


def pod_manifest(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}
            ],
        },
    }


def kube_node_names(raw: KubeClient) -> list[str]:
    """The Nodes hosting slurmd Pods (kwok's): where the floor's Pods go."""
    pods = raw.get(f"/api/v1/namespaces/{config.SLURM_NAMESPACE}/pods").get("items") or []
    return sorted({str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName")})


def placed_right(cfg: StackConfig, n: int) -> list[str]:
    """Before the clean-up: every Pod of the Tandem arm bound, on a node of its own Slurm job."""
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    slurm = slurm_client(cfg)
    try:
        snap = checks.snapshot(
            raw, f"/api/v1/namespaces/{NAMESPACE}/pods", config.SLURM_NAMESPACE, slurm.list_jobs() or []
        )
    finally:
        raw.close()
        slurm.close()
    bound = [str(p["metadata"]["name"]) for p in snap.pods if (p.get("spec") or {}).get("nodeName")]
    return checks.unbound(pod_names(TANDEM, n), bound) + checks.placements(snap)


def left_clean(cfg: StackConfig, within: float = 30.0) -> list[str]:
    """After it: no job of Tandem's left running, no node locked, no Node tainted, within `within`
    seconds (a node's lock goes once its Slurm node is idle, after the last epilog)."""
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    slurm = slurm_client(cfg)
    prefix = f"tandem:{cfg.scheduler_name}/"
    deadline = time.monotonic() + within
    try:
        while True:
            live = [j for j in slurm.list_jobs() or [] if not j.finished and j.name.startswith(prefix)]
            nodes = raw.get("/api/v1/nodes").get("items") or []
            left = checks.leftovers(checks.slurmd_pods(raw, config.SLURM_NAMESPACE), nodes, live)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)
    finally:
        raw.close()
        slurm.close()


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
    parser.add_argument("--n", type=int, default=200, help="jobs and Pods per phase (a burst)")
    parser.add_argument("--parallel", type=int, default=8, help="concurrent submitters/creators")
    parser.add_argument("--rate", type=float, help="offer this many jobs/Pods per second instead of a burst")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long --rate is offered")
    args = parser.parse_args()
    n = int(args.rate * args.seconds) if args.rate else args.n
    cfg = StackConfig.from_env()
    stack.up(cfg)
    load = (
        f"{args.rate}/s for {args.seconds:.0f}s"
        if args.rate
        else f"a burst, {args.parallel} parallel clients"
    )
    print(f"stack: {cfg.nodes} nodes; N={n}; {load}", flush=True)
    clean_tandem(cfg)  # what an interrupted earlier run left
    wait_until_quiet(cfg)
    with devstack_slurm.without_tandem_hooks(cfg):
        wait_until_quiet(cfg)
        truly_bare_rate, truly_bare, truly_bare_cpu = bare_slurm(cfg, n, args.parallel, args.rate)
    print(f"truly bare Slurm done: {len(truly_bare)}/{n} running", flush=True)
    print(f"quiet again after {wait_until_quiet(cfg):.1f}s", flush=True)
    bare_rate, bare, bare_cpu = bare_slurm(cfg, n, args.parallel, args.rate)
    print(f"bare Slurm done: {len(bare)}/{n} running", flush=True)
    print(f"quiet again after {wait_until_quiet(cfg):.1f}s", flush=True)
    requests_before = kube_requests(cfg)
    tandem_began = time.time()
    tandem_rate, pods, tandem_cpu = tandem(cfg, n, args.parallel, args.rate)
    requests_after = kube_requests(cfg)
    api_requests = (
        requests_after - requests_before
        if requests_after is not None and requests_before is not None
        else None
    )
    if api_requests is None:
        print("no service exports tandem_kube_requests_total: api_requests_per_pod is null", flush=True)
    print(f"Tandem done: {len(pods)}/{n} bound", flush=True)
    failed = placed_right(cfg, n)
    clean_tandem(cfg)
    print(f"quiet again after {wait_until_quiet(cfg):.1f}s", flush=True)
    failed += left_clean(cfg)
    # The API server's own count of Tandem's requests, from the first create to every Pod and job
    # gone (the whole lifecycle, teardown included; watches counted once, when they end).
    tandem_requests_made = audit.tandem_total(audit.requests_by_user(cfg, tandem_began, time.time()))
    scheduler_user = (
        f"system:serviceaccount:{identities.MAIN.namespace}:{identities.MAIN.service_account('scheduler')}"
    )
    counted = audit.bindings(cfg, NAMESPACE, scheduler_user, tandem_began, time.time())
    failed += checks.bindings(pod_names(TANDEM, n), counted)
    for problem in failed:
        print(f"check failed: {problem}", flush=True)
    began = time.time()
    kube_rate, kube_pods, kube_cpu = tandem(cfg, n, args.parallel, args.rate, arm=KUBE_SCHEDULER)
    kube_requests_made = audit.requests_by_user(cfg, began, time.time())[audit.KUBE_SCHEDULER]
    print(f"kube-scheduler done: {len(kube_pods)}/{n} bound", flush=True)
    clean_tandem(cfg)
    print(f"quiet again after {wait_until_quiet(cfg):.1f}s", flush=True)
    floor_rate, floor, floor_cpu = tandem(cfg, n, args.parallel, args.rate, arm=FLOOR)
    print(f"Kubernetes floor done: {len(floor)}/{n} bound", flush=True)
    phases = (
        ("truly bare Slurm, no Tandem prolog (submit -> script running)", truly_bare_rate, truly_bare),
        ("bare Slurm in a Tandem cluster (submit -> script running)", bare_rate, bare),
        ("Tandem (Pod created -> bound)", tandem_rate, pods),
        ("kube-scheduler's default scheduler (created -> bound)", kube_rate, kube_pods),
        ("Kubernetes floor (created -> bound by the benchmark)", floor_rate, floor),
    )
    print()
    print(latency_table(phases))
    print()
    cpu_rows: list[tuple[str, ...]] = [
        ("CPU seconds while measuring", "truly bare Slurm", "bare Slurm", "Tandem", "kube-scheduler", "floor")
    ]
    for group in sorted(set(bare_cpu) | set(tandem_cpu), key=lambda g: -tandem_cpu.get(g, 0.0)):
        cpu_rows.append(
            (
                group,
                *(
                    f"{c.get(group, 0.0):.1f}"
                    for c in (truly_bare_cpu, bare_cpu, tandem_cpu, kube_cpu, floor_cpu)
                ),
            )
        )
    print(format_table(cpu_rows))
    cores = os.cpu_count() or 1
    per_job = bare_cpu["whole machine"] / n
    per_floor_pod = floor_cpu["whole machine"] / n
    limit_rate = cores / (per_job + per_floor_pod)
    own = sum(tandem_cpu.get(s, 0.0) - bare_cpu.get(s, 0.0) for s in TANDEM_SERVICES)
    print(
        f"\nlimit on this machine: {cores} cores / ({per_job * 1000:.1f} ms bare CPU per job + "
        f"{per_floor_pod * 1000:.1f} ms floor CPU per Pod) = {limit_rate:.1f} Pods/s; Tandem reached "
        f"{tandem_rate / limit_rate:.2f} of it. Tandem's services: {own / n * 1000:.1f} ms CPU and "
        f"{'?' if api_requests is None else f'{api_requests / n:.1f}'} API requests per Pod."
    )
    result = {
        "truly_bare_rate": round(truly_bare_rate, 2),
        "bare_rate": round(bare_rate, 2),
        "tandem_rate": round(tandem_rate, 2),
        "floor_rate": round(floor_rate, 2),
        "rate_ratio": round(tandem_rate / bare_rate, 3) if bare_rate else 0.0,
        "truly_bare_rate_ratio": round(tandem_rate / truly_bare_rate, 3) if truly_bare_rate else 0.0,
        # What a job's prolog and epilog through Tandem cost the whole machine, per job.
        "hooks_cpu_ms_per_job": round(
            (bare_cpu["whole machine"] - truly_bare_cpu["whole machine"]) / n * 1000, 2
        ),
        "limit_rate": round(limit_rate, 2),
        "limit_ratio": round(tandem_rate / limit_rate, 3),
        "own_cpu_ms_per_pod": round(own / n * 1000, 2),
        "api_requests_per_pod": None if api_requests is None else round(api_requests / n, 2),
        "api_requests_per_pod_by_apiserver": round(tandem_requests_made / n, 2),
        "truly_bare_p50": round(statistics.median(truly_bare), 3),
        "truly_bare_p99": round(percentile(truly_bare, 0.99), 3),
        "bare_p50": round(statistics.median(bare), 3),
        "bare_p99": round(percentile(bare, 0.99), 3),
        "tandem_p50": round(statistics.median(pods), 3),
        "tandem_p99": round(percentile(pods, 0.99), 3),
        "kube_scheduler_rate": round(kube_rate, 2),
        "kube_scheduler_p50": round(statistics.median(kube_pods), 3),
        "kube_scheduler_p99": round(percentile(kube_pods, 0.99), 3),
        # kube-scheduler's own CPU and API requests per Pod (the API server's audit count), beside
        # Tandem's: the peer's cost on the same Pods.
        "kube_scheduler_cpu_ms_per_pod": round(
            (kube_cpu.get("kube-scheduler", 0.0) - floor_cpu.get("kube-scheduler", 0.0)) / n * 1000, 2
        ),
        "kube_scheduler_api_requests_per_pod": round(kube_requests_made / n, 2),
        "floor_p50": round(statistics.median(floor), 3),
        "floor_p99": round(percentile(floor, 0.99), 3),
        "n": n,
        "offered_rate": args.rate,
        # Every Pod bound once on its own job's node, nothing left: else the figures do not count.
        "checks_failed": failed,
    }
    sys.stdout.flush()
    try:
        clean_tandem(cfg)
    finally:
        # The last line is the machine-readable result, whatever the cleanup said.
        print(json.dumps(result), flush=True)


def latency_table(phases: Sequence[tuple[str, float, list[float]]]) -> str:
    rows: list[tuple[str, ...]] = [("", "per second", "p50 s", "p90 s", "p99 s", "max s")]
    for label, rate, lat in phases:
        rows.append(
            (
                label,
                f"{rate:.1f}",
                *(f"{percentile(lat, q):.3f}" for q in (0.5, 0.9, 0.99)),
                f"{max(lat):.3f}",
            )
        )
    return format_table(rows)


if __name__ == "__main__":
    main()
