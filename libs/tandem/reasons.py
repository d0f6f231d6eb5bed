"""The reasons Tandem's scheduler writes on a Pod's PodScheduled condition and in its Events, which
`kubectl tandem` and the alerts read back: one place for the words both sides match on."""

from __future__ import annotations

REASON_INVALID = "ValidationFailed"
REASON_PENDING = "SlurmJobPending"
REASON_SUBMIT_FAILED = "SlurmSubmitFailed"
# Slurm did not answer: retried, unlike the two refusals above.
REASON_SLURM_UNAVAILABLE = "SlurmUnavailable"
# No Slurm node's Node would take the Pod (kube-scheduler's reason): retried when Nodes change.
REASON_UNSCHEDULABLE = "Unschedulable"
# A group with more members than Slurm has nodes.
REASON_CANNOT_FIT = "GroupCannotFit"
# The GPUs Slurm gave the job cannot be given to the Pod's ResourceClaims (tandem.dra).
REASON_GPU_MISMATCH = "GpuAllocationMismatch"
# Set by this scheduler when it refused a Pod: no retry until the Pod is recreated.
REFUSED_REASONS = (REASON_INVALID, REASON_SUBMIT_FAILED, REASON_CANNOT_FIT, REASON_GPU_MISMATCH)
# A Warning Event on a bound Pod the policy (or validation) would now refuse: it keeps running.
REASON_WOULD_BE_REFUSED = "WouldNowBeRefused"
REASON_WAITING_FOR_MEMBERS = "WaitingForGroupMembers"
REASON_WAITING_FOR_GROUP = "WaitingForPodGroup"
REASON_GROUP_FULL = "GroupAllocationFull"
# An elastic gang's extra member whose own job waits its turn: extras are submitted one at a time.
REASON_EXTRA_QUEUED = "ExtraMemberQueued"
# Every reason this scheduler writes on a Pod's PodScheduled condition (`kubectl tandem` tells
# Tandem's Pods by them).
CONDITION_REASONS = frozenset(
    {
        REASON_INVALID,
        REASON_PENDING,
        REASON_SUBMIT_FAILED,
        REASON_SLURM_UNAVAILABLE,
        REASON_UNSCHEDULABLE,
        REASON_CANNOT_FIT,
        REASON_GPU_MISMATCH,
        REASON_WAITING_FOR_MEMBERS,
        REASON_WAITING_FOR_GROUP,
        REASON_GROUP_FULL,
        REASON_EXTRA_QUEUED,
    }
)
# The DisruptionTarget reasons: kube-scheduler's preemption, and Slurm's of the Pod's job (Tandem
# writes it before deleting the Pod; the chart's admission policy lets the scheduler write no other).
PREEMPTED_BY_SCHEDULER = "PreemptionByScheduler"
PREEMPTED_BY_SLURM = "PreemptionBySlurm"
# The Normal Event on each member whose group's pending job is cancelled because minCount grew
# past the nodes it asks for (a new job follows).
EVENT_JOB_OUTGROWN = "SlurmJobCancelled"
# The Normal Event on a group's PodGroup when its job is cancelled because no member is left
# (deleted, or preempted as a whole by kube-scheduler).
EVENT_JOB_CANCELLED = "SlurmJobCancelled"
# An elastic gang's core job shrunk in place: its workload asks for fewer members.
EVENT_JOB_SHRUNK = "SlurmJobShrunk"
