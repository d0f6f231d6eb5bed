"""What a benchmark run must have done right for its figures to count (issue 55): every Pod bound,
each once, on a node of its own Slurm job, and nothing left locked or running once it is over. A
run that fails one is recorded as failed (bench/record.py) and BENCHMARKS.md says so beside it.

The judgements are pure (`placements`, `bindings`, `leftovers`); `snapshot` reads the lab."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tandem import keys, slurmd
from tandem.kube import JSON, KubeClient
from tandem.slurm.models import Job


@dataclass(frozen=True)
class Snapshot:
    """The benchmark's Pods, the Slurm jobs, and where each Slurm node's slurmd runs."""

    pods: tuple[JSON, ...]
    jobs: Mapping[int, Job]
    kube_node_of: Mapping[str, str]


def placements(snap: Snapshot) -> list[str]:
    """Each bound Pod on a Node of the running Slurm job its annotation names, the job named
    after the Pod (its uid)."""
    wrong: list[str] = []
    for pod in snap.pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        name, node = str(meta.get("name")), spec.get("nodeName")
        if not node:
            continue
        job_id = keys.recorded_job_id(pod)
        job = snap.jobs.get(job_id) if job_id is not None else None
        if job is None:
            wrong.append(f"{name} is bound with no Slurm job of its own")
        elif str(meta.get("uid")) not in job.name:
            wrong.append(f"{name} is bound for Slurm job {job_id}, another Pod's")
        elif node not in {snap.kube_node_of.get(n) for n in job.nodes}:
            wrong.append(f"{name} is bound to {node}, not to a node of its Slurm job {job_id}")
    return wrong


def bindings(bound: Iterable[str], counted: Counter[str]) -> list[str]:
    """Each bound Pod bound by exactly one request (the API server's count: a second binding of a
    Pod is a scheduler that lost track of it)."""
    return [
        f"{name} was bound {counted[name]} times"
        if counted[name]
        else f"{name} was bound by no request logged"
        for name in sorted(bound)
        if counted[name] != 1
    ]


def unbound(names: Iterable[str], bound: Iterable[str]) -> list[str]:
    missing = sorted(set(names) - set(bound))
    if not missing:
        return []
    shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
    return [f"{len(missing)} Pods never bound ({shown})"]


def leftovers(slurmd_pods: Iterable[JSON], nodes: Iterable[JSON], live_jobs: Iterable[Job]) -> list[str]:
    """After the run: no Slurm job of Tandem's running, no node locked, no Node tainted."""
    said = [f"Slurm job {j.job_id} ({j.name}) still {j.state}" for j in live_jobs]
    for pod in slurmd_pods:
        lock = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.LOCK_KEY, "false")
        if lock != keys.LockState.FALSE:
            said.append(f"{pod['metadata']['name']} is still {lock}")
    for node in nodes:
        if any(t.get("key") == keys.LOCK_KEY for t in (node.get("spec") or {}).get("taints") or []):
            said.append(f"Node {node['metadata']['name']} still has the lock taint")
    return said


def slurmd_pods(raw: KubeClient, namespace: str) -> list[JSON]:
    items = raw.get(f"/api/v1/namespaces/{namespace}/pods").get("items") or []
    return [p for p in items if slurmd.slurm_node_of(p, namespace) is not None]


def kube_node_of(raw: KubeClient, slurmd_namespace: str) -> dict[str, str]:
    """Each Slurm node -> the Node its slurmd Pod runs on."""
    return {
        str(slurmd.slurm_node_of(p, slurmd_namespace)): slurmd.host_of(p)
        for p in slurmd_pods(raw, slurmd_namespace)
    }


def snapshot(raw: KubeClient, pods_path: str, slurmd_namespace: str, jobs: Iterable[Job]) -> Snapshot:
    return Snapshot(
        pods=tuple(raw.get(pods_path).get("items") or []),
        jobs={j.job_id: j for j in jobs},
        kube_node_of=kube_node_of(raw, slurmd_namespace),
    )
