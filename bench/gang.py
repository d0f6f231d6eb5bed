"""Gang latency on four arms (issue 55): a group of Pods placed as one, beside the same group as
one Slurm job, in one run on one stack.

For gangs of 2, 4 and 8 members (one node each), a heterogeneous row (--het, default 1+3: a leader
of 4 CPUs and workers of 1) and two elastic rows (bench/elastic.py; --no-elastic for none):
  truly-bare      - a multi-node (or het) Slurm job to slurmrestd, Slurm without Tandem's prolog
                    and epilog, from submit to its script running (the script writes the time);
  bare            - the same job in a Tandem cluster;
  kube-scheduler  - the same PodGroup (gang, minCount = size; a het row's CompositePodGroup) and
                    members placed by kube-scheduler's own gang scheduling, each member kept off
                    the others' Nodes as a job's nodes are; from the last member's creation to
                    every member bound (seen on a watch);
  tandem          - the same, placed by Tandem: one Slurm job for the group.
Elastic rows (kube-scheduler has none: they measure Slurm starting or taking back a member's job):
  room      - an elastic gang's extra member bound once Slurm has room (Slurm arms: a waiting job);
  take-back - a high tier asking the extra's node: its job running, and the extra's Pod gone.
Every trial starts from an idle cluster (each Slurm node idle for a second: Slurm schedules at most
every 250 ms here, so a trial does not inherit the last one's pass); the arms are interleaved
round by round (bench/arms.py). A Tandem trial is checked: each member on a node of its group's
Slurm job, members on Nodes of their own, nothing left locked after.

    make up && .venv/bin/python bench/gang.py --rounds 5

Prints a table, then one JSON line (bench/arms.result): per row and arm, the medians and their
bootstrap 95 % intervals, and every trial.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench import arms as arms_harness
from bench import checks, elastic
from bench.arms import TrialFailed
from bench.lifecycle import ARMS, BARE, KUBE_SCHEDULER, TANDEM, TRULY_BARE
from bench.schedule import ensure_namespace, left_clean, slurm_client, wait_for_no_jobs
from devstack import config
from devstack import kube as devkube
from devstack.config import StackConfig
from tandem import keys
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


class Members:
    """A watch of when each Pod named `<group>-...` is bound, and the Pod as bound."""

    def __init__(self, raw: KubeClient, group: str, size: int) -> None:
        self.raw, self.group, self.size = raw, group, size
        self.bound: dict[str, float] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.everyone = threading.Event()
        version = raw.get(PODS)["metadata"]["resourceVersion"]
        threading.Thread(target=self._watch, args=(version,), daemon=True).start()

    def _watch(self, version: str) -> None:
        for event in self.raw.watch(PODS, {"resourceVersion": version}, 150):
            obj = event.get("object") or {}
            name = str((obj.get("metadata") or {}).get("name") or "")
            if name.startswith(f"{self.group}-") and (obj.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, time.time())
                self.pods.setdefault(name, obj)
                if len(self.bound) == self.size:
                    self.everyone.set()
                    return

    def wait(self, timeout: float = 120.0) -> None:
        if not self.everyone.wait(timeout):
            raise TrialFailed(
                f"{self.group}: only {len(self.bound)} of {self.size} members bound after {timeout:.0f} s"
            )


def group_bound(cfg: StackConfig, raw: KubeClient, size: int, group: str, scheduler: str) -> dict[str, float]:
    """Seconds from the last member's creation to every member bound, for a PodGroup (gang,
    minCount = size) placed by `scheduler`; checked: each member on a Node of its own, and for
    Tandem on a node of the group's Slurm job, nothing left locked after."""
    wait_idle(cfg)
    members = Members(raw, group, size)
    raw.post(
        podgroups(cfg),
        {
            "apiVersion": "/".join(devkube.podgroup_api(cfg)),
            "kind": "PodGroup",
            "metadata": {"name": group},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        },
    )
    names = [f"{group}-{i}" for i in range(size)]
    try:
        last = 0.0
        for name in names:
            raw.post(PODS, _member(cfg, name, group, scheduler=scheduler))
            last = time.time()
        members.wait()
        latency = max(members.bound.values()) - last
        problems = placed(cfg, members.pods, scheduler)
    finally:
        _end(cfg, raw, names, [f"{podgroups(cfg)}/{group}"])
    problems += _left_clean(cfg, scheduler)
    if problems:
        raise TrialFailed("; ".join(problems))
    return {"seconds": latency}


