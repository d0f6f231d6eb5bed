"""What the scheduler's decision reads and says (tandem.scheduler.decide): the snapshot one
reconcile observed (`Observed`, plain values) and the one action it decided, which
tandem.scheduler.act carries out."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem import topology
from tandem.dra.claims import PodGpus
from tandem.dra.slices import NodeDevices
from tandem.kube import JSON
from tandem.scheduler import groups, validation
from tandem.scheduler.eligibility import Eligibility
from tandem.scheduler.gpuclaims import ClaimWrite
from tandem.scheduler.policy import BUILTIN, Policy
from tandem.slurm.models import JobStatus


class NotJudged(enum.Enum):
    NOT_JUDGED = "not judged"


NOT_JUDGED = NotJudged.NOT_JUDGED
NO_GPUS = PodGpus()


@dataclass(frozen=True)
class GpuFacts:
    """What the decision reads of the members' GPUs (tandem.dra): plain values, keyed by member uid
    or Node, none of them the group's key."""

    # Member uid -> what its ResourceClaims ask Slurm for (tandem.dra.claims); absent for a
    # member that claims nothing.
    gpus: Mapping[str, PodGpus] = field(default_factory=dict)
    # What a claim's allocation is written from before the bind: the claims the members name, by
    # name; the job's Nodes' devices (Kubernetes Node -> its GPUs, or why its ResourceSlices cannot
    # be read); each DeviceClass's spec.config.
    claims: Mapping[str, JSON] = field(default_factory=dict)
    devices: Mapping[str, NodeDevices | str] = field(default_factory=dict)
    class_config: Mapping[str, tuple[JSON, ...]] = field(default_factory=dict)
    # nvidia.com/gpu through DRA (tandem.dra.extended): the DeviceClass that maps it ("" none), the
    # job's Nodes that serve it so (no device plugin offers it), and the claim made for a member
    # (member uid -> the claim).
    extended_class: str = ""
    dra_served: frozenset[str] = frozenset()
    extended_claims: Mapping[str, JSON] = field(default_factory=dict)
    # The most of each shared capacity (shares, mps) any one GPU publishes (tandem.dra.slices),
    # read when a member asks for part of a GPU; None: not read.
    most_shares: Mapping[str, int] | None = None


@dataclass(frozen=True)
class Observed:
    key: str
    # What the key names: a group, or a Pod alone (a group of one); None when the Pods naming this
    # group key are placed one by one (their PodGroup's policy is basic).
    group: groups.Group | None
    # Every Pod in the cache that belongs to it, in any state (a Pod alone: itself, none once gone).
    members: tuple[JSON, ...] = ()
    # Its job: the live one its members recorded, else any live one, else the newest.
    job: JobStatus | None = None
    # Every job it has (a Pod alone: of its uid; once gone, of its name).
    jobs: tuple[JobStatus, ...] = ()
    # Member uid -> the job id it carries: what this process wrote a moment ago, else its annotation.
    recorded: Mapping[str, int] = field(default_factory=dict)
    # The job this process submitted and the stream has not shown yet.
    submitted_job_id: int | None = None
    # Live jobs besides the one the members recorded: a submit retried after its answer was lost
    # (Slurm had taken the first); of an extra member, besides the one it recorded.
    duplicates: tuple[int, ...] = ()
    # An elastic gang's extra members (tandem.scheduler.elastic): member uid -> its own job (the
    # live one it recorded, else any live one, else the newest), and the submits of theirs the
    # stream has not shown yet. `job` and `jobs`' core are the group's own.
    extras: Mapping[str, JobStatus] = field(default_factory=dict)
    extra_submitted: Mapping[str, int] = field(default_factory=dict)
    # A Pod alone: the live jobs of an earlier Pod of its name, which is gone (a StatefulSet's).
    earlier_jobs: tuple[int, ...] = ()
    # Jobs this process already asked Slurm to cancel (their scripts are shutting down).
    cancel_sent: frozenset[int] = frozenset()
    # Slurm node -> Kubernetes Node, as the syncer publishes it, for the job's nodes.
    hosts: Mapping[str, str] = field(default_factory=dict)
    # Those Nodes' labels, which members' nodeSelectors are matched against at the bind (a Node
    # missing: any member would take it).
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # How many Slurm nodes there are (the syncer publishes each); 0 when not known yet.
    slurm_nodes: int = 0
    # Member uid -> which Slurm nodes' Nodes would take it (None: no Node is watched; a member is
    # missing once it no longer needs it); NOT_JUDGED until decide asks for it with Judge, since
    # judging every Node costs more than the rest of a reconcile and most decisions never read it.
    fits: Mapping[str, Eligibility] | NotJudged | None = None
    # The nodes the job excludes now: as Slurm reports them, else as this process last set them.
    job_excludes: frozenset[str] | None = None
    # The constraint this process last set on the pending job, until the job shows it (None: the
    # job's own `features` are what Slurm holds).
    job_constraint: str | None = None
    # How many members the group's workload (its Job) asks for now; None: not known
    # (tandem.scheduler.workloads). The nodes this process last asked the core job to shrink to,
    # until the job shows them.
    asked: int | None = None
    job_shrunk_to: frozenset[str] | None = None
    # Slurm's KillWait now (it may change: tandem.scheduler.killwait_source) and where it came
    # from, which a refusal for a grace period cites.
    kill_wait: float = 0.0
    kill_wait_source: str = "--slurm-kill-wait"
    # --reject-static-cpu: a Pod the kubelet would pin CPUs for is refused, not only warned about.
    reject_static_cpu: bool = False
    # Seconds since the job was first seen in its current phase (pending, allocated with its
    # prologs running: tandem.scheduler.jobs.phase); infinite when not known.
    job_phase_age: float = float("inf")
    # What the members' namespace may ask of Slurm (tandem.scheduler.policy).
    policy: Policy = BUILTIN
    # Member uid -> its validation against the KillWait, --reject-static-cpu and policy above,
    # worked out once per Pod version by the observer (tandem.scheduler.podmemo); a member not
    # here is validated by decide itself.
    validations: Mapping[str, validation.Validation] = field(default_factory=dict)
    # The members' GPUs as their ResourceClaims ask for them and the job's Nodes publish them.
    gpu: GpuFacts = field(default_factory=lambda: GpuFacts())
    # Slurm's topology as tandem-syncer publishes it, or why there is none (tandem.scheduler.domains).
    topology: topology.Topology | str = "the scheduler reads no topology (--topology-configmap)"


