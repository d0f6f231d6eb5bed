"""What `kubectl tandem` shows, decided from the facts alone (no I/O): the rows of `get` and
`nodes`, and the sections of `describe`."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from tandem import keys, placeholder, reasons, topology
from tandem.cli import kueue
from tandem.cli.facts import Facts
from tandem.dra import gpuhealth, gres
from tandem.dra.claims import SHARED_GRES
from tandem.dra.slices import NodeDevices
from tandem.kube import JSON, parse_rfc3339, pod_finished
from tandem.slurm import queue
from tandem.slurm.models import JobStatus
from tandem.topology import Domain, Topology

REFUSED = frozenset(reasons.REFUSED_REASONS)
_SLURM_REASON = re.compile(r" is pending: ([^;]+)")

POD_COLUMNS = (
    "NAMESPACE",
    "POD",
    "GROUP",
    "JOB",
    "JOB STATE",
    "REASON",
    "QUEUE",
    "SLURM NODE",
    "NODE",
    "LOCK",
    "AGE",
)
# Only when some Pod's Job (or Pod group) was admitted by Kueue: after JOB, its Workload and where
# Kueue's admission of it stands.
WORKLOAD_COLUMN = "WORKLOAD"
TOPOLOGY_COLUMNS = ("DOMAIN", "LABEL", "NODES", "FREE", "BUSY", "DOWN", "SLURM NAME")


def topology_rows(facts: Facts, t: Topology) -> list[dict[str, str]]:
    """The tree, widest domains first, each under its parent (indented): its nodes, and which are
    free, busy (running a job) or drained/down as Slurm says (Slurm's view needs the syncer)."""
    rows: list[dict[str, str]] = []

    def add(d: Domain, depth: int) -> None:
        free, busy, down = _states(facts, d.nodes)
        rows.append(
            {
                "DOMAIN": "  " * depth
                + (d.value or ("(no label)" if d.unlabelled else f"({d.nodes[0]} alone)")),
                "LABEL": d.key,
                "NODES": str(len(d.nodes)),
                "FREE": ",".join(free),
                "BUSY": ",".join(busy),
                "DOWN": ",".join(down),
                "SLURM NAME": d.name,
            }
        )
        for child in d.children:
            add(t.by_name[child], depth + 1)

    for top in t.at_level(0):
        add(top, 0)
    return rows


def missing_labels(facts: Facts, t: Topology) -> list[str]:
    """One line per level some Nodes carry no label of, naming them and what Slurm makes of it:
    what a person labelling racks only (no zone) must be told, since nothing else shows it."""
    kube_node_of = {slurm: kube for kube, slurm in facts.slurm_node_of.items()}
    lines = []
    for key, slurm_nodes in topology.unlabelled(t).items():
        level = t.levels.index(key)
        shared = {n for d in t.at_level(level) if d.unlabelled for n in d.nodes}
        named = ", ".join(kube_node_of.get(n, n) for n in slurm_nodes)
        if shared >= set(slurm_nodes):
            meaning = f"one {key} domain for them all (a narrower label places each)"
        elif not shared:
            meaning = f"each its own {key} domain (no narrower label says which share one)"
        else:
            meaning = f"one {key} domain for those with a narrower label, each its own for those with none"
        lines.append(f"{len(slurm_nodes)} Node(s) without a {key} label: {named}: {meaning}.")
    return lines


def _states(facts: Facts, nodes: tuple[str, ...]) -> tuple[list[str], list[str], list[str]]:
    if facts.slurm is None:
        return list(nodes), [], []  # without Slurm's view: all listed as the domain's
    free, busy, down = [], [], []
    for n in nodes:
        known = facts.slurm.nodes.get(n)
        if known is not None and (known.drained or known.state == "DOWN"):
            down.append(n)
        elif known is not None and known.busy:
            busy.append(n)
        else:
            free.append(n)
    return free, busy, down


def scheduled_condition(pod: JSON) -> JSON:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return {}


def job_id(pod: JSON) -> int | None:
    return keys.recorded_job_id(pod)


def node_of(pod: JSON) -> str:
    """The Node the Pod runs on, or the one its job's allocation nominated while the prolog runs."""
    return str(
        (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("nominatedNodeName") or ""
    )


def job_state(pod: JSON, job: JobStatus | None) -> str:
    """Slurm's state when the syncer was asked; else what the Pod says of its job."""
    if job is not None:
        return job.state_name
    if job_id(pod) is None or pod_finished(pod):
        return ""  # a finished Pod's job is cancelled: the Pod cannot tell how far that got
    if node_of(pod):
        return "RUNNING"
    if scheduled_condition(pod).get("reason") in (reasons.REASON_PENDING, reasons.REASON_UNSCHEDULABLE):
        return "PENDING"
    return ""


def reason(pod: JSON) -> str:
    """Why it is not running: Slurm's reason while its job pends, else Tandem's."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    if status.get("phase") in ("Succeeded", "Failed"):
        return str(status["phase"])
    if (pod.get("spec") or {}).get("nodeName"):
        return ""
    if status.get("nominatedNodeName"):
        return "Prolog"  # allocated: the prolog locks the Node
    cond = scheduled_condition(pod)
    if cond.get("status") != "False":
        return ""
    if cond.get("reason") == reasons.REASON_PENDING:
        m = _SLURM_REASON.search(str(cond.get("message", "")))
        return m.group(1) if m else reasons.REASON_PENDING
    return str(cond.get("reason", ""))


def age(created: object, now: dt.datetime) -> str:
    """As kubectl prints it: 42s, 7m, 3h, 12d."""
    at = parse_rfc3339(created)
    if at is None:
        return ""
    seconds = max(0, int((now - at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "d" else 1):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def pod_row(facts: Facts, pod: JSON, now: dt.datetime) -> dict[str, str]:
    meta = pod.get("metadata") or {}
    job = job_id(pod)
    status = facts.slurm.jobs.get(job) if facts.slurm is not None and job is not None else None
    node = node_of(pod)
    slurm_node = facts.slurm_node_of.get(node, "")
    return {
        "NAMESPACE": str(meta.get("namespace", "")),
        "POD": str(meta.get("name", "")),
        "GROUP": _group(pod, status),
        "JOB": "" if job is None else str(job),
        "JOB STATE": job_state(pod, status),
        "REASON": reason(pod),
        "QUEUE": queue.read_message(str(scheduled_condition(pod).get("message", ""))).position
        if not node
        else "",
        "SLURM NODE": slurm_node,
        "NODE": node,
        "LOCK": facts.lock_of(slurm_node) if slurm_node else "",
        "AGE": age(meta.get("creationTimestamp"), now),
        WORKLOAD_COLUMN: str(kueue.of_pod(pod, facts.workloads) or ""),
    }


def _group(pod: JSON, job: JobStatus | None) -> str:
    """The group the Pod names; an elastic gang's extra member (on a job of its own beside its
    core's, which Slurm takes back first) says so, when the syncer showed its job."""
    group = placeholder.group_name(pod) or ""
    if group and job is not None and placeholder.extra_member_of(job.job):
        return f"{group} (extra)"
    return group


def pod_columns(rows: list[dict[str, str]], all_namespaces: bool) -> tuple[str, ...]:
    """`get`'s columns: NAMESPACE with -A, WORKLOAD beside JOB where Kueue admitted any of them."""
    columns = POD_COLUMNS if all_namespaces else POD_COLUMNS[1:]
    if not any(r.get(WORKLOAD_COLUMN) for r in rows):
        return columns
    at = columns.index("JOB") + 1
    return (*columns[:at], WORKLOAD_COLUMN, *columns[at:])


def pod_rows(facts: Facts, now: dt.datetime) -> list[dict[str, str]]:
    rows = [pod_row(facts, p, now) for p in facts.pods]
    return sorted(rows, key=lambda r: (r["NAMESPACE"], r["GROUP"], r["POD"]))


# `kubectl tandem nodes`, as `kubectl get nodes` reads: short columns, counts rather than lists,
# so a row fits a terminal however many jobs and Pods a node runs. The lists are in `-o wide`
# (kubectl's way: the same columns, more after them), in `describe node` and in `-o json|yaml`.
# REASON is only there too: a drain reason is free text of any length.
NODE_COLUMNS = (
    "NODE",
    "SLURM NODE",
    "SLURM STATE",
    "LOCK",
    "JOBS",
    "PODS",
    "GPUS USED/TOTAL",
    "GPU HEALTH",
    "AGE",
)
NODE_WIDE_COLUMNS = (*NODE_COLUMNS, "REASON", "JOB IDS", "GPU IDX=JOB", "UNHEALTHY GPUS", "POD NAMES")


@dataclass(frozen=True)
class NodeView:
    """One Node as `nodes` and `describe node` show it, every list whole."""

    name: str
    node: JSON
    slurm_node: str
    state: str
    reason: str
    lock: str
    # The jobs Slurm has on its Slurm node (those it holds, running or cleaning up) and those its
    # Pods name; its Tandem Pods (any phase), by namespace and name.
    jobs: tuple[int, ...]
    pods: tuple[JSON, ...]
    # The GPU indices each job holds there, Slurm's IDX (a Pod's claim gets those devices); None
    # without Slurm's view (the syncer's).
    held: tuple[tuple[tuple[int, ...], int], ...] | None
    # The SlurmGpuMismatch condition's message: the Node's GPUs and Slurm's GRES differ.
    disagree: str
    # Its GPUs as the ResourceSlices publish them (None: none; a str: why they cannot be numbered).
    devices: NodeDevices | str | None
    # Each unhealthy GPU by Slurm index and the sides that say so ("k8s", "slurm").
    unhealthy: dict[int, list[str]]
    # Shares of a GPU each job holds there (`gres/shard` or `gres/mps`): (GPU index, shares, job),
    # by index.
    shared: tuple[tuple[int, int, int], ...] = ()

    @property
    def gpus_used(self) -> float | None:
        """GPUs held by Slurm jobs on the node, a shared GPU counting the part of its shares in
        use; None without Slurm's view (the syncer's)."""
        if self.held is None:
            return None
        whole = {i for indices, _ in self.held for i in indices}
        taken: dict[int, int] = {}
        for index, shares, _ in self.shared:
            if index not in whole:
                taken[index] = taken.get(index, 0) + shares
        by_index = self.devices.by_index() if isinstance(self.devices, NodeDevices) else {}
        part = sum(
            min(1.0, n / by_index[i].shares) if i in by_index and by_index[i].shares else 1.0
            for i, n in taken.items()
        )
        return len(whole) + part

    @property
    def gpus_total(self) -> int | None:
        """The GPUs (and MIG slices) the Node publishes, numbered as Slurm numbers them."""
        return len(self.devices.devices) if isinstance(self.devices, NodeDevices) else None

    def holder(self, index: int) -> int | None:
        """The job holding GPU `index` (None: free, or unknown without Slurm's view)."""
        return next((job for indices, job in self.held or () if index in indices), None)


def node_view(facts: Facts, name: str) -> NodeView:
    node = facts.nodes.get(name) or {}
    slurm_node = facts.slurm_node_of.get(name, "")
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    state, why = "", str(annotations.get(keys.DRAIN_ANNOTATION, ""))
    jobs: set[int] = set()
    if facts.slurm is not None and slurm_node:
        known = facts.slurm.nodes.get(slurm_node)
        if known is not None:
            state = "+".join((known.state, *known.flags))
            why = known.reason or why
        jobs = {s.job_id for s in facts.slurm.jobs.values() if slurm_node in s.job.nodes and s.holds_nodes}
    elif why:
        state = "DRAINED"
    on_node = sorted(
        (p for p in facts.pods if node_of(p) == name),
        key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"].get("name", "")),
    )
    jobs |= {j for p in on_node if (j := job_id(p)) is not None}
    disagree = ""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == keys.GPU_MISMATCH_CONDITION and c.get("status") == "True":
            disagree = str(c.get("message", ""))
    devices = facts.gpus.get(name)
    unhealthy: dict[int, list[str]] = {}
    if isinstance(devices, NodeDevices):
        unhealthy = {g.index: ["k8s"] for g in gpuhealth.tainted_gpus(devices)}
        for index in gpuhealth.gpus_named(_slurm_drain(facts, name, slurm_node)):
            unhealthy.setdefault(index, []).append("slurm")
    return NodeView(
        name=name,
        node=node,
        slurm_node=slurm_node,
        state=state,
        reason=why,
        lock=facts.lock_of(slurm_node) if slurm_node else "",
        jobs=tuple(sorted(jobs)),
        pods=tuple(on_node),
        held=_held(facts, slurm_node),
        disagree=disagree,
        devices=devices,
        unhealthy=unhealthy,
        shared=_shared(facts, slurm_node),
    )


def node_views(facts: Facts) -> list[NodeView]:
    return [node_view(facts, name) for name in sorted(set(facts.nodes) | set(facts.slurm_node_of))]


def find_node(facts: Facts, name: str) -> str | None:
    """The Node `name` names: a Node, or the Node hosting the Slurm node of that name."""
    if name in facts.nodes or name in facts.slurm_node_of:
        return name
    return next((node for node, slurm in sorted(facts.slurm_node_of.items()) if slurm == name), None)


def node_rows(facts: Facts, now: dt.datetime, wide: bool = False) -> list[dict[str, str]]:
    """The `nodes` table: NODE_COLUMNS, or NODE_WIDE_COLUMNS when `wide`."""
    rows = []
    for v in node_views(facts):
        row = {
            "NODE": v.name,
            "SLURM NODE": v.slurm_node,
            "SLURM STATE": v.state,
            "LOCK": v.lock,
            "JOBS": str(len(v.jobs)),
            "PODS": str(len(v.pods)),
            "GPUS USED/TOTAL": _gpu_count(v),
            "GPU HEALTH": _gpu_health_short(v),
            "AGE": age((v.node.get("metadata") or {}).get("creationTimestamp"), now),
        }
        if wide:
            row |= {
                "REASON": v.reason,
                "JOB IDS": compress_indices(v.jobs),
                "GPU IDX=JOB": _gpu_map(v),
                "UNHEALTHY GPUS": _gpu_health(v) if v.unhealthy or isinstance(v.devices, str) else "",
                "POD NAMES": ",".join(_pod_name(p) for p in v.pods),
            }
        rows.append(row)
    return rows


def node_records(facts: Facts, now: dt.datetime) -> list[dict[str, Any]]:
    """`nodes -o json|yaml`: everything, the lists whole (job ids, Pods), for scripts."""
    return [
        {
            "NODE": v.name,
            "SLURM NODE": v.slurm_node,
            "SLURM STATE": v.state,
            "REASON": v.reason,
            "LOCK": v.lock,
            "JOBS": list(v.jobs),
            "GPUS": _gpu_map(v),
            "GPUS USED": None
            if v.gpus_used is None
            else float(_count(v.gpus_used))
            if v.shared
            else int(v.gpus_used),
            "GPUS TOTAL": v.gpus_total,
            "GPU HEALTH": _gpu_health(v),
            "PODS": [_pod_name(p) for p in v.pods],
            "AGE": age((v.node.get("metadata") or {}).get("creationTimestamp"), now),
        }
        for v in node_views(facts)
    ]


def _pod_name(pod: JSON) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata'].get('name', '')}"


def _held(facts: Facts, slurm_node: str) -> tuple[tuple[tuple[int, ...], int], ...] | None:
    """Which GPU indices each job holds on the node (Slurm's IDX), by index."""
    if facts.slurm is None or not slurm_node:
        return None
    held = []
    for status in facts.slurm.jobs.values():
        if slurm_node in status.job.nodes and status.holds_nodes and status.job.gres_detail:
            indices = gres.job_gpu_indices(status.job, slurm_node)
            if isinstance(indices, tuple) and indices:
                held.append((indices, status.job_id))
    return tuple(sorted(held))


def _shared(facts: Facts, slurm_node: str) -> tuple[tuple[int, int, int], ...]:
    """The shares of a GPU each job holds on the node (Slurm's shards or MPS), by GPU index."""
    if facts.slurm is None or not slurm_node:
        return ()
    found = []
    for status in facts.slurm.jobs.values():
        if slurm_node in status.job.nodes and status.holds_nodes and status.job.gres_detail:
            for name in SHARED_GRES.values():
                shares = gres.job_gpu_shares(status.job, slurm_node, name)
                if isinstance(shares, tuple):
                    found += [(s.index, s.used, status.job_id) for s in shares]
    return tuple(sorted(found))


def _count(value: float) -> str:
    # Whole GPUs as integers; a shared GPU's part to two places (`2.25`).
    return str(int(value)) if value == int(value) else f"{value:.2f}".rstrip("0")


def _gpu_count(v: NodeView) -> str:
    """`6/8`: GPUs held by Slurm jobs of those the Node publishes; `?` where a side is unknown
    (held: without the syncer; published: no ResourceSlice); `disagree` when the two disagree."""
    if v.disagree:
        return "disagree"
    used, total = v.gpus_used, v.gpus_total
    if total is None and not used:
        return ""  # no GPUs published, none held: a CPU node, or one Tandem cannot see GPUs of
    return f"{'?' if used is None else _count(used)}/{'?' if total is None else total}"


def _gpu_map(v: NodeView) -> str:
    """`0-1=12 4-7=20 3=31:4`: the GPU indices each job holds (`IDX=job:shares` for its shares of a
    shared GPU), or why Pods claiming GPUs are kept off."""
    if v.disagree:
        return f"disagree: {v.disagree}"
    whole = [f"{compress_indices(i)}={job}" for i, job in v.held or ()]
    return " ".join([*whole, *(f"{i}={job}:{n}" for i, n, job in v.shared)])


def _gpu_health(v: NodeView) -> str:
    """Each unhealthy GPU by Slurm index and the side that says so: `3:k8s` (a device taint keeps
    it from claims, and so Slurm drains the node), `5:slurm` (a Slurm drain names it, and so its
    device is tainted); "ok" when the Node's GPUs are all healthy, "" when it publishes none."""
    if v.devices is None:
        return ""
    if isinstance(v.devices, str):
        return f"unknown: {v.devices}"
    if not v.unhealthy:
        return "ok"
    return " ".join(f"{i}:{','.join(who)}" for i, who in sorted(v.unhealthy.items()))


def _gpu_health_short(v: NodeView) -> str:
    """The default column: `ok`, `2 unhealthy`, `unknown`; which ones in -o wide."""
    if v.devices is None:
        return ""
    if isinstance(v.devices, str):
        return "unknown"
    return f"{len(v.unhealthy)} unhealthy" if v.unhealthy else "ok"


def describe_node(facts: Facts, name: str, node_events: list[JSON], now: dt.datetime) -> dict[str, Any]:
    """The whole story of one Node, as `kubectl describe node` tells it: its Slurm node's state and
    reason, the lock, every job with the GPUs it holds, every Pod, each GPU's health."""
    v = node_view(facts, name)
    story: dict[str, Any] = {
        "Node": v.name,
        "Slurm node": v.slurm_node or "(none: no slurmd Pod runs on this Node)",
        "Slurm state": _slurm_state_line(facts, v),
        "Reason": v.reason or "(none)",
        "Lock": v.lock or "(none)",
        "GPUs": _gpus_line(v),
        "Jobs": [_job_line(facts, v, job) for job in v.jobs],
        "Pods": [
            {
                "Namespace": str(p["metadata"].get("namespace", "")),
                "Name": str(p["metadata"].get("name", "")),
                "Job": "" if (job := job_id(p)) is None else str(job),
                "Phase": "Terminating"
                if p["metadata"].get("deletionTimestamp")
                else str((p.get("status") or {}).get("phase", "")),
                "Age": age(p["metadata"].get("creationTimestamp"), now),
            }
            for p in v.pods
        ],
    }
    if isinstance(v.devices, NodeDevices):
        story["GPU health"] = _gpu_health_lines(v, v.devices)
    elif isinstance(v.devices, str):
        story["GPU health"] = f"unknown: {v.devices}"
    story["Lock history"] = [_event_line(e, now) for e in node_events] or ["(no lock Events)"]
    return story


def _slurm_state_line(facts: Facts, v: NodeView) -> str:
    if not v.slurm_node:
        return "(no Slurm node)"
    if facts.slurm is None:
        return f"{v.state or 'unknown'} (Slurm's own view needs --syncer-address)"
    return v.state or "(not known to Slurm)"


def _gpus_line(v: NodeView) -> str:
    if v.disagree:
        return f"disagree with Slurm's GRES: {v.disagree}"
    used, total = v.gpus_used, v.gpus_total
    if total is None and not used:
        return "(none published: no ResourceSlice of gpu.nvidia.com for this Node)"
    line = f"{'?' if used is None else _count(used)} of {'?' if total is None else total} held by Slurm jobs"
    return line + (" (held: Slurm's view needs --syncer-address)" if used is None else "")


def _job_line(facts: Facts, v: NodeView, job: int) -> dict[str, str]:
    status = facts.slurm.jobs.get(job) if facts.slurm is not None else None
    pods = [p for p in v.pods if job_id(p) == job]
    held = next((indices for indices, j in v.held or () if j == job), ())
    return {
        "Job": str(job),
        "State": status.state_name if status is not None else (job_state(pods[0], None) if pods else ""),
        "GPUs": compress_indices(held),
        "Pods": ",".join(_pod_name(p) for p in pods),
    }


def _gpu_health_lines(v: NodeView, devices: NodeDevices) -> list[dict[str, str]]:
    """Each GPU (and MIG slice) of the Node by Slurm index: its device, the job holding it, its
    health and who says so."""
    tainted = {g.index: g.taints for g in gpuhealth.tainted_gpus(devices)}
    by_index = devices.by_index()
    lines = []
    for index in sorted(set(by_index) | set(v.unhealthy)):
        why = []
        if index in tainted:
            why.append("tainted in Kubernetes: " + ", ".join(str(t) for t in tainted[index]))
        if "slurm" in v.unhealthy.get(index, []):
            why.append("named by Slurm's drain reason")
        device = by_index.get(index)
        holder = v.holder(index)
        lines.append(
            {
                "GPU": str(index),
                "Device": device.name if device is not None else "",
                "Job": "" if holder is None else str(holder),
                "Health": "; ".join(why) or "ok",
            }
        )
    return lines


def _slurm_drain(facts: Facts, kube_node: str, slurm_node: str) -> str:
    """Why Slurm has the node drained or down ("" when it has not): as the syncer's stream says,
    else as the Node's drain annotation shows it."""
    if facts.slurm is not None and slurm_node:
        known = facts.slurm.nodes.get(slurm_node)
        return known.reason if known is not None and (known.drained or known.state == "DOWN") else ""
    annotations = ((facts.nodes.get(kube_node) or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(keys.DRAIN_ANNOTATION) or "")


def compress_indices(indices: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> "0-2,5", as Slurm prints an IDX list."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def describe(
    facts: Facts,
    pod: JSON,
    pod_events: list[JSON],
    node_events: list[JSON],
    now: dt.datetime,
    domain: dict[str, str] | None = None,
    placement: dict[str, str] | str | None = None,
) -> dict[str, Any]:
    """The whole story of one Pod, as sections (rendered as text, JSON or YAML). `domain`: its
    group's topology ask and where it landed (`topology_section`). `placement`: what the scheduler
    says of it, or why it could not be asked (tandem.cli.placement); None: it was not."""
    row = pod_row(facts, pod, now)
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    cond = scheduled_condition(pod)
    job = job_id(pod)
    status = facts.slurm.jobs.get(job) if facts.slurm is not None and job is not None else None
    refused = cond.get("status") == "False" and cond.get("reason") in REFUSED
    reading = queue.read_message(str(cond.get("message", "")))
    story: dict[str, Any] = {
        "Pod": f"{meta.get('namespace')}/{meta.get('name')}",
        "Scheduler": (pod.get("spec") or {}).get("schedulerName", ""),
        "Group": row["GROUP"] or "(none: a job of its own)",
        "Validation": f"refused: {cond.get('message', '')}" if refused else "passed",
        "Scheduled": _condition_line(cond),
        # The scheduler's own word beside the condition it wrote, before the job both refer to.
        **({"Placement": placement} if placement is not None else {}),
        "Slurm job": {
            "id": row["JOB"] or "(not submitted)",
            "state": row["JOB STATE"] or "(unknown)",
            **{
                k.removeprefix(keys.PREFIX): v
                for k, v in sorted(annotations.items())
                if k in keys.JOB_ANNOTATIONS
            },
        },
    }
    if status is not None:
        story["Slurm job"]["nodes"] = ",".join(status.job.nodes)
        story["Slurm job"]["reason"] = status.job.state_reason
        if status.job.gres_detail:
            story["Slurm job"]["gpus"] = ", ".join(status.job.gres_detail)
    if domain:
        story["Topology"] = domain
    claims = _claims(pod)
    if claims:
        story["GPU claims"] = claims
    if not row["NODE"] and row["REASON"] and not refused:
        story["Waiting"] = {
            "reason": row["REASON"],
            "queue position": reading.position or "(not in a queue)",
            "expected start": reading.expected_start or "(Slurm gives none yet)",
        }
    if row["NODE"]:
        story["Node"] = {
            "node": row["NODE"],
            "slurm node": row["SLURM NODE"],
            "lock": row["LOCK"],
            "lock history": [_event_line(e, now) for e in node_events] or ["(no lock Events)"],
        }
    story["Events"] = [_event_line(e, now) for e in pod_events] or ["(none)"]
    return story


def asked_topology(pod: JSON, podgroup_keys: tuple[str, ...]) -> tuple[str, ...]:
    """The label keys the Pod's group asks one domain of: its PodGroup's and its annotation's."""
    raw = str(((pod.get("metadata") or {}).get("annotations") or {}).get(keys.TOPOLOGY) or "")
    try:
        annotated = topology.parse_levels(raw)
    except ValueError:
        annotated = ()
    return tuple(dict.fromkeys((*podgroup_keys, *annotated)))


def group_slurm_nodes(facts: Facts, pod: JSON, status: JobStatus | None) -> list[str]:
    """The Slurm nodes of the Pod's group: its job's, else those of the members bound so far."""
    if status is not None and status.job.nodes:
        return list(status.job.nodes)
    group = placeholder.group_name(pod)
    members = [p for p in facts.pods if group is not None and placeholder.group_name(p) == group] or [pod]
    return [n for p in members if (n := facts.slurm_node_of.get(node_of(p) or ""))]


def topology_section(
    asked: tuple[str, ...], published: Topology | None, slurm_nodes: list[str]
) -> dict[str, str] | None:
    """What `describe` shows of a group asking for one domain: the ask, and where its job is."""
    if not asked:
        return None
    section = {"asks": f"its group's nodes in one domain of {', '.join(asked)}"}
    if published is None:
        section["domain"] = "(no topology published: the syncer's --topology-levels)"
    elif not slurm_nodes:
        section["domain"] = "(not placed yet)"
    else:
        section["domain"] = topology.where(published, asked, slurm_nodes) or (
            f"(none of {', '.join(asked)} is a level of Slurm's topology)"
        )
    return section


def _claims(pod: JSON) -> list[str]:
    """The Pod's claims and the ResourceClaim each resolved to (a template's: the one the
    controller made), and the claim Tandem made for its nvidia.com/gpu where a Node serves it
    through DRA, request by container; their devices are on the claims (`kubectl get
    resourceclaim -o yaml`) and in the Pod's Scheduled Event."""
    made = {
        str(s.get("name")): str(s.get("resourceClaimName") or "")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    lines = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = str(entry.get("name") or "")
        claim = entry.get("resourceClaimName") or made.get(name) or "(not made yet)"
        lines.append(f"{name}: ResourceClaim {claim}")
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    for mapping in extended.get("requestMappings") or []:
        lines.append(
            f"{mapping.get('resourceName')} of container {mapping.get('containerName')}:"
            f" ResourceClaim {extended.get('resourceClaimName')}, request {mapping.get('requestName')}"
        )
    return lines


def lock_events(events: list[JSON]) -> list[JSON]:
    wanted = {keys.NODE_LOCKED_EVENT, keys.NODE_UNLOCKED_EVENT, "SlurmNodeDrained"}
    return [e for e in events if e.get("reason") in wanted]


def _condition_line(cond: JSON) -> str:
    if not cond:
        return "(no PodScheduled condition yet)"
    line = f"{cond.get('status')}"
    if cond.get("reason"):
        line += f" {cond['reason']}"
    if cond.get("message"):
        line += f": {cond['message']}"
    return line


def _event_line(event: JSON, now: dt.datetime) -> str:
    when = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )
    count = int(event.get("count") or 1)
    times = f" (x{count})" if count > 1 else ""
    what = f"{event.get('type', '')} {event.get('reason', '')}{times}"
    ago = age(when, now)
    return (
        f"{ago:>4} ago  {what}: {event.get('message', '')}" if ago else f"{what}: {event.get('message', '')}"
    )
