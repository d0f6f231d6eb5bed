"""What the hook calls told this leader and no cache holds: the holds prologs recorded, the releases
epilogs recorded, the locks that failed, the evictions asked (and those a PodDisruptionBudget
refused), the KillWait deadlines placeholders' ends recorded, and since when a Node carries a lock
taint with no slurmd Pod on it.

It is the leader's memory only: a new leader starts empty, and a lock held by a running job is
rebuilt from Slurm (a running placeholder makes it strict again). The reconciler reads a snapshot
per Slurm node (`memory`), and every change wakes the hook calls waiting for their outcome
(`on_change`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from tandem.placeholder import PodRef
from tandem.slurm.models import JobStatus
from tandem.syncer.waiters import job_key, node_key

# How long a prolog's hold counts while Slurm's listing has not caught up with its job.
HOLD_GRACE_SECONDS = 60.0
# How long a release or a failure is remembered: long enough for Slurm's listing to stop
# showing the job on the node (the mirror polls every few seconds).
REMEMBER_SECONDS = 300.0
# A job Slurm did not know when asked (whether a Pod may share a strict lock) is asked about again
# after this long, not on every pass.
LOOKUP_AGAIN_SECONDS = 30.0
# How often a pass drops expired lookups and KillWait entries (a walk over every job).
PRUNE_EVERY_SECONDS = 1.0


@dataclass(frozen=True)
class Hold:
    """A prolog's call for its job: lock the node (strictly for a placeholder) by `deadline`."""

    job_id: int
    strict: bool
    since: float
    deadline: float


@dataclass(frozen=True)
class Failure:
    """Why a job's lock was not taken; its prolog fails with it. `unavailable`: Kubernetes or Slurm
    could not be reached (the caller may retry) rather than the node refusing."""

    message: str
    unavailable: bool = False


@dataclass(frozen=True)
class Asked:
    """The last eviction asked of a Pod: refused (429, `why`), to ask again from `until`; or
    accepted (`why` ""), while the Pod's cached copy is still `version` (its deletion not seen)."""

    why: str
    until: float
    version: str = ""


@dataclass(frozen=True)
class KillWait:
    """A placeholder's job ended (its script's JobTerminating): wait for its Pods to go, and at
    `drain_at` (just before Slurm's KillWait) drain each of its nodes where one still runs, so Slurm
    gives that node to no other job while the Pod is there. `status`: the job as the call verified
    it (its allocation); the outcome so far: the nodes drained, those whose pass found nothing to
    drain, those whose drain Slurm refused (tried again while the entry stays)."""

    job_id: int
    ref: PodRef
    script_node: str
    status: JobStatus
    drain_at: float
    drained: frozenset[str] = frozenset()
    spared: frozenset[str] = frozenset()
    refused: frozenset[str] = frozenset()
    # The call answered; the entry stays only while a refused drain is tried again.
    answered: bool = False

    @property
    def nodes(self) -> tuple[str, ...]:
        """The Slurm nodes a Pod of the job may keep (killwait.drain_targets picks among them)."""
        return tuple(n for n in dict.fromkeys((*self.status.job.nodes, self.script_node)) if n)

    def open_on(self, slurm_node: str) -> bool:
        return slurm_node in self.nodes and slurm_node not in self.drained | self.spared

    @property
    def outcome_known(self) -> bool:
        """Every node drained, spared or refused: the call can answer."""
        return bool(self.nodes) and set(self.nodes) <= self.drained | self.spared | self.refused


@dataclass(frozen=True)
class Trouble:
    """Why the last pass over a node failed; `seq`: the records it had read."""

    message: str
    seq: int
    unreachable: bool


@dataclass(frozen=True)
class HoldOutcome:
    """What a hook call waiting on a node reads of the store, in one read: how the passes since its
    record (`since`) dealt with its job."""

    failure: Failure | None  # the node sync failed the job's hold
    ended: bool  # a pass dropped the hold because the job ended
    unreachable: str  # a pass since the record could not reach the API server: why ("" none)
    trouble: str  # the last pass's error, whenever it was ("" none)
    settled: bool  # a pass that had read the record was carried out
    holds: tuple[int, ...]  # the jobs holding the node now


