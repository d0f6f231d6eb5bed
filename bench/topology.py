"""Topology-aware gangs (issue 38): gangs asking for one rack, among a churn of plain Slurm jobs and
single Pods, against the same jobs submitted bare with the same Slurm options; and a big
high-QOS gang freeing a whole rack by preemption.

The benchmark labels the stack's 64 Nodes into 8 racks of 8 (one zone) and waits for the syncer to
give Slurm that topology and every node its rack feature. Then, with the churn running (plain
1-node whole-node jobs of 2-5 s, single Pods each deleted 3 s after its bind):
  bare   - a job of `size` nodes straight to slurmrestd with the constraint Tandem gives such a
           gang (the matching OR of the racks with room), from submit to its script running;
  Tandem - a gang of `size` Pods asking for one topology.kubernetes.io/rack (its PodGroup's
           spec.schedulingConstraints on Kubernetes 1.37, the annotation on 1.36), from the last
           member's creation to every member bound; each gang's nodes checked to be in one rack.
Sizes 2 to 8, alternating bare and Tandem. Then the churn stops, slurmctld switches to QOS
preemption, every node gets a normal-QOS whole-node job, and a gang of 8 with QOS high asks for one
rack (bare, then Tandem): time to start, jobs preempted, racks those jobs were in.

    NODES=64 make up && .venv/bin/python bench/topology.py --gangs 21

Prints a table, then one JSON line. Targets: every gang in one rack; the big gang preempts in one
rack only.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.gang import PODS, _wait_for_no_pods, podgroups
from bench.schedule import ensure_namespace, slurm_client
from bench.stats import percentile
from devstack import config
from devstack import kube as devkube
from devstack import slurm as devstack_slurm
from devstack.config import StackConfig
from devstack.table import format_table
from tandem import keys, topology
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmRestClient

ZONE, RACK = config.TOPOLOGY_LEVELS
RACK_SIZE = 8
PREFIX = "sunk.coreweave.com/"


class Binds:
    """Every bench Pod's bind time and node, from one watch."""

    def __init__(self, raw: KubeClient) -> None:
        self.raw = raw
        self.at: dict[str, tuple[float, str]] = {}
        self.changed = threading.Condition()
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            version = self.raw.get(PODS)["metadata"]["resourceVersion"]
            try:
                for event in self.raw.watch(PODS, {"resourceVersion": version}, 60):
                    obj = event.get("object") or {}
                    name = str((obj.get("metadata") or {}).get("name") or "")
                    node = str((obj.get("spec") or {}).get("nodeName") or "")
                    if node and name not in self.at:
                        with self.changed:
                            self.at[name] = (time.time(), node)
                            self.changed.notify_all()
            except (KubeError, OSError):
                time.sleep(0.5)

    def wait(self, names: list[str], timeout: float) -> list[tuple[float, str]]:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not all(n in self.at for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    bound = sum(n in self.at for n in names)
                    raise SystemExit(f"only {bound} of {len(names)} Pods bound after {timeout:.0f} s")
                self.changed.wait(left)
            return [self.at[n] for n in names]


def _pod(cfg: StackConfig, name: str, annotations: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "annotations": annotations, "labels": labels},
        "spec": {
            "schedulerName": cfg.scheduler_name,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "1", "memory": "100Mi"}},
                }
            ],
        },
    }


def label_racks(cfg: StackConfig, raw: KubeClient) -> topology.Topology:
    """8 racks of 8 in one zone; returns the topology once Slurm and every node's features show it."""
    for i in range(cfg.nodes):
        labels = {ZONE: "z1", RACK: f"rack-{i // RACK_SIZE}"}
        raw.merge_patch(f"/api/v1/nodes/{config.kube_node_name(i)}", {"metadata": {"labels": labels}})
    namespace, name = config.TOPOLOGY_CONFIGMAP.split("/")
    slurm = slurm_client(cfg)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                data = raw.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}").get("data") or {}
                t = topology.from_json(str(data.get("topology.json") or ""))
            except (KubeError, ValueError):
                time.sleep(0.5)
                continue
            racks = t.at_level(1)
            featured = all(
                (d := t.domain_of(n.name, 1)) is not None and d.name in n.features
                for n in slurm.list_nodes() or []
            )
            shaped = len(racks) == cfg.nodes // RACK_SIZE and all(len(d.nodes) == RACK_SIZE for d in racks)
            if shaped and featured:
                return t
            time.sleep(0.5)
    finally:
        slurm.close()
    raise SystemExit("Slurm's topology did not show 8 racks of 8 within 120 s")


