"""Gang latency: a group of Pods placed as one Slurm job, against a bare multi-node Slurm job.

For groups of 2, 4 and 8 members (one node each), in one run on one stack:
  bare   - a Slurm job of that many nodes straight to slurmrestd, from submit to its script
           running (the script writes the time);
  Tandem - a PodGroup (gang, minCount = size) and its members, from the last member's creation
           to every member bound (seen on a watch).
and a heterogeneous row (--het, default 1+3: a leader of 4 CPUs and workers of 1), and elastic rows
(bench/elastic.py: an elastic gang's extra member starting once Slurm has room, and taken back by a
higher tier, each beside a bare Slurm job; --no-elastic for none):
  bare   - a Slurm heterogeneous job of those two components, from submit to its script running;
  Tandem - a CompositePodGroup of two PodGroups (leader, workers) and their members, from the last
           member's creation to every member bound (one het job, each member on its component).
Each is repeated --repeat times, one at a time, each from an idle cluster (every Slurm node idle
for a second: Slurm schedules at most every 250 ms here, so a run does not inherit the last one's
pass).

    make up && .venv/bin/python bench/gang.py --repeat 5

Prints a table, then one JSON line: {"sizes": [{"size", "bare_p50", "tandem_p50", ...}, ...]}.
Target: tandem_p50 <= bare_p50 + 0.3 s for every size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench import elastic
from bench.schedule import ensure_namespace, slurm_client, wait_for_no_jobs
from devstack import config
from devstack import kube as devkube
from devstack.config import StackConfig
from devstack.table import format_table
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec

NAMESPACE = "bench"
TARGET_SECONDS = 0.3
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def podgroups(cfg: StackConfig) -> str:
    """The PodGroups' collection, in the version this stack's apiserver serves."""
    return f"/apis/{'/'.join(devkube.podgroup_api(cfg))}/namespaces/{NAMESPACE}/podgroups"


def wait_idle(cfg: StackConfig, timeout: float = 60.0, settle: float = 1.0) -> None:
    """Every Slurm node idle (no job, none completing) for `settle` seconds: each run starts from
    the same cluster, whichever phase ran before it."""
    slurm = slurm_client(cfg)
    try:
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            nodes = slurm.list_nodes() or []
            idle = bool(nodes) and all(n.state == "IDLE" and not n.busy for n in nodes)
            now = time.monotonic()
            quiet_since = (quiet_since or now) if idle else None
            if quiet_since is not None and now - quiet_since >= settle:
                return
            time.sleep(0.1)
        raise SystemExit(f"Slurm nodes still busy after {timeout:.0f} s")
    finally:
        slurm.close()


LEADER_CPUS = 4


def bare(cfg: StackConfig, size: int, het: tuple[int, int] | None = None) -> float:
    """Seconds from submitting a `size`-node job (with `het`: a het job of a leader component and
    a worker component of these node counts, the leader's nodes of LEADER_CPUS) to its script
    running."""
    wait_idle(cfg)
    slurm = slurm_client(cfg)
    marks = Path(tempfile.mkdtemp(prefix="tandem-gang-", dir=cfg.state_dir))
    marks.chmod(0o777)
    spec = JobSpec(
        name="bench-gang-bare",
        script=f"#!/bin/bash\ndate +%s.%N > {marks}/started\nsleep 3600 &\nwait\n",
        environment={"PATH": "/usr/bin:/bin"},
        cpus=1,
        memory_mb=100,
        nodes=size,
    )
    if het is not None:
        spec = replace(
            spec,
            components=(replace(spec, nodes=het[0], cpus=LEADER_CPUS), replace(spec, nodes=het[1])),
        )
    try:
        t = time.time()
        job_id = slurm.submit_job(spec)
        mark = marks / "started"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (mark.exists() and mark.read_text().strip()):
            time.sleep(0.01)
        started = float(mark.read_text())
        slurm.cancel_job(job_id, signal="KILL")
        wait_for_no_jobs(slurm, "bench-gang-")
        return started - t
    finally:
        shutil.rmtree(marks, ignore_errors=True)
        slurm.close()


def tandem(cfg: StackConfig, raw: KubeClient, size: int, run: int) -> float:
    """Seconds from the last member's creation to every member bound."""
    wait_idle(cfg)
    group = f"gang-{size}-{run}"
    bound: dict[str, float] = {}
    everyone = threading.Event()
    version = raw.get(PODS)["metadata"]["resourceVersion"]

    def watch() -> None:
        for event in raw.watch(PODS, {"resourceVersion": version}, 120):
            obj = event.get("object") or {}
            name = str((obj.get("metadata") or {}).get("name") or "")
            if name.startswith(f"{group}-") and (obj.get("spec") or {}).get("nodeName"):
                bound.setdefault(name, time.time())
                if len(bound) == size:
                    everyone.set()
                    return

    threading.Thread(target=watch, daemon=True).start()
    raw.post(
        podgroups(cfg),
        {
            "apiVersion": "/".join(devkube.podgroup_api(cfg)),
            "kind": "PodGroup",
            "metadata": {"name": group},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        },
    )
    last = 0.0
    for i in range(size):
        raw.post(PODS, _member(cfg, f"{group}-{i}", group))
        last = time.time()
    if not everyone.wait(120):
        raise SystemExit(f"{group}: only {len(bound)} of {size} members bound after 120 s")
    latency = max(bound.values()) - last
    for i in range(size):
        raw.delete(f"{PODS}/{group}-{i}", {"gracePeriodSeconds": 0})
    raw.delete(f"{podgroups(cfg)}/{group}")
    slurm = slurm_client(cfg)
    try:
        wait_for_no_jobs(slurm, "tandem:")
    finally:
        slurm.close()
    _wait_for_no_pods(raw)
    return latency


def tandem_het(cfg: StackConfig, raw: KubeClient, het: tuple[int, int], run: int) -> float:
    """Seconds from the last member's creation to every member bound, for a CompositePodGroup of
    a leader PodGroup and a worker PodGroup of these sizes."""
    wait_idle(cfg)
    group = f"het-{het[0]}-{het[1]}-{run}"
    size = sum(het)
    bound: dict[str, float] = {}
    everyone = threading.Event()
    version = raw.get(PODS)["metadata"]["resourceVersion"]

    def watch() -> None:
        for event in raw.watch(PODS, {"resourceVersion": version}, 120):
            obj = event.get("object") or {}
            name = str((obj.get("metadata") or {}).get("name") or "")
            if name.startswith(f"{group}-") and (obj.get("spec") or {}).get("nodeName"):
                bound.setdefault(name, time.time())
                if len(bound) == size:
                    everyone.set()
                    return

    threading.Thread(target=watch, daemon=True).start()
    raw.post(
        composites(),
        {
            "apiVersion": f"{COMPOSITE_GROUP_VERSION}",
            "kind": "CompositePodGroup",
            "metadata": {"name": group},
            "spec": {
                "workloadRef": {"workloadName": group, "templateName": "serve"},
                "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            },
        },
    )
    children = {f"{group}-leader": het[0], f"{group}-workers": het[1]}
    for child, count in children.items():
        raw.post(
            podgroups(cfg),
            {
                "apiVersion": "/".join(devkube.podgroup_api(cfg)),
                "kind": "PodGroup",
                "metadata": {"name": child},
                "spec": {
                    "parentCompositePodGroupName": group,
                    "workloadRef": {"workloadName": group, "templateName": child.rsplit("-", 1)[1]},
                    "schedulingPolicy": {"gang": {"minCount": count}},
                },
            },
        )
    names = []
    last = 0.0
    for child, count in children.items():
        cpu = str(LEADER_CPUS) if child.endswith("-leader") else "1"
        for i in range(count):
            names.append(f"{child}-{i}")
            raw.post(PODS, _member(cfg, names[-1], child, cpu))
            last = time.time()
    if not everyone.wait(120):
        raise SystemExit(f"{group}: only {len(bound)} of {size} members bound after 120 s")
    latency = max(bound.values()) - last
    for name in names:
        raw.delete(f"{PODS}/{name}", {"gracePeriodSeconds": 0})
    for child in children:
        raw.delete(f"{podgroups(cfg)}/{child}")
    raw.delete(f"{composites()}/{group}")
    slurm = slurm_client(cfg)
    try:
        wait_for_no_jobs(slurm, "tandem:")
    finally:
        slurm.close()
    _wait_for_no_pods(raw)
    return latency


COMPOSITE_GROUP_VERSION = "scheduling.k8s.io/v1alpha3"


def composites() -> str:
    return f"/apis/{COMPOSITE_GROUP_VERSION}/namespaces/{NAMESPACE}/compositepodgroups"


def _member(cfg: StackConfig, name: str, group: str, cpu: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": cfg.scheduler_name,
            "schedulingGroup": {"podGroupName": group},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}},
                }
            ],
        },
    }