@dataclass(frozen=True)
class Placement:
    """A member and the node it goes to (a nomination: "" clears it)."""

    pod: JSON
    slurm_node: str
    kube_node: str


@dataclass(frozen=True)
class Nothing:
    pass


@dataclass(frozen=True)
class Judge:
    """Deciding needs to know which Nodes would take the members: observe them with the fits
    judged, then decide again."""


@dataclass(frozen=True)
class Wait:
    """Nothing can be done yet and no change will announce when: look again after a backoff."""

    why: str


@dataclass(frozen=True)
class Later:
    """Nothing to write yet: a passing state becomes worth a write after `after` seconds, unless a
    change (the job starting) comes first."""

    after: float
    why: str


class CancelCause(enum.Enum):
    """Why jobs are cancelled, as the act reads it (`why` is the sentence the log and Events say)."""

    MEMBERS_GONE = enum.auto()  # every member of a group, or a Pod alone, finished or going
    POD_DELETED = enum.auto()  # a Pod alone deleted: its jobs are found by its name, not its uid
    PODGROUP_DELETED = enum.auto()
    DUPLICATE = enum.auto()  # a second job, from a submit retried after its answer was lost
    REFUSED = enum.auto()  # a member refused before it was bound
    OUTGROWN = enum.auto()  # a pending job asking for fewer nodes than the group's size now
    EXTRA = enum.auto()  # an elastic gang's extra member's job: its member or its core not running
    EARLIER_POD = enum.auto()  # a job of an earlier Pod of a Pod alone's name (which is gone)


@dataclass(frozen=True)
class Cancel:
    job_ids: tuple[int, ...]
    cause: CancelCause
    why: str
    # A Normal Event with this reason and message on each of these members (none for a cancel
    # nobody needs telling of: the members are gone, or their deletion says it).
    pods: tuple[JSON, ...] = ()
    event_reason: str = ""
    message: str = ""
    # The group's PodGroup (or CompositePodGroup), to carry that Event when no member is left.
    subject: JSON | None = None


@dataclass(frozen=True)
class Reject:
    """PodScheduled=False and a FailedValidation Event on each member; never retried."""

    pods: tuple[JSON, ...]
    message: str
    problems: tuple[validation.Problem, ...]


