"""Topology-aware gangs on four arms (issues 38, 55): gangs asking for one rack among a churn of
plain Slurm jobs, and a big high-QOS gang freeing a whole rack by preemption.

The benchmark labels the stack's 64 Nodes into 8 racks of 8 (one zone) and waits for the syncer to
give Slurm that topology and every node its rack feature. Then, with a churn of plain 1-node
whole-node jobs of 2-5 s kept running (--churn-jobs), a gang of each --sizes asks for one
topology.kubernetes.io/rack:
  truly-bare      - one job of `size` nodes to slurmrestd with the constraint Tandem gives such a
                    gang (the matching OR of the racks with room), Slurm without Tandem's prolog
                    and epilog; from submit to its script running;
  bare            - the same job in a Tandem cluster;
  kube-scheduler  - the same PodGroup (gang, its spec.schedulingConstraints asking for the rack)
                    placed by kube-scheduler's topology-aware workload scheduling, each member
                    kept off the others' Nodes; from the last member's creation to all bound;
  tandem          - the same PodGroup placed by Tandem (the annotation on Kubernetes 1.36); each
                    member checked to be on a node of the group's Slurm job.
Then the churn stops, slurmctld switches to QOS preemption, and in each round, for each Slurm arm
and Tandem (kube-scheduler cannot preempt Slurm's jobs), every node gets a normal-QOS whole-node
job and a gang of 8 with QOS high asks for one rack: time to start, jobs preempted, racks those
jobs ran in. The arms are interleaved round by round (bench/arms.py); a switch of slurm.conf
restarts Slurm, after which the nodes' rack features are waited for again.

    NODES=64 make up && .venv/bin/python bench/topology.py --rounds 5

Prints a table, then one JSON line (bench/arms.result).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import arms as arms_harness
from bench.arms import TrialFailed
from bench.gang import PODS, _member, _wait_for_no_pods, placed, podgroups
from bench.lifecycle import ARMS, BARE, KUBE_SCHEDULER, TANDEM, TRULY_BARE
from bench.schedule import ensure_namespace, slurm_client, wait_for_no_jobs
from devstack import config
from devstack import kube as devkube
from devstack import slurm as devstack_slurm
from devstack.config import StackConfig
from tandem import keys, topology
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmApiError, SlurmRestClient

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


def _pod(
    cfg: StackConfig,
    name: str,
    annotations: dict[str, str],
    labels: dict[str, str],
    scheduler: str | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """A bench Pod; a gang member (of PodGroup `group`) placed by kube-scheduler is kept off its
    group's other members' Nodes, as a job's nodes are (bench/gang.py)."""
    if group is not None:
        pod = _member(cfg, name, group, scheduler=scheduler)
        pod["metadata"].setdefault("labels", {}).update(labels)
        pod["metadata"]["annotations"] = annotations
        return pod
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "annotations": annotations, "labels": labels},
        "spec": {
            "schedulerName": scheduler or cfg.scheduler_name,
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
    """Plain whole-node Slurm jobs of 2-5 s, kept at a level, on every arm alike."""

    def __init__(self, cfg: StackConfig, jobs: int) -> None:
        self.cfg, self.jobs = cfg, jobs
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._jobs, daemon=True)]
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
    scheduler: str | None = None,
) -> tuple[float, set[str], list[str]]:
    """Seconds from the last member's creation to every member bound, the racks of their nodes,
    and what the placement check found wrong; the gang asks for one rack. `scheduler`: Tandem's
    unless named (kube-scheduler reads the same PodGroup's constraint: its topology-aware
    workload scheduling)."""
    scheduler = scheduler or cfg.scheduler_name
    annotations = {PREFIX + "qos": qos} if qos else {}
    podgroup = _podgroup_with_constraints(cfg) or scheduler != cfg.scheduler_name
    if podgroup:
        raw.post(
            podgroups(cfg),
            {
                "apiVersion": "/".join(devkube.podgroup_api(cfg)),
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": size}},
                    "schedulingConstraints": {"topology": [{"key": RACK}]},
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
            pod = _pod(cfg, member, dict(annotations), {}, scheduler, group=name)
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
    try:
        bound = binds.wait(names, 180)
        latency = max(at for at, _ in bound) - last
        kube_to_slurm = {config.kube_node_name(i): config.slurm_node_name(i) for i in range(cfg.nodes)}
        racks = {_rack_of(t, kube_to_slurm[node]) for _, node in bound}
        wrong = placed(cfg, {m: raw.get(f"{PODS}/{m}") for m in names}, scheduler)
    finally:
        for member in names:
            with contextlib.suppress(KubeError):
                raw.delete(f"{PODS}/{member}", {"gracePeriodSeconds": 0})
        if podgroup:
            with contextlib.suppress(KubeError):
                raw.delete(f"{podgroups(cfg)}/{name}")
    return latency, racks, wrong


_CONSTRAINTS_SERVED: dict[str, bool] = {}


def _podgroup_with_constraints(cfg: StackConfig) -> bool:
    """Kubernetes 1.37 keeps a PodGroup's spec.schedulingConstraints; 1.36 drops it."""
    if "served" not in _CONSTRAINTS_SERVED:
        _CONSTRAINTS_SERVED["served"] = devkube.podgroup_api(cfg)[1] != "v1alpha2"
    return _CONSTRAINTS_SERVED["served"]


def big_gang(
    cfg: StackConfig, raw: KubeClient, binds: Binds, t: topology.Topology, tandem: bool, run: int = 0
) -> dict[str, float]:
    """A full cluster of normal-QOS jobs, then a gang of one rack with QOS high: seconds to start,
    jobs preempted, and the racks they ran in."""
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
        try:
            if tandem:
                seconds, racks, wrong = tandem_gang(
                    cfg, raw, binds, t, f"big-gang-{run}", RACK_SIZE, qos="high"
                )
            else:
                seconds, racks, _ = bare_gang(slurm, cfg, t, RACK_SIZE, qos="high")
                wrong = []
            states = slurm.job_states(fill)
        finally:
            for job in fill:
                with contextlib.suppress(SlurmApiError):
                    slurm.cancel_job(job, signal="KILL")
        preempted = [j for j in fill if states.get(j, ("",))[0] != "RUNNING"]
        touched = {_rack_of(t, config.slurm_node_name(fill.index(j))) for j in preempted}
        wait_for_no_jobs(slurm, "bench-topo-")
        wait_for_no_jobs(slurm, "tandem:")
        if wrong:
            raise TrialFailed("; ".join(wrong))
        return {
            "seconds": seconds,
            "preempted": len(preempted),
            "racks_touched": len(touched),
            "in_one_rack": float(len(racks) == 1),
        }
    finally:
        slurm.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="2,4,8", help="gang sizes among the churn, a row each")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of every arm")
    parser.add_argument("--churn-jobs", type=int, default=24, help="plain whole-node jobs kept running")
    parser.add_argument("--no-big-gang", action="store_true", help="no big-gang rows")
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    if cfg.nodes < 64:
        raise SystemExit(f"needs 64 nodes (NODES=64 make up); this stack has {cfg.nodes}")
    chosen = [a for a in args.arms.split(",") if a]
    if unknown := set(chosen) - set(ARMS):
        raise SystemExit(f"no arm {', '.join(sorted(unknown))}; the arms are {', '.join(ARMS)}")
    sizes = [int(n) for n in args.sizes.split(",") if n]
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    known = {"t": label_racks(cfg, raw)}
    binds = Binds(raw)

    def say(line: str) -> None:
        print(line, flush=True)

    @contextlib.contextmanager
    def racked(arm: str) -> Iterator[None]:
        # A switch of slurm.conf restarts Slurm, which drops the nodes' rack features until the
        # syncer gives them back: waited for before the arm's trials.
        known["t"] = label_racks(cfg, raw)
        yield

    @contextlib.contextmanager
    def churning(arm: str) -> Iterator[None]:
        with racked(arm):
            churn = Churn(cfg, args.churn_jobs)
            try:
                yield
            finally:
                churn.close()
                slurm = slurm_client(cfg)
                try:
                    wait_for_no_jobs(slurm, "bench-topo-")
                finally:
                    slurm.close()

    tried = arms_harness.run(
        cfg, chosen, args.rounds, churn_rows(cfg, raw, binds, known, sizes), say, churning
    )
    _wait_for_no_pods(raw)
    if not args.no_big_gang:
        cfg = devstack_slurm.switch_preemption(cfg, "qos")
        try:
            big = [a for a in chosen if a != KUBE_SCHEDULER]
            tried += arms_harness.run(cfg, big, args.rounds, big_rows(cfg, raw, binds, known), say, racked)
        finally:
            cfg = devstack_slurm.switch_preemption(cfg, "partition_prio")
    binds.stop.set()
    unlabel(cfg, raw)
    raw.close()
    about = f"64 nodes in 8 racks of 8; {args.churn_jobs} plain whole-node jobs of 2-5 s kept running"
    result = arms_harness.result(tried, FIGURES, args.rounds, about=about, churn_jobs=args.churn_jobs)
    print()
    print(arms_harness.text_table(result))
    print(json.dumps(result))


FIGURES = (
    ("seconds", "to running (Slurm) or all bound s"),
    ("in_one_rack", "in one rack"),
    ("preempted", "jobs preempted"),
    ("racks_touched", "racks preempted in"),
)


def churn_rows(
    cfg: StackConfig, raw: KubeClient, binds: Binds, known: dict[str, topology.Topology], sizes: list[int]
) -> dict[str, dict[str, arms_harness.Trial]]:
    """A gang of each size asking for one rack, among the churn: as one Slurm job with the
    constraint Tandem gives such a gang (both Slurm arms), as the same PodGroup for
    kube-scheduler and for Tandem."""

    def job(size: int) -> arms_harness.Trial:
        def run(r: int) -> dict[str, float]:
            slurm = slurm_client(cfg)
            try:
                seconds, racks, _ = bare_gang(slurm, cfg, known["t"], size)
            finally:
                slurm.close()
            return {"seconds": seconds, "in_one_rack": float(len(racks) == 1)}

        return run

    def gang(size: int, scheduler: str, tag: str) -> arms_harness.Trial:
        def run(r: int) -> dict[str, float]:
            seconds, racks, wrong = tandem_gang(
                cfg, raw, binds, known["t"], f"{tag}-{size}-{r}", size, scheduler=scheduler
            )
            if wrong:
                raise TrialFailed("; ".join(wrong))
            return {"seconds": seconds, "in_one_rack": float(len(racks) == 1)}

        return run

    return {
        f"gang of {size} asking one rack, among churn": {
            TRULY_BARE: job(size),
            BARE: job(size),
            KUBE_SCHEDULER: gang(size, "default-scheduler", "k"),
            TANDEM: gang(size, cfg.scheduler_name, "t"),
        }
        for size in sizes
    }


def big_rows(
    cfg: StackConfig, raw: KubeClient, binds: Binds, known: dict[str, topology.Topology]
) -> dict[str, dict[str, arms_harness.Trial]]:
    """Every node holding a normal-QOS job, a gang of one rack with QOS high (Slurm's QOS
    preemption: kube-scheduler cannot preempt Slurm's jobs, so it has no arm here)."""

    def big(tandem: bool) -> arms_harness.Trial:
        return lambda r: big_gang(cfg, raw, binds, known["t"], tandem, r)

    return {
        f"big gang of {RACK_SIZE}, QOS high, in a full cluster": {
            TRULY_BARE: big(False),
            BARE: big(False),
            TANDEM: big(True),
        }
    }


if __name__ == "__main__":
    main()