def group_het_bound(
    cfg: StackConfig, raw: KubeClient, het: tuple[int, int], group: str, scheduler: str
) -> dict[str, float]:
    """Seconds from the last member's creation to every member bound, for a CompositePodGroup of
    a leader PodGroup and a worker PodGroup of these sizes, placed by `scheduler`."""
    wait_idle(cfg)
    members = Members(raw, group, sum(het))
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
    names = [f"{child}-{i}" for child, count in children.items() for i in range(count)]
    try:
        last = 0.0
        for name in names:
            cpu = str(LEADER_CPUS) if "-leader-" in name else "1"
            raw.post(PODS, _member(cfg, name, name.rsplit("-", 1)[0], cpu, scheduler, spread_as=group))
            last = time.time()
        members.wait()
        latency = max(members.bound.values()) - last
        problems = placed(cfg, members.pods, scheduler)
    finally:
        _end(cfg, raw, names, [*(f"{podgroups(cfg)}/{c}" for c in children), f"{composites()}/{group}"])
    problems += _left_clean(cfg, scheduler)
    if problems:
        raise TrialFailed("; ".join(problems))
    return {"seconds": latency}


def placed(cfg: StackConfig, pods: dict[str, dict[str, Any]], scheduler: str) -> list[str]:
    """Every member on a Node of its own; Tandem's on a node of the Slurm job they name."""
    hosts = [str(p["spec"]["nodeName"]) for p in pods.values()]
    wrong = [f"{len(hosts) - len(set(hosts))} members share a Node"] if len(set(hosts)) < len(hosts) else []
    if scheduler != cfg.scheduler_name:
        return wrong
    slurm = slurm_client(cfg)
    try:
        jobs = {j.job_id: j for j in slurm.list_jobs() or []}
    finally:
        slurm.close()
    kube_node_of = checks.kube_node_of(
        raw := KubeClient.from_kubeconfig(str(cfg.kubeconfig)), config.SLURM_NAMESPACE
    )
    raw.close()
    for name, pod in sorted(pods.items()):
        job = jobs.get(job_id) if (job_id := keys.recorded_job_id(pod)) is not None else None
        if job is None:
            wrong.append(f"{name} is bound with no Slurm job")
            continue
        # A het job's members name its first component; its nodes are all its components'.
        components = [jobs[i] for i in job.het_job_ids if i in jobs] or [job]
        nodes = {n for c in components for n in c.nodes}
        if pod["spec"]["nodeName"] not in {kube_node_of.get(n) for n in nodes}:
            wrong.append(f"{name} is bound to {pod['spec']['nodeName']}, not to a node of Slurm job {job_id}")
    return wrong


def _end(cfg: StackConfig, raw: KubeClient, pods: list[str], groups: list[str]) -> None:
    for name in pods:
        with contextlib.suppress(KubeError):
            raw.delete(f"{PODS}/{name}", {"gracePeriodSeconds": 0})
    for path in groups:
        with contextlib.suppress(KubeError):
            raw.delete(path)
    slurm = slurm_client(cfg)
    try:
        wait_for_no_jobs(slurm, "tandem:")
    finally:
        slurm.close()
    _wait_for_no_pods(raw)


def _left_clean(cfg: StackConfig, scheduler: str) -> list[str]:
    return left_clean(cfg) if scheduler == cfg.scheduler_name else []


COMPOSITE_GROUP_VERSION = "scheduling.k8s.io/v1alpha3"


def composites() -> str:
    return f"/apis/{COMPOSITE_GROUP_VERSION}/namespaces/{NAMESPACE}/compositepodgroups"


def _member(
    cfg: StackConfig,
    name: str,
    group: str,
    cpu: str = "1",
    scheduler: str | None = None,
    spread_as: str | None = None,
) -> dict[str, Any]:
    """A member of PodGroup `group`. For kube-scheduler, kept off its group's other members'
    Nodes (`spread_as`: the label they share, the group's by default), as a gang of N nodes is
    for Slurm: else it packs them onto one Node."""
    scheduler = scheduler or cfg.scheduler_name
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": scheduler,
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
    if scheduler != cfg.scheduler_name:
        label = {SPREAD_LABEL: spread_as or group}
        pod["metadata"]["labels"] = label
        pod["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": label}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    return pod


