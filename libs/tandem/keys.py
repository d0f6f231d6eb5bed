"""Every annotation, label, taint and lock-state name Tandem reads or writes, in one place.

The names are SUNK's (see shared/reference): they are the compatibility contract. Their prefix can
be changed with TANDEM_ANNOTATION_PREFIX (the chart's global.annotationPrefix), the same for every
service, the scripts and the Pods' authors; it is read once, at import, because every name below
is built from it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

DEFAULT_PREFIX = "sunk.coreweave.com/"
# A DNS subdomain and a slash, as Kubernetes wants the prefix of a qualified name.
_PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/$")


def prefix_from_env(value: str | None) -> str:
    """The annotation prefix, or a clear error naming the variable when it is not one."""
    if not value:
        return DEFAULT_PREFIX
    if len(value) > 254 or not _PREFIX_RE.match(value):
        raise ValueError(
            f"TANDEM_ANNOTATION_PREFIX={value!r} is not a DNS subdomain followed by '/', "
            f"e.g. {DEFAULT_PREFIX!r}"
        )
    return value


PREFIX = prefix_from_env(os.environ.get("TANDEM_ANNOTATION_PREFIX"))

# Node lock: a taint on the Node and an annotation (same key) on the Node's slurmd Pod.
LOCK_KEY = PREFIX + "lock"
LOCK_TAINT_VALUE = "true"
LOCK_TAINT_EFFECT = "NoExecute"


class LockState(StrEnum):
    """Values of the lock annotation on a slurmd Pod."""

    FALSE = "false"
    PENDING = "pending"
    LOCKED = "locked"
    LOCKED_STRICT = "locked_strict"


# The audience of a Slurm node's hook credential: the token kubelet projects into its slurmd Pod
# (tandem.nodetoken). Not under the prefix: it names Tandem's API, not an annotation.
HOOKS_TOKEN_AUDIENCE = "tandem-hooks"

# On a Node whose Slurm node is drained or down: Slurm's reason (the syncer writes and removes it).
DRAIN_ANNOTATION = PREFIX + "drain"
# Every annotation Tandem writes on Nodes: what the uninstall cleanup removes, and nothing else
# under the prefix (SUNK and other tools write their own there).
NODE_ANNOTATIONS = frozenset({DRAIN_ANNOTATION})

# The Slurm drain reason when a job ended while one of its Pods still ran just before KillWait: the
# syncer's words, and the placeholder script's when it cannot reach Tandem (placeholder.sh writes
# the same). The node sync resumes such a drain once that Pod is gone or finished.
_KILLWAIT_DRAIN = re.compile(
    r"^k8s: pod ([a-z0-9][-a-z0-9]*)/([a-z0-9][-a-z0-9.]*) still running at KillWait \(job (\d+)\)$"
)


def killwait_drain_reason(namespace: str, name: str, job_id: int) -> str:
    return f"k8s: pod {namespace}/{name} still running at KillWait (job {job_id})"


def killwait_drain_of(reason: str) -> tuple[str, str, int] | None:
    """(namespace, name, job id) of the Pod a KillWait drain names; None for any other reason."""
    m = _KILLWAIT_DRAIN.match(reason)
    return (m.group(1), m.group(2), int(m.group(3))) if m else None


# The Slurm drain reason when a prolog's lock timed out because Pods did not leave the Node (their
# PodDisruptionBudgets kept them): the syncer never resumes it, an administrator does once the Pods
# are dealt with.
_LOCK_TIMEOUT_DRAIN = re.compile(r"^k8s: job \d+ could not lock \S+: .+ did not leave$", re.DOTALL)


def lock_timeout_drain_reason(job_id: int, kube_node: str, names: str) -> str:
    return f"k8s: job {job_id} could not lock {kube_node}: {names} did not leave"


def is_lock_timeout_drain(reason: str) -> bool:
    return _LOCK_TIMEOUT_DRAIN.match(reason) is not None


# Event reasons the syncer posts on Nodes, which `kubectl tandem` reads as a Node's lock history.
NODE_LOCKED_EVENT = "NodeLocked"
NODE_UNLOCKED_EVENT = "NodeUnlocked"

# Written by the scheduler on the Pods it owns.
JOB_ID_ANNOTATION = PREFIX + "job-id"


def recorded_job_id(pod: Mapping[str, Any]) -> int | None:
    """The Slurm job id a Pod's annotation records; None when absent or not a job id. A tenant can
    write any text there: only ASCII digits of a 32-bit id count (Python's int() would take '²',
    and raise on 5,000 digits)."""
    raw = str(((pod.get("metadata") or {}).get("annotations") or {}).get(JOB_ID_ANNOTATION) or "")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10):
        return None
    value = int(raw)
    return value if 0 < value < 2**32 else None


# Pod annotations mapped to the placeholder job's fields.
ACCOUNT = PREFIX + "account"
COMMENT = PREFIX + "comment"
CONSTRAINTS = PREFIX + "constraints"
EXCLUSIVE = PREFIX + "exclusive"
# Values of the exclusive annotation (SUNK's names for Slurm's job "shared" setting): a whole node,
# oversubscribe, per user, per MCS label, per topology block. Before SUNK 5.7 it was a boolean
# (and Kubernetes users write booleans anyway): legacy true/false map to these.
EXCLUSIVE_VALUES = ("none", "ok", "user", "mcs", "topo")
LEGACY_EXCLUSIVE = {"true": "none", "false": ""}
EXCLUDED_NODES = PREFIX + "excluded-nodes"
REQUIRED_NODES = PREFIX + "required-nodes"
PARTITION = PREFIX + "partition"
PREFER = PREFIX + "prefer"
PRIORITY = PREFIX + "priority"
QOS = PREFIX + "qos"
RESERVATION = PREFIX + "reservation"
USER_ID = PREFIX + "user-id"
GROUP_ID = PREFIX + "group-id"
CURRENT_WORKING_DIR = PREFIX + "current-working-dir"
TIMEOUT = PREFIX + "timeout"
# Node label keys (comma-separated) whose one domain every member of the group must share, for a
# group with no Workload API object to say it (a LeaderWorkerSet's, a Pod alone's); a PodGroup's
# spec.schedulingConstraints.topology says it too (issue 38).
TOPOLOGY = PREFIX + "topology"

JOB_ANNOTATIONS = frozenset(
    {
        ACCOUNT,
        COMMENT,
        CONSTRAINTS,
        EXCLUSIVE,
        EXCLUDED_NODES,
        REQUIRED_NODES,
        PARTITION,
        PREFER,
        PRIORITY,
        QOS,
        RESERVATION,
        USER_ID,
        GROUP_ID,
        CURRENT_WORKING_DIR,
        TIMEOUT,
        TOPOLOGY,
    }
)
# Keys under the prefix that are not job fields but are still ours (never warned about).
OWN_ANNOTATIONS = frozenset({JOB_ID_ANNOTATION, LOCK_KEY})

# Node labels naming the GPU model, read from a Pod's required node affinity.
GPU_MODEL_LABELS = ("gpu.nvidia.com/model", "gpu.nvidia.com/class")
GPU_RESOURCE = "nvidia.com/gpu"
# Not Kubernetes resources: how the shares of one GPU a Pod's claims ask for (tandem.dra.claims)
# travel among its job's requests, to become Slurm `shard` GRES, or `mps` GRES.
GPU_SHARES = "tandem/gpu-shares"
GPU_MPS = "tandem/gpu-mps"
# GPUs by device (Dynamic Resource Allocation): a Pod's ResourceClaims, the Nodes' ResourceSlices
# and the DeviceClasses they name, in the version the apiserver serves (GA since Kubernetes 1.34).
DRA_GROUP = "resource.k8s.io"
DRA_VERSIONS = ("v1",)
RESOURCE_CLAIMS = "resourceclaims"
RESOURCE_CLAIM_TEMPLATES = "resourceclaimtemplates"
RESOURCE_SLICES = "resourceslices"
# Marks the claim a Pod's scheduler makes for an extended resource (nvidia.com/gpu) that a Node
# serves through DRA (KEP-5004): quota and the ResourceClaim controller count it as the Pod's.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
# The Node condition the syncer sets while the Node's ResourceSlices and its Slurm node's GPU GRES
# disagree (count, type or index): no Pod claiming GPUs is placed there.
GPU_MISMATCH_CONDITION = "SlurmGpuMismatch"
DEVICE_CLASSES = "deviceclasses"
# DRA device taints (GA in Kubernetes 1.37, beta in 1.36): an admin's or a health controller's
# DeviceTaintRule, in the version the apiserver serves.
DEVICE_TAINT_RULES = "devicetaintrules"
DEVICE_TAINT_RULE_VERSIONS = ("v1", "v1beta2")
# The device taint the syncer puts (through a DeviceTaintRule of its own) on each GPU a Slurm drain
# names, while that drain lasts (tandem.syncer.gputaints); its rules carry these labels, and the
# drain reason in the annotation.
SLURM_GPU_TAINT_KEY = PREFIX + "slurm-drain"
SLURM_GPU_RULE_LABEL = PREFIX + "slurm-node"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
SYNCER_MANAGER = "tandem-syncer"
SLURM_GPU_RULE_REASON = PREFIX + "slurm-reason"

# Pod groups placed as one Slurm job (gang scheduling). A Kubernetes PodGroup (the Workload API;
# the Job controller makes one for an Indexed Job) that a Pod joins through
# spec.schedulingGroup.podGroupName, with a gang policy's minCount.
PODGROUP_GROUP = "scheduling.k8s.io"
PODGROUP_RESOURCE = "podgroups"
# Whichever the apiserver serves, newest first (tandem.discovery): Kubernetes 1.37 serves v1beta1
# (and v1alpha3, where CompositePodGroups are), 1.36 only v1alpha2; the objects are alike.
PODGROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
PODGROUP_KIND = "PodGroup"
# PodGroups of different shapes placed together (a leader and its workers, prefill and decode):
# each child PodGroup names its parent in spec.parentCompositePodGroupName, and Tandem places the
# whole as one Slurm heterogeneous job, a component per child. Alpha in 1.37 (gate CompositePodGroup).
COMPOSITE_RESOURCE = "compositepodgroups"
COMPOSITE_VERSIONS = ("v1alpha3",)
COMPOSITE_KIND = "CompositePodGroup"
PODGROUP_SCHEDULED = "PodGroupScheduled"
# The Pod condition that tells a workload its Pod was taken for another's sake (a Job's
# podFailurePolicy can ignore it): kube-scheduler writes it on a preemption, Tandem on a Pod whose
# Slurm job Slurm preempted.
DISRUPTION_TARGET = "DisruptionTarget"
# Each replica group of a LeaderWorkerSet: a leader and size - 1 workers, told apart by these
# labels and annotation, which the LWS controller puts on every Pod of the group.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
# An Indexed Job's Pods carry their index here (the order members take the allocation's nodes).
JOB_COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# The slurmd Pods of a NodeSet: found by this label; each Pod's name is its Slurm node's name.
SLURMD_POD_LABEL = "app.kubernetes.io/name"
SLURMD_POD_LABEL_VALUE = "slurmd"
