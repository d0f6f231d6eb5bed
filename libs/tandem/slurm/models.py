"""Slurm jobs and nodes as Tandem sees them, the same whatever slurmrestd version spoke."""

from __future__ import annotations

from dataclasses import dataclass, field

# Base job states after which a job never runs again.
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# What the placeholder script appends to its job's Extra field once it runs (the reference's
# `: started`): the record that survives a lost hook call and any restart.
STARTED_MARKER = ": started"


@dataclass(frozen=True)
class HetComponent:
    """One component of a heterogeneous job: its own job id (the het job's id + its offset), the
    nodes it asks for or holds, and which ones once allocated."""

    job_id: int
    node_count: int = 0
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    state: str  # base state, upper case: PENDING, RUNNING, COMPLETING, COMPLETED, ...
    state_reason: str = ""
    nodes: tuple[str, ...] = ()
    partition: str = ""
    comment: str = ""
    # Written only by Slurm's administrators: a placeholder's Pod reference (tandem.placeholder).
    admin_comment: str = ""
    extra: str = ""
    user_id: int = 0
    group_id: int = 0
    flags: tuple[str, ...] = ()
    # Nodes the job must not be given (expanded): Tandem's exclusions merged with the annotation's.
    excluded_nodes: tuple[str, ...] = ()
    # Slurm's priority (0 while held) and, for a pending job, when Slurm expects it to start
    # (Unix seconds; 0 while Slurm has no estimate).
    priority: int = 0
    expected_start: int = 0
    # How many nodes the job asks for (pending) or holds (allocated): Slurm's node_count; 0 when
    # not known (a job known only from a push, before any poll read it).
    node_count: int = 0
    # A component of a heterogeneous job: the het job's id (its first component's) and this one's
    # offset; 0 and 0 for any other job. Slurm lists each component as a job of its own.
    het_job_id: int = 0
    het_job_offset: int = 0
    # Every component's job id (Slurm's het_job_id_set): a het job is whole once all are read.
    het_job_ids: tuple[int, ...] = ()
    # A heterogeneous job as one (tandem.slurm.hetjob.merged): its components in offset order,
    # `nodes` and `node_count` then being theirs together; empty for any other job.
    components: tuple[HetComponent, ...] = ()
    # The GRES the job asks for on each node, as Slurm prints it (`gres/gpu:h100:2`); "" for none.
    tres_per_node: str = ""
    # Once allocated: the GRES it holds on each of `nodes`, in the same order (`gpu:h100:2(IDX:0-1)`,
    # tandem.dra.gres); empty until Slurm says, and for a job without GRES.
    gres_detail: tuple[str, ...] = ()
    # The job's constraint as Slurm holds it (Slurm's `features`); "" for none.
    features: str = ""

    @property
    def asks_gres(self) -> bool:
        return bool(self.tres_per_node)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def script_started(self) -> bool:
        return self.extra.endswith(STARTED_MARKER)

    @property
    def refused_at_submit(self) -> bool:
        """Slurm's record of a submit it refused: slurmctld keeps one for some refusals (measured:
        "Requested node/topology configuration is not available"), FAILED for BadConstraints and
        never given a node. The submit that made it got an error, not this id: it was never anyone's
        job, whatever its name says."""
        return self.state == "FAILED" and self.state_reason == "BadConstraints" and not self.nodes


@dataclass(frozen=True)
class JobStatus:
    """A job as Tandem acts on it: Slurm's view plus what the placeholder's hooks said first.
    The syncer builds it from slurmrestd; the scheduler receives the same on the syncer's stream."""

    job: Job
    started: bool = False
    terminating: bool = False
    # No longer known to slurmctld (purged after MinJobAge, or vanished while nobody watched).
    gone: bool = False
    # While pending: its place among its partition's pending jobs in Slurm's priority order
    # (1 = next), of how many; 0 when not queued (tandem.slurm.queue).
    queue_position: int = 0
    queue_length: int = 0

    @property
    def job_id(self) -> int:
        return self.job.job_id

    @property
    def ended(self) -> bool:
        """The job will never run (again)."""
        return self.gone or self.job.finished

    @property
    def pending(self) -> bool:
        return not self.gone and self.job.state == "PENDING"

    @property
    def running(self) -> bool:
        return not self.gone and self.job.state == "RUNNING"

    @property
    def holds_nodes(self) -> bool:
        """Allocated (running, or still cleaning up) rather than waiting or over."""
        return not self.ended and self.job.state != "PENDING"

    @property
    def state_name(self) -> str:
        return "GONE" if self.gone else self.job.state


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: tuple[str, ...] = ()
    reason: str = ""
    # The Slurm user who set the reason (slurmctld records it; nobody else can write it).
    reason_set_by: str = ""
    # Its configured GRES as Slurm prints them (`gpu:h100:8(S:0-1)`, tandem.dra.gres); "" for none.
    gres: str = ""
    # Its available features (slurm.conf's, and the topology domains tandem-syncer gives it).
    features: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def busy(self) -> bool:
        """The node runs (or is still cleaning up) at least one job."""
        return self.state in ("ALLOCATED", "MIXED") or "COMPLETING" in self.flags


@dataclass
class JobSpec:
    """What a placeholder job asks for; translated to each slurmrestd version's submit body."""

    name: str
    script: str
    environment: dict[str, str]
    cpus: int
    memory_mb: int
    working_dir: str = "/tmp"
    # Nodes, one task each; cpus, memory and GPUs are per node.
    nodes: int = 1
    gpus: int = 0
    gpu_type: str = ""
    # Shards of one GPU (`gres/shard`), of gpu_type's GPUs when it names one; gpus is then 0.
    gpu_shares: int = 0
    # An MPS share of one GPU (`gres/mps`), as gpu_shares is a shard count; gpus is then 0.
    gpu_mps: int = 0
    account: str = ""
    comment: str = ""
    # Only a submit by Slurm's administrator (root or SlurmUser) may set it: Tandem's mark.
    admin_comment: str = ""
    constraints: str = ""
    # Slurm's job_desc "shared" values as SUNK names them: none (whole node), ok, user, mcs, topo.
    exclusive: str = ""
    excluded_nodes: str = ""
    required_nodes: str = ""
    partition: str = ""
    prefer: str = ""
    priority: int | None = None
    # Slurm's nice (its priority lowered by this much): what makes Slurm take a job back before
    # the others of its group, whatever the site's priority factors (issue 53's extra members).
    nice: int | None = None
    # Slurm's dependency expression (e.g. `after:41`): what links a job to another in squeue.
    dependency: str = ""
    qos: str = ""
    reservation: str = ""
    time_limit_minutes: int | None = None
    # Who the job runs as; None: the token's user (root for Tandem's scheduler).
    user_id: int | None = None
    group_id: int | None = None
    # The job's Extra field at submit; the placeholder script appends STARTED_MARKER to it.
    extra: str = ""
    # Where the batch script's stdout and stderr go (Slurm's %j patterns work); empty: Slurm's default.
    output: str = ""
    extra_fields: dict[str, object] = field(default_factory=dict)
    # A heterogeneous job: one spec per component, in order (the first's script runs, on the
    # first component's first node); the fields above are then unused. Empty: a plain job.
    components: tuple[JobSpec, ...] = ()