SPREAD_LABEL = "bench.tandem.dev/gang"


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
    parser.add_argument("--rounds", "--repeat", type=int, default=5, help="interleaved rounds of every arm")
    parser.add_argument("--sizes", default="2,4,8", help="group sizes (members = nodes)")
    parser.add_argument(
        "--het", default="1+3", help="a heterogeneous row: leader+workers members ('' for none)"
    )
    parser.add_argument(
        "--no-elastic", action="store_true", help="no elastic rows (an extra member's start and take-back)"
    )
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"no arm {', '.join(sorted(unknown))}; the arms are {', '.join(ARMS)}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    het = None
    if args.het:
        first, _, rest = args.het.partition("+")
        het = (int(first), int(rest))
    largest = max([*sizes, sum(het or (0,))])
    if largest > cfg.nodes:
        raise SystemExit(f"a group of {largest} needs {largest} nodes; this stack has {cfg.nodes}")
    ensure_namespace(cfg)
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    try:
        raw.get(podgroups(cfg))
    except (KubeError, httpx.HTTPError) as e:
        raise SystemExit(f"this cluster serves no PodGroups ({e}): the lab's `make up` enables them") from e
    if het is not None:
        try:
            raw.get(composites())
        except (KubeError, httpx.HTTPError) as e:
            print(f"no heterogeneous row: this cluster serves no CompositePodGroups ({e})")
            het = None
    rows = trials(cfg, raw, sizes, het, elastic_rows=not args.no_elastic)
    tried = arms_harness.run(cfg, arms, args.rounds, rows, say=lambda line: print(line, flush=True))
    raw.close()
    result = arms_harness.result(tried, FIGURES, args.rounds, about=ABOUT)
    print()
    print(arms_harness.text_table(result))
    print(json.dumps(result))


FIGURES = (("seconds", "to running (Slurm) or all bound s"), ("pod_gone", "the extra's Pod gone s"))
ABOUT = "gangs of 2, 4 and 8 nodes, a het job of 1+3, and an elastic gang's extra member"


def trials(
    cfg: StackConfig, raw: KubeClient, sizes: list[int], het: tuple[int, int] | None, elastic_rows: bool
) -> dict[str, dict[str, arms_harness.Trial]]:
    """Each row's trial per arm it applies to. kube-scheduler has no elastic rows: what they
    measure is Slurm starting or taking back a member's job."""
    kube = "default-scheduler"

    def job(nodes: int, het: tuple[int, int] | None = None) -> arms_harness.Trial:
        return lambda r: {"seconds": bare(cfg, nodes, het)}

    def group(size: int, scheduler: str, tag: str) -> arms_harness.Trial:
        return lambda r: group_bound(cfg, raw, size, f"{tag}-{size}-{r}", scheduler)

    def het_group(h: tuple[int, int], scheduler: str, tag: str) -> arms_harness.Trial:
        return lambda r: group_het_bound(cfg, raw, h, f"{tag}-{r}", scheduler)

    rows: dict[str, dict[str, arms_harness.Trial]] = {}
    for size in sizes:
        rows[f"{size} members"] = {
            TRULY_BARE: job(size),
            BARE: job(size),
            KUBE_SCHEDULER: group(size, kube, "k"),
            TANDEM: group(size, cfg.scheduler_name, "t"),
        }
    if het is not None:
        rows[f"het {het[0]}+{het[1]}"] = {
            TRULY_BARE: job(sum(het), het),
            BARE: job(sum(het), het),
            KUBE_SCHEDULER: het_group(het, kube, "kh"),
            TANDEM: het_group(het, cfg.scheduler_name, "th"),
        }
    if elastic_rows:

        def room_bare(r: int) -> dict[str, float]:
            wait_idle(cfg)
            return {"seconds": elastic.bare_room(cfg)}

        def room_tandem(r: int) -> dict[str, float]:
            wait_idle(cfg)
            return {"seconds": elastic.tandem_room(cfg, raw, NAMESPACE, r, _member)}

        def back_bare(r: int) -> dict[str, float]:
            wait_idle(cfg)
            return {"seconds": elastic.bare_take_back(cfg)}

        def back_tandem(r: int) -> dict[str, float]:
            wait_idle(cfg)
            try:
                gone, started = elastic.tandem_take_back(cfg, raw, NAMESPACE, r, _member)
            finally:
                _wait_for_no_pods(raw)
            return {"seconds": started, "pod_gone": gone}

        rows["elastic: room -> extra running (Slurm: the waiting job)"] = {
            TRULY_BARE: room_bare,
            BARE: room_bare,
            TANDEM: room_tandem,
        }
        rows["elastic: a high tier asks the extra's node -> its job running"] = {
            TRULY_BARE: back_bare,
            BARE: back_bare,
            TANDEM: back_tandem,
        }
    return rows


if __name__ == "__main__":
    main()