def _wait_for_no_pods(raw: KubeClient, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not raw.get(PODS).get("items"):
            return
        time.sleep(0.1)
    raise SystemExit(f"Pods of namespace {NAMESPACE} still there after {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per size and phase")
    parser.add_argument("--sizes", default="2,4,8", help="group sizes (members = nodes)")
    parser.add_argument(
        "--het", default="1+3", help="a heterogeneous row: leader+workers members ('' for none)"
    )
    parser.add_argument(
        "--no-elastic", action="store_true", help="no elastic rows (an extra member's start and take-back)"
    )
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    sizes: list[int | tuple[int, int]] = [int(s) for s in args.sizes.split(",")]
    if args.het:
        first, _, rest = args.het.partition("+")
        sizes.append((int(first), int(rest)))
    largest = max(s if isinstance(s, int) else sum(s) for s in sizes)
    if largest > cfg.nodes:
        raise SystemExit(f"a group of {largest} needs {largest} nodes; this stack has {cfg.nodes}")
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    try:
        raw.get(podgroups(cfg))
    except (KubeError, httpx.HTTPError) as e:
        raise SystemExit(f"this cluster serves no PodGroups ({e}): the lab's `make up` enables them") from e
    rows, results = [], []
    for shape in sizes:
        if isinstance(shape, int):
            size: int | str = shape
            bare_runs = [bare(cfg, shape) for _ in range(args.repeat)]
            tandem_runs = [tandem(cfg, raw, shape, run) for run in range(args.repeat)]
        else:
            try:
                raw.get(composites())
            except (KubeError, httpx.HTTPError) as e:
                print(f"no heterogeneous row: this cluster serves no CompositePodGroups ({e})")
                continue
            size = f"het {shape[0]}+{shape[1]}"
            bare_runs = [bare(cfg, sum(shape), shape) for _ in range(args.repeat)]
            tandem_runs = [tandem_het(cfg, raw, shape, run) for run in range(args.repeat)]
        b50, t50 = statistics.median(bare_runs), statistics.median(tandem_runs)
        print(
            f"size {size}: bare {sorted(round(x, 3) for x in bare_runs)}; "
            f"Tandem {sorted(round(x, 3) for x in tandem_runs)}",
            flush=True,
        )
        rows.append(
            [
                str(size),
                f"{b50:.3f}",
                f"{max(bare_runs):.3f}",
                f"{t50:.3f}",
                f"{max(tandem_runs):.3f}",
                f"{t50 - b50:+.3f}",
            ]
        )
        results.append(
            {
                "size": size,
                "bare_p50": round(b50, 3),
                "tandem_p50": round(t50, 3),
                "bare_max": round(max(bare_runs), 3),
                "tandem_max": round(max(tandem_runs), 3),
                "runs": args.repeat,
            }
        )
    elastic_rows = [] if args.no_elastic else _elastic(cfg, raw, args.repeat)
    raw.close()
    print()
    print(
        format_table(
            [
                [
                    "members = nodes",
                    "bare p50 s",
                    "bare max s",
                    "Tandem p50 s",
                    "Tandem max s",
                    "Tandem - bare",
                ],
                *rows,
            ]
        )
    )
    if elastic_rows:
        print()
        print(
            format_table(
                [
                    [
                        "elastic gang (core 2, one extra)",
                        "bare p50 s",
                        "bare max s",
                        "Tandem p50 s",
                        "Tandem max s",
                    ],
                    *[
                        [
                            r["what"],
                            f"{r['bare_p50']:.3f}",
                            f"{r['bare_max']:.3f}",
                            f"{r['tandem_p50']:.3f}",
                            f"{r['tandem_max']:.3f}",
                        ]
                        for r in elastic_rows
                    ],
                ]
            )
        )
    met = all(r["tandem_p50"] <= r["bare_p50"] + TARGET_SECONDS for r in results)
    print(
        f"\ntarget: Tandem p50 <= bare p50 + {TARGET_SECONDS} s for every size: {'met' if met else 'NOT met'}"
    )
    print(json.dumps({"sizes": results, "elastic": elastic_rows, "target_met": met}))


def _elastic(cfg: StackConfig, raw: KubeClient, repeat: int) -> list[dict[str, Any]]:
    """An extra member's start once Slurm has room, and its take-back by a higher tier, each beside
    a bare Slurm job's, interleaved run by run (bench/elastic.py)."""
    room: tuple[list[float], list[float]] = ([], [])
    back: tuple[list[float], list[float], list[float]] = ([], [], [])
    for run in range(repeat):
        wait_idle(cfg)
        room[0].append(elastic.bare_room(cfg))
        wait_idle(cfg)
        room[1].append(elastic.tandem_room(cfg, raw, NAMESPACE, run, _member))
        wait_idle(cfg)
        back[0].append(elastic.bare_take_back(cfg))
        wait_idle(cfg)
        gone, started = elastic.tandem_take_back(cfg, raw, NAMESPACE, run, _member)
        back[1].append(started)
        back[2].append(gone)
        _wait_for_no_pods(raw)
    for what, bare_runs, tandem_runs in (("room", *room), ("take-back", back[0], back[1])):
        shown = [sorted(round(x, 3) for x in runs) for runs in (bare_runs, tandem_runs)]
        print(f"elastic {what}: bare {shown[0]}; Tandem {shown[1]}")

    def row(what: str, bare_runs: list[float], tandem_runs: list[float]) -> dict[str, Any]:
        return {
            "what": what,
            "bare_p50": round(statistics.median(bare_runs), 3),
            "bare_max": round(max(bare_runs), 3),
            "tandem_p50": round(statistics.median(tandem_runs), 3),
            "tandem_max": round(max(tandem_runs), 3),
            "runs": repeat,
        }

    return [
        row("room -> extra running (bare: job running)", room[0], room[1]),
        row("high tier asks its node -> preemptor running", back[0], back[1]),
        row("high tier asks its node -> extra's Pod gone", back[0], back[2]),
    ]


if __name__ == "__main__":
    main()