@dataclass(frozen=True)
class NodeMemory:
    """One Slurm node's part of the store, as the reconciler reads it (a copy)."""

    holds: Mapping[int, Hold] = field(default_factory=lambda: MappingProxyType({}))
    released: frozenset[int] = frozenset()
    failed: Mapping[int, Failure] = field(default_factory=lambda: MappingProxyType({}))
    asked: Mapping[str, Asked] = field(default_factory=lambda: MappingProxyType({}))
    # The job the node was last locked for (named in the unlock Event).
    locked_for: int | None = None
    # How many hook calls the store had recorded when this was read (see HoldStore.outcome).
    seq: int = 0
    # The KillWait deadlines of jobs on this node not settled here yet.
    killwaits: tuple[KillWait, ...] = ()


class HoldStore:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[..., None] = lambda *changed: None,
    ) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._holds: defaultdict[str, dict[int, Hold]] = defaultdict(dict)
        self._released: defaultdict[str, dict[int, float]] = defaultdict(dict)
        self._failed: defaultdict[str, dict[int, tuple[Failure, float]]] = defaultdict(dict)
        # Holds a pass dropped because their job ended (cancelled while its prolog waited): the
        # prolog's call answers at once instead of waiting out its deadline.
        self._ended: defaultdict[str, dict[int, float]] = defaultdict(dict)
        self._asked: defaultdict[str, dict[str, Asked]] = defaultdict(dict)
        self._locked_for: dict[str, int] = {}
        # Kubernetes Node -> since when it carries a lock taint and hosts no slurmd Pod.
        self._orphaned: dict[str, float] = {}
        # Every record a hook call makes is numbered; Slurm node -> the number its last pass
        # without an error had read, and the last error.
        self._seq = 0
        self._settled: dict[str, int] = {}
        self._trouble: dict[str, Trouble] = {}
        # Job id -> when Slurm was asked about it (a job it does not know is not asked again soon).
        self._looked_up: dict[int, float] = {}
        # Job id -> when Slurm, read for the job's end (a placeholder's JobTerminating, or one of
        # its epilogs' releases), said it ran on none of its nodes: its epilogs' releases need not
        # ask Slurm again (`release_left`).
        self._left: dict[int, float] = {}
        # Job id -> its KillWait deadline and outcome (what JobTerminating recorded).
        self._killwaits: dict[int, KillWait] = {}
        # Slurm node -> the jobs whose KillWait entry names it: a node's pass reads its own, not
        # every job's (500 Pods deleted at once made each pass walk 500 entries).
        self._killwaits_on: defaultdict[str, set[int]] = defaultdict(set)
        # When `passed` last dropped expired lookups and KillWait entries.
        self._pruned_at = float("-inf")
        # Told what changed (a Slurm node's holds, a job's KillWait) after every change, outside
        # the store's lock: wakes the hook calls waiting on it (tandem.syncer.cluster's waiters).
        self.on_change = on_change

    # -- what the hook calls record --------------------------------------------------------------

    def hold(self, slurm_node: str, job_id: int, strict: bool, deadline: float) -> int:
        """Record a prolog's hold; returns its number (see `outcome`)."""
        now = self.clock()
        with self._lock:
            self._holds[slurm_node][job_id] = Hold(job_id, strict, now, deadline)
            self._released[slurm_node].pop(job_id, None)
            self._failed[slurm_node].pop(job_id, None)
            self._ended[slurm_node].pop(job_id, None)  # a requeued job's prolog holds again
            self._seq += 1
            seq = self._seq
        self.on_change(node_key(slurm_node))
        return seq

    def release(self, slurm_node: str, job_id: int) -> int:
        """Record an epilog's release; returns its number (see `outcome`)."""
        with self._lock:
            seq = self._record_release(slurm_node, job_id)
        self.on_change(node_key(slurm_node))
        return seq

    def _record_release(self, slurm_node: str, job_id: int) -> int:
        """The release itself (lock held); its number."""
        self._holds[slurm_node].pop(job_id, None)
        self._released[slurm_node][job_id] = self.clock()
        self._seq += 1
        return self._seq

    def left(self, job_id: int) -> None:
        """Record that Slurm, read just now for the job's end, says it runs on none of its nodes."""
        with self._lock:
            self._left[job_id] = self.clock()

    def release_left(self, slurm_node: str, job_id: int) -> int | None:
        """Record an epilog's release as `release` does, but only if the job's end was read from
        Slurm (`left`) after the job's last hold of this node: a requeued job's new run holds the
        node after that read, and then None (the release must ask Slurm)."""
        now = self.clock()
        with self._lock:
            at = self._left.get(job_id)
            hold = self._holds[slurm_node].get(job_id)
            if at is None or now - at > REMEMBER_SECONDS or (hold is not None and hold.since >= at):
                return None
            seq = self._record_release(slurm_node, job_id)
        self.on_change(node_key(slurm_node))
        return seq

    def killwait(self, entry: KillWait) -> None:
        """Record a placeholder's end: its nodes' passes drain them at `drain_at` if need be."""
        with self._lock:
            self._put_killwait(entry)
        self.on_change(job_key(entry.job_id))

    def killwait_of(self, job_id: int) -> KillWait | None:
        with self._lock:
            return self._killwaits.get(job_id)

    def answer_killwait(self, job_id: int, drain_at: float, pod_gone: bool) -> KillWait | None:
        """The call that recorded the deadline `drain_at` answers: the entry goes, unless its Pods
        still run where Slurm refused a drain (the node's pass tries again until the drain is made
        or the Pod is gone). An entry a later call for the same job recorded (the script asked
        again through a restarted gateway) is that call's to answer."""
        with self._lock:
            entry = self._killwaits.get(job_id)
            if entry is None or entry.drain_at != drain_at:
                return entry
            self._drop_killwait(job_id)
            if entry.refused and not pod_gone:
                self._put_killwait(replace(entry, answered=True))
        self.on_change(job_key(job_id))
        return entry

    # -- what the reconciler records -------------------------------------------------------------

    def killwait_settled(self, slurm_node: str, job_id: int, drained: bool) -> None:
        """The node's pass drained it for the job (or found it drained so: `drained`), or found no
        Pod of the job keeping it."""
        with self._lock:
            entry = self._killwaits.get(job_id)
            if entry is not None:
                entry = replace(
                    entry,
                    drained=entry.drained | {slurm_node} if drained else entry.drained,
                    spared=entry.spared if drained else entry.spared | {slurm_node},
                    refused=entry.refused - {slurm_node},
                )
                self._put_killwait(entry)
                if entry.answered and not entry.refused:
                    self._drop_killwait(job_id)
        self.on_change(node_key(slurm_node), job_key(job_id))

    def killwait_refused(self, slurm_node: str, job_id: int) -> None:
        """Slurm refused the node's drain: the call may answer without it; the pass tries again."""
        with self._lock:
            entry = self._killwaits.get(job_id)
            if entry is not None:
                self._put_killwait(replace(entry, refused=entry.refused | {slurm_node}))
        self.on_change(node_key(slurm_node), job_key(job_id))

    def fail(self, slurm_node: str, job_id: int, failure: Failure) -> None:
        with self._lock:
            self._holds[slurm_node].pop(job_id, None)
            self._failed[slurm_node][job_id] = (failure, self.clock())
        self.on_change(node_key(slurm_node))

    def forget(self, slurm_node: str, job_ids: frozenset[int]) -> None:
        """Holds that ended (their job finished, or never showed up in Slurm)."""
        now = self.clock()
        with self._lock:
            ended = self._ended[slurm_node]
            for job_id, at in list(ended.items()):
                if now - at > REMEMBER_SECONDS:
                    del ended[job_id]
            for job_id in job_ids:
                if self._holds[slurm_node].pop(job_id, None) is not None:
                    ended[job_id] = now
        if job_ids:
            self.on_change(node_key(slurm_node))

    def asked(self, slurm_node: str, pod_uid: str, asked: Asked) -> None:
        with self._lock:
            self._asked[slurm_node][pod_uid] = asked

    def locked(self, slurm_node: str, job_id: int | None) -> None:
        with self._lock:
            if job_id is None:
                self._locked_for.pop(slurm_node, None)
                self._asked.pop(slurm_node, None)
            else:
                self._locked_for[slurm_node] = job_id

    def orphaned_since(self, kube_node: str, orphaned: bool) -> float | None:
        """Since when this Node has been seen tainted with no slurmd Pod on it (None: it is not)."""
        with self._lock:
            if not orphaned:
                self._orphaned.pop(kube_node, None)
                return None
            return self._orphaned.setdefault(kube_node, self.clock())

    def looked_up(self, job_id: int) -> None:
        with self._lock:
            self._looked_up[job_id] = self.clock()

    def recently_looked_up(self, job_id: int) -> bool:
        with self._lock:
            at = self._looked_up.get(job_id)
            return at is not None and self.clock() - at <= LOOKUP_AGAIN_SECONDS

    def passed(self, slurm_node: str, seq: int, trouble: str = "", unreachable: bool = False) -> None:
        """A pass over the node ended, having read the store at record `seq`: without error
        (""), or with this error (`unreachable`: the API server could not be reached)."""
        with self._lock:
            if trouble:
                self._trouble[slurm_node] = Trouble(trouble, seq, unreachable)
            else:
                self._trouble.pop(slurm_node, None)
                self._settled[slurm_node] = max(seq, self._settled.get(slurm_node, 0))
            now = self.clock()
            if now - self._pruned_at >= PRUNE_EVERY_SECONDS:  # not every pass: they walk every job
                self._pruned_at = now
                for job_id, at in list(self._looked_up.items()):
                    if now - at > LOOKUP_AGAIN_SECONDS:
                        del self._looked_up[job_id]
                for job_id, at in list(self._left.items()):
                    if now - at > REMEMBER_SECONDS:
                        del self._left[job_id]
                for job_id, entry in list(self._killwaits.items()):
                    if now - entry.drain_at > REMEMBER_SECONDS:  # its call (and Slurm's KillWait) long over
                        self._drop_killwait(job_id)
        self.on_change(node_key(slurm_node))

    def _put_killwait(self, entry: KillWait) -> None:
        """Store an entry (lock held), in place of the job's earlier one."""
        self._drop_killwait(entry.job_id)
        self._killwaits[entry.job_id] = entry
        for node in entry.nodes:
            self._killwaits_on[node].add(entry.job_id)

    def _drop_killwait(self, job_id: int) -> None:
        entry = self._killwaits.pop(job_id, None)
        for node in entry.nodes if entry is not None else ():
            jobs = self._killwaits_on.get(node)
            if jobs is not None:
                jobs.discard(job_id)
                if not jobs:
                    del self._killwaits_on[node]

    # -- reading ---------------------------------------------------------------------------------

    def memory(self, slurm_node: str) -> NodeMemory:
        now = self.clock()
        with self._lock:
            released = self._released[slurm_node]
            for job_id, at in list(released.items()):
                if now - at > REMEMBER_SECONDS:
                    del released[job_id]
            failed = self._failed[slurm_node]
            for job_id, (_, at) in list(failed.items()):
                if now - at > REMEMBER_SECONDS:
                    del failed[job_id]
            return NodeMemory(
                MappingProxyType(dict(self._holds[slurm_node])),
                frozenset(released),
                MappingProxyType({j: f for j, (f, _) in failed.items()}),
                MappingProxyType(dict(self._asked[slurm_node])),
                self._locked_for.get(slurm_node),
                self._seq,
                tuple(
                    sorted(
                        (
                            k
                            for j in self._killwaits_on.get(slurm_node, ())
                            if (k := self._killwaits[j]).open_on(slurm_node)
                        ),
                        key=lambda k: (k.drain_at, k.job_id),
                    )
                ),
            )

    def outcome(self, slurm_node: str, job_id: int, since: int) -> HoldOutcome:
        """How the passes since record `since` dealt with the node and `job_id`'s hold."""
        with self._lock:
            failed = self._failed[slurm_node].get(job_id)
            trouble = self._trouble.get(slurm_node)
            return HoldOutcome(
                failed[0] if failed is not None else None,
                job_id in self._ended[slurm_node],
                trouble.message
                if trouble is not None and trouble.seq >= since and trouble.unreachable
                else "",
                trouble.message if trouble is not None else "",
                self._settled.get(slurm_node, 0) >= since,
                tuple(sorted(self._holds[slurm_node])),
            )

    def holds_of(self, slurm_node: str) -> list[int]:
        with self._lock:
            return sorted(self._holds[slurm_node])
