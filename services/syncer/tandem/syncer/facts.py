"""The facts of one Slurm node as the node sync decides on them (tandem.syncer.nodesync), read from
the caches by tandem.syncer.nodefacts: plain values, no behaviour. Apart from the decisions, so that
each decision module (nodesync, locking, gputaints) imports the facts and none imports another to
read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.dra.slices import NodeDevices
from tandem.keys import LockState
from tandem.kube import JSON
from tandem.slurm.models import Node
from tandem.syncer.holds import NodeMemory
from tandem.syncer.killwait import NodeKillWait


@dataclass(frozen=True)
class RunningJob:
    """A job Slurm has on the node; `placeholder`: Tandem's (its AdminComment says so)."""

    job_id: int
    placeholder: bool = False
    # The GPU indices it holds on the node; read only when a GPU there is tainted NoExecute.
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class NodeFacts:
    slurm_node: str
    # The Slurm node as the mirror read it (None before the first poll).
    slurm: Node | None
    # The Node hosting its slurmd Pod ("" when none), and that Node (None when gone).
    kube_node_name: str
    kube_node: JSON | None
    slurmd_pod: JSON | None
    # When the Slurm node is drained at KillWait: the Pod the reason names, as cached (None: gone).
    killwait_pod: JSON | None = None
    # The Slurm user this syncer acts as: the only one whose drains it resumes.
    own_user: str = ""
    # The Node condition types that drain the Slurm node while True (--health-conditions), in the
    # order of the configuration.
    health_conditions: tuple[str, ...] = ()
    # -- the lock (tandem.syncer.locking) --
    # Whether Slurm has been read at all: an unread mirror knows no job.
    slurm_read: bool = True
    # The jobs Slurm has on the node, and those of the held jobs it says ended.
    jobs: tuple[RunningJob, ...] = ()
    ended: frozenset[int] = frozenset()
    # The lock annotation of the slurmd Pod and whether its Node has the lock taint, as this
    # syncer last wrote them until the caches show that write.
    lock: LockState = LockState.FALSE
    tainted: bool = False
    # The Pods on the Node that a lock may have to move: not finished, not the slurmd Pod.
    pods: tuple[JSON, ...] = ()
    # Uids of those that may stay under a strict lock; uid -> job id of those whose job the
    # mirror does not know yet (to look up before judging).
    sharers: frozenset[str] = frozenset()
    undetermined: Mapping[str, int] = field(default_factory=dict)
    # Whether another Slurm node hosted on the same Node is locked or held by a prolog (it needs
    # the taint too: its prolog taints the Node before it writes `pending`).
    neighbours_locked: bool = False
    # What the hook calls recorded for this node.
    memory: NodeMemory = field(default_factory=NodeMemory)
    # The KillWait deadlines recorded for jobs on this node, with the Pod that keeps it, if any.
    killwaits: tuple[NodeKillWait, ...] = ()
    # How the Node's ResourceSlices and the Slurm node's GPUs disagree ("" when they agree; None:
    # nothing to compare), tandem.syncer.gpucheck.
    gpu_mismatch: str | None = None
    # The Node's GPUs numbered the Slurm way, with their taints (None: it publishes none), and the
    # syncer's DeviceTaintRules mirroring this Slurm node's drain; `rules_served`: the group/version
    # serving DeviceTaintRules ("" none: nothing is mirrored).
    devices: NodeDevices | str | None = None
    gpu_rules: tuple[JSON, ...] = ()
    rules_served: str = ""