@dataclass(frozen=True)
class Warn:
    """A Warning Event on each of these members and nothing else (each distinct one posted once)."""

    pods: tuple[JSON, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class Refuse:
    """It can never be placed as it is: PodScheduled=False on each member, one Warning Event."""

    pods: tuple[JSON, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class Submit:
    # In rank order; one node each.
    members: tuple[JSON, ...]
    # Each member's, as decide validated it: the job is built from these.
    validations: tuple[validation.Validation, ...]
    # Slurm nodes whose Nodes would not take some member.
    excluded: tuple[str, ...] = ()
    # A heterogeneous job: how many of the members (in order) each component holds; empty: one
    # homogeneous job.
    components: tuple[int, ...] = ()
    # The one-domain constraint of each component (of the job, when homogeneous), "" for none;
    # empty: no topology asked (tandem.scheduler.domains).
    domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubmitExtras:
    """A job for each of an elastic gang's extra members (tandem.scheduler.elastic), its core
    running whole: one node each, linked to the core and built from its job annotations."""

    members: tuple[JSON, ...]
    validations: tuple[validation.Validation, ...]
    core_job_id: int
    # Slurm nodes the extras may not take: the core's, and the other extras'.
    taken: tuple[str, ...] = ()
    # The feature of the domain the core landed in ("" for none asked).
    domain: str = ""
    # Members within minCount beyond the running core (minCount raised while it ran): their jobs
    # are the core's own priority, not below it.
    of_core: bool = False


@dataclass(frozen=True)
class Record:
    pods: tuple[JSON, ...]
    job_id: int


@dataclass(frozen=True)
class Pend:
    """PodScheduled=False with this reason on each member (and the PodGroup's condition)."""

    pods: tuple[JSON, ...]
    reason: str
    message: str
    # A Warning Event with this reason on each member whose condition changes ("" for none).
    event: str = ""
    # The group's PodGroup says it too (not for an elastic gang's extras: its core runs).
    group: bool = True


@dataclass(frozen=True)
class Nominate:
    """status.nominatedNodeName: the Node Slurm allocated while the prologs run ("" to clear)."""

    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class Exclude:
    """Set a pending job's excluded nodes (a hostlist): the Nodes that would take the members changed."""

    job_id: int
    hostlist: str
    # A heterogeneous job's components, each set alike; empty: the job alone.
    component_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Constrain:
    """Set a pending job's constraint: the topology domains that can hold its group changed (a
    rack labelled, relabelled or emptied, Nodes that stopped or started taking its members)."""

    job_id: int
    constraints: str


@dataclass(frozen=True)
class Shrink:
    """Shrink a running core job in place to the nodes its members still hold (its workload asks
    for fewer members): Slurm releases the others, whose members left."""

    job_id: int
    keep: tuple[str, ...]
    released: tuple[str, ...]
    asked: int  # how many members the workload asks for now
    members: tuple[JSON, ...] = ()  # the core's, bound (an Event's subject without a PodGroup)
    # The node running the job's batch script, kept with no member on it (Slurm cannot release
    # it); "" when a member runs there.
    script_node: str = ""


@dataclass(frozen=True)
class Tally:
    """An elastic gang's PodGroupScheduled condition (True) says how many members run of how many
    its workload asks for."""

    message: str


@dataclass(frozen=True)
class Bind:
    job: JobStatus
    placements: tuple[Placement, ...]
    # Member uid -> its claims' allocations, written before its bind (the devices Slurm chose).
    claims: Mapping[str, tuple[ClaimWrite, ...]] = field(default_factory=dict)
    # Member uid -> its status.extendedResourceClaimStatus, written after the claims, before the bind.
    pod_statuses: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    # Where the job's nodes are, for the group that asked for one domain ("" for none).
    landed: str = ""
    # An elastic gang's extra member, on its own job: the group's condition is its core's.
    extra: bool = False
    # The core's bind: the uids of the extra members, which the group is scheduled without.
    extras: frozenset[str] = frozenset()


@dataclass(frozen=True)
class MakeClaims:
    """Before the bind: create the claims members' nvidia.com/gpu needs on their Nodes (member,
    manifest), and first delete the stale ones made for them before (claim, why)."""

    new: tuple[tuple[JSON, dict[str, Any]], ...] = ()
    stale: tuple[tuple[JSON, str], ...] = ()


@dataclass(frozen=True)
class Delete:
    """Delete these members; the Event says why."""

    pods: tuple[JSON, ...]
    event_type: str
    event_reason: str
    message: str
    # Slurm preempted their job: a DisruptionTarget condition (reasons.PREEMPTED_BY_SLURM) says so
    # first, so that their workload does not count it as a failure.
    preempted: bool = False


Action = (
    Nothing
    | Judge
    | Wait
    | Later
    | Cancel
    | Reject
    | Warn
    | Refuse
    | Submit
    | SubmitExtras
    | Record
    | Pend
    | Nominate
    | Exclude
    | Constrain
    | Shrink
    | Tally
    | Bind
    | MakeClaims
    | Delete
)