def unlabel(cfg: StackConfig, raw: KubeClient) -> None:
    for i in range(cfg.nodes):
        raw.merge_patch(
            f"/api/v1/nodes/{config.kube_node_name(i)}", {"metadata": {"labels": {ZONE: None, RACK: None}}}
        )


class Churn:
    """Plain whole-node Slurm jobs of 2-5 s and single Pods bound for 3 s, kept at a level."""

    def __init__(self, cfg: StackConfig, raw: KubeClient, binds: Binds, jobs: int, pods: int) -> None:
        self.cfg, self.raw, self.binds = cfg, raw, binds
        self.jobs, self.pods = jobs, pods
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._jobs, daemon=True),
            threading.Thread(target=self._pods, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _jobs(self) -> None:
        slurm = slurm_client(self.cfg)
        live: set[int] = set()
        try:
            while not self.stop.is_set():
                states = slurm.job_states(sorted(live)) if live else {}
                live = {
                    j for j in live if j in states and states[j][0] in ("PENDING", "RUNNING", "CONFIGURING")
                }
                while len(live) < self.jobs:
                    live.add(slurm.submit_job(_plain(f"sleep {random.uniform(2, 5):.1f}")))
                time.sleep(0.5)
        finally:
            for job in live:
                slurm.cancel_job(job, signal="KILL")
            slurm.close()

    def _pods(self) -> None:
        names = itertools.count()
        live: dict[str, float] = {}
        while not self.stop.is_set():
            now = time.time()
            for name in [n for n in live if n in self.binds.at and now - self.binds.at[n][0] > 3]:
                self.raw.delete(f"{PODS}/{name}", {"gracePeriodSeconds": 0})
                del live[name]
            while len(live) < self.pods:
                name = f"churn-{next(names)}"
                self.raw.post(PODS, _pod(self.cfg, name, {}, {}))
                live[name] = now
            time.sleep(0.2)
        for name in live:
            with contextlib.suppress(KubeError):
                self.raw.delete(f"{PODS}/{name}", {"gracePeriodSeconds": 0})

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _plain(command: str, qos: str = "", name: str = "bench-topo-plain") -> JobSpec:
    return JobSpec(
        name=name,
        script=f"#!/bin/bash\n{command}\n",
        environment={"PATH": "/usr/bin:/bin"},
        cpus=1,
        memory_mb=100,
        exclusive="none",
        qos=qos,
    )


def bare_gang(
    slurm: SlurmRestClient, cfg: StackConfig, t: topology.Topology, size: int, qos: str = ""
) -> tuple[float, set[str], int]:
    """Seconds from submit to its script running, the racks of its nodes, its job id."""
    ask = topology.one_domain(t, (RACK,), size)
    assert isinstance(ask, topology.OneDomain)
    marks = Path(tempfile.mkdtemp(prefix="tandem-topo-", dir=cfg.state_dir))
    marks.chmod(0o777)
    spec = JobSpec(
        name="bench-topo-bare",
        script=f"#!/bin/bash\ndate +%s.%N > {marks}/started\nsleep 3600 &\nwait\n",
        environment={"PATH": "/usr/bin:/bin"},
        cpus=1,
        memory_mb=100,
        nodes=size,
        constraints=ask.constraint,
        qos=qos,
    )
    try:
        submitted = time.time()
        job_id = slurm.submit_job(spec)
        mark = marks / "started"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (mark.exists() and mark.read_text().strip()):
            time.sleep(0.01)
        started = float(mark.read_text())
        job = slurm.get_job(job_id)
        nodes = job.nodes if job is not None else ()
        slurm.cancel_job(job_id, signal="KILL")
        return started - submitted, {_rack_of(t, n) for n in nodes}, job_id
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def _rack_of(t: topology.Topology, slurm_node: str) -> str:
    d = t.domain_of(slurm_node, 1)
    return d.value if d is not None else "?"


def tandem_gang(
    cfg: StackConfig,
    raw: KubeClient,
    binds: Binds,
    t: topology.Topology,
    name: str,
    size: int,
    qos: str = "",
    ask: bool = True,
) -> tuple[float, set[str]]:
    """Seconds from the last member's creation to every member bound, and the racks of their
    nodes. `ask`: the gang asks for one rack (without: the same gang, Slurm's tree packing only)."""
    annotations = {PREFIX + "qos": qos} if qos else {}
    podgroup = _podgroup_with_constraints(cfg) or not ask
    if podgroup:
        raw.post(
            podgroups(cfg),
            {
                "apiVersion": "/".join(devkube.podgroup_api(cfg)),
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": size}},
                    **({"schedulingConstraints": {"topology": [{"key": RACK}]}} if ask else {}),
                },
            },
        )
    else:
        annotations[keys.TOPOLOGY] = RACK
    names = []
    last = 0.0
    for i in range(size):
        member = f"{name}-{i}"
        if podgroup:
            pod = _pod(cfg, member, dict(annotations), {})
            pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        else:
            labels = {
                keys.LWS_NAME_LABEL: name,
                keys.LWS_GROUP_INDEX_LABEL: "0",
                keys.LWS_GROUP_KEY_LABEL: name,
                keys.LWS_WORKER_INDEX_LABEL: str(i),
            }
            pod = _pod(cfg, member, {**annotations, keys.LWS_SIZE_ANNOTATION: str(size)}, labels)
        raw.post(PODS, pod)
        names.append(member)
        last = time.time()
    bound = binds.wait(names, 180)
    latency = max(at for at, _ in bound) - last
    kube_to_slurm = {config.kube_node_name(i): config.slurm_node_name(i) for i in range(cfg.nodes)}
    racks = {_rack_of(t, kube_to_slurm[node]) for _, node in bound}
    for member in names:
        raw.delete(f"{PODS}/{member}", {"gracePeriodSeconds": 0})
    if podgroup:
        raw.delete(f"{podgroups(cfg)}/{name}")
    return latency, racks


_CONSTRAINTS_SERVED: dict[str, bool] = {}


def _podgroup_with_constraints(cfg: StackConfig) -> bool:
    """Kubernetes 1.37 keeps a PodGroup's spec.schedulingConstraints; 1.36 drops it."""
    if "served" not in _CONSTRAINTS_SERVED:
        _CONSTRAINTS_SERVED["served"] = devkube.podgroup_api(cfg)[1] != "v1alpha2"
    return _CONSTRAINTS_SERVED["served"]


def big_gang(
    cfg: StackConfig, raw: KubeClient, binds: Binds, t: topology.Topology, tandem: bool
) -> dict[str, Any]:
    """A full cluster of normal-QOS jobs, then a gang of one rack with QOS high."""
    slurm = slurm_client(cfg)
    try:
        fill = [
            slurm.submit_job(
                replace(
                    _plain("sleep 3600", "normal", "bench-topo-fill"),
                    required_nodes=config.slurm_node_name(i),
                )
            )
            for i in range(cfg.nodes)
        ]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = slurm.job_states(fill)
            if all(states.get(j, ("",))[0] == "RUNNING" for j in fill):
                break
            time.sleep(0.5)
        else:
            raise SystemExit("the fill jobs did not all start")
        if tandem:
            seconds, racks = tandem_gang(cfg, raw, binds, t, "big-gang", RACK_SIZE, qos="high")
        else:
            seconds, racks, _ = bare_gang(slurm, cfg, t, RACK_SIZE, qos="high")
        states = slurm.job_states(fill)
        preempted = [j for j in fill if states.get(j, ("",))[0] != "RUNNING"]
        touched = {_rack_of(t, config.slurm_node_name(fill.index(j))) for j in preempted}
        for job in fill:
            slurm.cancel_job(job, signal="KILL")
        return {
            "seconds": round(seconds, 3),
            "preempted": len(preempted),
            "racks_touched": len(touched),
            "in_one_rack": len(racks) == 1,
        }
    finally:
        slurm.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gangs", type=int, default=21, help="gangs per phase, sizes 2 to 8 in turn")
    parser.add_argument("--churn-jobs", type=int, default=24, help="plain whole-node jobs kept running")
    parser.add_argument("--churn-pods", type=int, default=8, help="single Pods kept bound")
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    if cfg.nodes < 64:
        raise SystemExit(f"needs 64 nodes (NODES=64 make up); this stack has {cfg.nodes}")
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    t = label_racks(cfg, raw)
    binds = Binds(raw)
    sizes = [2 + i % 7 for i in range(args.gangs)]
    bare_s: list[float] = []
    tandem_s: list[float] = []
    free_s: list[float] = []
    bare_one = tandem_one = free_one = 0
    churn = Churn(cfg, raw, binds, args.churn_jobs, args.churn_pods)
    slurm = slurm_client(cfg)
    try:
        for n, size in enumerate(sizes):
            seconds, racks, _ = bare_gang(slurm, cfg, t, size)
            bare_s.append(seconds)
            bare_one += len(racks) == 1
            seconds, racks = tandem_gang(cfg, raw, binds, t, f"gang-{n}", size)
            tandem_s.append(seconds)
            tandem_one += len(racks) == 1
            seconds, free_racks = tandem_gang(cfg, raw, binds, t, f"free-{n}", size, ask=False)
            free_s.append(seconds)
            free_one += len(free_racks) == 1
            print(
                f"gang {n} of {size}: bare {bare_s[-1]:.3f} s, Tandem {tandem_s[-1]:.3f} s,"
                f" racks {sorted(racks)}",
                flush=True,
            )
    finally:
        churn.close()
        slurm.close()
    _wait_for_no_pods(raw)
    cfg = devstack_slurm.switch_preemption(cfg, "qos")
    try:
        t = label_racks(cfg, raw)  # the restart dropped the features: back before the big gang
        big_bare = big_gang(cfg, raw, binds, t, tandem=False)
        big_tandem = big_gang(cfg, raw, binds, t, tandem=True)
    finally:
        cfg = devstack_slurm.switch_preemption(cfg, "partition_prio")
        binds.stop.set()
        unlabel(cfg, raw)
    raw.close()

    def column(runs: list[float], one: int) -> list[str]:
        return [f"{one}/{len(sizes)}", f"{statistics.median(runs):.3f}", f"{percentile(runs, 0.99):.3f}"]

    big = ["time to start s", "jobs preempted", "racks touched by preemption"]
    rows = [
        [what, b, a, f]
        for what, b, a, f in zip(
            ["gangs of 2-8 in one rack", "time to start p50 s", "time to start p99 s"],
            column(bare_s, bare_one),
            column(tandem_s, tandem_one),
            column(free_s, free_one),
            strict=True,
        )
    ]
    for what, key in zip(big, ("seconds", "preempted", "racks_touched"), strict=True):
        rows.append([f"big gang (8, QOS high): {what}", str(big_bare[key]), str(big_tandem[key]), "-"])
    print()
    header = ["64 nodes, 8 racks of 8", "bare Slurm (same options)", "Tandem", "Tandem, no ask"]
    print(format_table([header, *rows]))
    result = {
        "gangs": len(sizes),
        "tandem_in_one_domain": tandem_one,
        "bare_in_one_domain": bare_one,
        "share_in_one_domain": round(tandem_one / len(sizes), 3),
        "bare_p50": round(statistics.median(bare_s), 3),
        "bare_p99": round(percentile(bare_s, 0.99), 3),
        "tandem_p50": round(statistics.median(tandem_s), 3),
        "tandem_p99": round(percentile(tandem_s, 0.99), 3),
        "no_ask_in_one_domain": free_one,
        "no_ask_p50": round(statistics.median(free_s), 3),
        "no_ask_p99": round(percentile(free_s, 0.99), 3),
        "big_gang_bare": big_bare,
        "big_gang_tandem": big_tandem,
        "churn_jobs": args.churn_jobs,
        "churn_pods": args.churn_pods,
    }
    met = tandem_one == len(sizes) and big_tandem["racks_touched"] <= 1 and big_tandem["in_one_rack"]
    print(
        "\ntarget: every gang in one rack, the big gang preempting in one rack:"
        f" {'met' if met else 'NOT met'}"
    )
    print(json.dumps({**result, "target_met": met}))


if __name__ == "__main__":
    main()
