"""The hook calls the node sync answers: a prolog's acquire, an epilog's release and a placeholder's
end (its KillWait deadline, or its own drain at KillWait) record what they ask in the hold store,
put the Slurm node at the front of the node sync's queue, and wait on the caches for the outcome.
They write nothing themselves: the node sync (tandem.syncer.nodesync) takes and releases every
lock, drains, and retries what fails.

Each call is written as steps around its wait (tandem.syncer.steps): the gRPC service waits on the
event loop, holding no thread; `acquire` and `release` wait on the caller's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tandem import budget, slurmd
from tandem.keys import LockState
from tandem.metrics import REGISTRY
from tandem.placeholder import PodRef
from tandem.slurm.models import JobStatus
from tandem.slurm.rest import SlurmApiError
from tandem.syncer import killwait, nodesync
from tandem.syncer.cluster import ClusterView
from tandem.syncer.holds import HoldStore, KillWait
from tandem.syncer.locking import NodeLockView, holders, satisfies
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodefacts import CacheFacts
from tandem.syncer.steps import Steps, Wait, run
from tandem.syncer.waiters import job_key, node_key, pod_key
from tandem.workqueue import WorkQueue

log = logging.getLogger(__name__)

LOCK_WAIT_SECONDS = REGISTRY.histogram(
    "tandem_lock_wait_seconds", "time a prolog waited for its Node's lock", ["strict"]
)
UNLOCKS_REFUSED = REGISTRY.counter(
    "tandem_unlocks_refused_total", "unlock calls refused: Slurm said the job still held the node"
)
# What an acquire waits past its hold's deadline for the pass that fails it (the drain included).
SETTLE_SECONDS = budget.HOP_MARGIN_SECONDS / 2
# The longest an epilog's release waits for the node to be unlocked.
RELEASE_WAIT_SECONDS = 10.0


def _runs_on(status: JobStatus, slurm_node: str) -> bool:
    """Slurm says the job runs on the node, not cleaning up (an epilog runs once the job left
    RUNNING: COMPLETING, a requeue, a preemption)."""
    return (
        status.job.state in ("RUNNING", "SUSPENDED")
        and "COMPLETING" not in status.job.flags
        and slurm_node in status.job.nodes
    )


class LockFailed(Exception):
    """The lock was not taken: the prolog fails, and Slurm drains the node. `unavailable`:
    Kubernetes could not be written in time (the caller may try again)."""

    def __init__(self, message: str, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class NodeLocks:
    def __init__(
        self,
        store: HoldStore,
        queue: WorkQueue,
        cluster: ClusterView,
        facts: CacheFacts,
        mirror: SlurmMirror,
        cap: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `cap`: --lock-timeout, an optional bound below the caller's budget (tandem.budget).
        self.store, self.queue, self.cluster, self.facts, self.mirror = store, queue, cluster, facts, mirror
        self.cap, self.clock = cap, clock
        REGISTRY.gauge(
            "tandem_node_locks",
            "Slurm nodes by lock state (as last written or read)",
            ["state"],
            collect=self._count_states,
        )
        REGISTRY.gauge(
            "tandem_node_locks_idle",
            "Slurm nodes locked (taint on their Node) while Slurm runs no job there and no prolog holds them",
            collect=self._count_idle,
        )

    def acquire(self, slurm_node: str, job_id: int, strict: bool, timeout: float) -> NodeLockView:
        """`acquire_steps`, waiting on this thread."""
        return run(self.acquire_steps(slurm_node, job_id, strict, timeout), self.cluster.waiters.wait_for)

    def acquire_steps(
        self, slurm_node: str, job_id: int, strict: bool, timeout: float
    ) -> Steps[NodeLockView]:
        """Hold the node for the job; return once it is locked (strictly for a placeholder) and
        its Node tainted. Raises LockFailed when the node sync failed the hold (the Pods that did
        not leave by the deadline, no slurmd Pod, no Node) or could not settle it in time."""
        began = self.clock()
        want = LockState.LOCKED_STRICT if strict else LockState.LOCKED
        seq = self.store.hold(slurm_node, job_id, strict, deadline=began + max(0.0, timeout))
        self.queue.add(slurm_node, urgent=True)

        def settled() -> bool:
            now = self.store.outcome(slurm_node, job_id, seq)
            if now.failure is not None or now.ended:
                return True
            if now.unreachable:
                return True  # answered at once, as the API's own outage: the prolog asks again
            if not now.settled:
                # A pass that read this hold, not one that began before it (and may unlock a
                # node that looks locked now), says whether the lock is the job's.
                return False
            pod = self.cluster.slurmd_pod(slurm_node)
            host = slurmd.host_of(pod)
            return bool(host) and satisfies(self.facts.lock_of(pod), want) and self.facts.tainted(host)

        done = yield Wait((node_key(slurm_node),), settled, max(0.0, timeout) + SETTLE_SECONDS)
        outcome = self.store.outcome(slurm_node, job_id, seq)
        if outcome.failure is not None:
            raise LockFailed(outcome.failure.message, outcome.failure.unavailable)
        if outcome.ended:
            return self._ended_while_locking(slurm_node, job_id)
        if outcome.unreachable or not done:
            trouble = outcome.unreachable or outcome.trouble
            raise LockFailed(
                f"Kubernetes API: {trouble}" if trouble else f"{slurm_node} not locked within {timeout:.0f}s",
                unavailable=True,
            )
        LOCK_WAIT_SECONDS.observe(self.clock() - began, strict=str(strict).lower())
        return self._view_now(slurm_node, outcome.holds)

    def _ended_while_locking(self, slurm_node: str, job_id: int) -> NodeLockView:
        """The job was cancelled while its prolog waited (for a Pod its budget kept, say). Its
        prolog succeeds, since Slurm launches no script of a killed job: a failure would have Slurm
        drain the node for a prolog error. Only after Slurm itself, asked now, confirms the end:
        the mirror's copy may predate a requeue, and a job that runs must not run unlocked."""
        try:
            status = self.mirror.refresh_job(job_id)
        except SlurmApiError as e:
            raise LockFailed(f"Slurm API: {e}", unavailable=True) from e
        if status is not None and not status.ended:
            raise LockFailed(f"job {job_id} is running again; lock again", unavailable=True)
        log.info("hold ended: its job ended while locking", extra={"node": slurm_node, "job": job_id})
        return self._view_now(slurm_node, tuple(self.store.holds_of(slurm_node)))

    def release(self, slurm_node: str, job_id: int, timeout: float = RELEASE_WAIT_SECONDS) -> NodeLockView:
        """`release_steps`, waiting on this thread."""
        return run(self.release_steps(slurm_node, job_id, timeout), self.cluster.waiters.wait_for)

    def release_steps(
        self, slurm_node: str, job_id: int, timeout: float = RELEASE_WAIT_SECONDS
    ) -> Steps[NodeLockView]:
        """The job no longer holds the node; return once a pass has carried that out (the node
        unlocked, or kept for another holder, or kept while Slurm is not read). Refused while
        Slurm, asked now, says the job still holds the node: an epilog calls once its job ended,
        and nothing a caller says unlocks a node under a running job. A placeholder's end
        (JobTerminating) or another of the job's nodes' release read that from Slurm already,
        unless its job held the node again since (a requeued run): then Slurm is not asked again
        (one slurmrestd read a Pod less, and one a multi-node job rather than one a node)."""
        seq = self.store.release_left(slurm_node, job_id)
        if seq is None:
            try:
                status = self.mirror.refresh_job(job_id)
            except SlurmApiError as e:
                raise LockFailed(f"Slurm API: {e}", unavailable=True) from e
            if status is not None and _runs_on(status, slurm_node):
                UNLOCKS_REFUSED.inc()
                raise LockFailed(
                    f"Slurm says job {job_id} still holds {slurm_node} ({status.job.state}): a node"
                    " is unlocked for a job once it ended (its epilog's call), never under it"
                )
            if status is not None:
                # Its other nodes' epilogs call too, all at once: one read for them all.
                self.job_read(status)
            seq = self.store.release(slurm_node, job_id)
        self.queue.add(slurm_node, urgent=True)

        def settled() -> bool:
            now = self.store.outcome(slurm_node, job_id, seq)
            return now.settled or bool(now.unreachable)

        done = yield Wait((node_key(slurm_node),), settled, min(timeout, RELEASE_WAIT_SECONDS))
        outcome = self.store.outcome(slurm_node, job_id, seq)
        if not done or not outcome.settled:
            raise LockFailed(
                f"Kubernetes API: {outcome.trouble}"
                if outcome.trouble
                else f"{slurm_node} not unlocked in time",
                unavailable=True,
            )
        return self._view_now(slurm_node, outcome.holds)

    def _view_now(self, slurm_node: str, holds: tuple[int, ...]) -> NodeLockView:
        """The node's lock once a call settled (`holds`: the store's, read with its outcome)."""
        pod = self.cluster.slurmd_pod(slurm_node)
        if pod is None:  # no slurmd Pod (any more): nothing to lock or unlock
            raise LockFailed(self._no_slurmd(slurm_node))
        return self._view(slurm_node, pod, holds)

    def job_read(self, verified: JobStatus) -> None:
        """A job's end, as read just now from Slurm (`verified`: a placeholder's JobTerminating,
        Callers.placeholder, or an epilog's release): if Slurm says it runs on none of its nodes
        any more, its epilogs' releases need not ask again."""
        if verified.job.nodes and not any(_runs_on(verified, n) for n in verified.job.nodes):
            self.store.left(verified.job_id)

    def killwait_steps(
        self, status: JobStatus, ref: PodRef, script_node: str, drain_in: float, timeout: float
    ) -> Steps[tuple[bool, list[str]]]:
        """A placeholder's job ended: record its KillWait deadline, `drain_in` seconds from now
        (the node sync then drains each node where a Pod of the job still runs), and wait, at
        most `timeout`, for its Pods to go or for every node's pass to settle. Returns whether the
        Pods are gone, and the Slurm nodes drained."""
        now = self.clock()
        drain_at, deadline = now + max(0.0, drain_in), now + max(0.0, timeout)
        entry = KillWait(status.job_id, ref, script_node, status, drain_at)
        self.store.killwait(entry)
        for slurm_node in entry.nodes:
            self.queue.add(slurm_node, urgent=True)
            # A pass comes back at drain_at by itself; this one comes even if that node's last
            # pass failed (and lies in its backoff, which may outlast KillWait).
            self.queue.add_after(slurm_node, drain_at - now)

        def gone() -> bool:
            return not self.facts.killwait_pods(status, ref, script_node)

        def settled() -> bool:
            found = self.store.killwait_of(status.job_id)
            return gone() or found is None or found.outcome_known

        waits_on = (job_key(status.job_id), pod_key(ref.uid), *(node_key(n) for n in entry.nodes))
        yield Wait(waits_on, settled, max(0.0, deadline - self.clock()))
        pod_gone = gone()
        found = self.store.answer_killwait(status.job_id, drain_at, pod_gone)
        if pod_gone:
            return True, []
        return False, [n for n in entry.nodes if found is not None and n in found.drained]

    def drain_steps(self, status: JobStatus, ref: PodRef, slurm_node: str, timeout: float) -> Steps[bool]:
        """A placeholder's own drain of its node at KillWait (its script's call when its
        JobTerminating got no answer): a KillWait deadline due now, drained by the nodes' passes as
        every KillWait drain is. Like JobTerminating's deadline it covers each node of the job where
        a Pod of it still runs: it replaces any deadline a JobTerminating still waiting recorded,
        and one narrowed to this node would drop that call's other nodes. Returns whether this
        node is drained for the job; raises LockFailed (unavailable) when its pass could not drain
        it in time: the script then drains it itself."""
        if self.drained_by_others(slurm_node):
            log.info(
                "not draining: the node is drained by someone else, whose reason stays",
                extra={"job": status.job_id, "slurm_node": slurm_node},
            )
            return True
        if not self.occupied(status, ref, slurm_node):
            log.info(
                "not draining: no Pod of the job runs on the node",
                extra={"job": status.job_id, "slurm_node": slurm_node},
            )
            return False
        pod_gone, drained = yield from self.killwait_steps(status, ref, slurm_node, 0.0, timeout)
        if pod_gone:
            return False
        if slurm_node not in drained:
            raise LockFailed(
                f"{slurm_node} not drained within {timeout:.0f}s (Slurm refused or was not read); the"
                f" syncer tries again while a Pod of job {status.job_id} runs there",
                unavailable=True,
            )
        return True

    def occupied(self, status: JobStatus, ref: PodRef, slurm_node: str) -> bool:
        """Whether a Pod of the ended job is bound to `slurm_node`'s Node and runs there: the one
        rule every KillWait drain follows (killwait.drain_targets)."""
        pods = self.facts.killwait_pods(status, ref, slurm_node)
        return slurm_node in killwait.drain_targets(status, slurm_node, pods, self.cluster.kube_node_of)

    def drained_by_others(self, slurm_node: str) -> bool:
        """Whether the Slurm node is drained by someone other than this syncer (an administrator,
        a health check), as last read: a drain never Tandem's to overwrite (nodesync)."""
        return nodesync.drain_is_others(self.mirror.state.node(slurm_node), self.facts.own_user)

    # -- reading -------------------------------------------------------------------------------

    def get(self, slurm_node: str) -> NodeLockView:
        pod = self.cluster.slurmd_pod(slurm_node)
        if pod is None:
            raise LookupError(self._no_slurmd(slurm_node))
        return self._view(slurm_node, pod, tuple(self.store.holds_of(slurm_node)))

    def list(self) -> list[NodeLockView]:
        """Every Slurm node's lock; one whose slurmd Pod is on no Node yet shows no Node."""
        views = []
        for pod in sorted(self.cluster.slurmd_pods(), key=lambda p: str(p["metadata"]["name"])):
            name = str(pod["metadata"]["name"])
            views.append(self._view(name, pod, tuple(self.store.holds_of(name))))
        return views

    def _no_slurmd(self, slurm_node: str) -> str:
        return f"no slurmd Pod {self.cluster.slurmd_namespace}/{slurm_node} for Slurm node {slurm_node}"

    def _view(self, slurm_node: str, pod: slurmd.Pod, holds: tuple[int, ...]) -> NodeLockView:
        held = set(holds) | {s.job_id for s in self.mirror.state.jobs_on(slurm_node)}
        return NodeLockView(slurm_node, slurmd.host_of(pod), self.facts.lock_of(dict(pod)), sorted(held))

    def _count_states(self) -> dict[tuple[str, ...], float]:
        counts: dict[tuple[str, ...], float] = {(s.value,): 0.0 for s in LockState}
        for pod in self.cluster.slurmd_pods():
            counts[(self.facts.lock_of(pod).value,)] += 1
        return counts

    def _count_idle(self) -> dict[tuple[str, ...], float]:
        """What the node sync should have released: the TandemNodeLockedWhileIdle alert."""
        if not self.mirror.state.synced:
            return {(): 0.0}
        idle = 0
        now = self.clock()
        for pod in self.cluster.slurmd_pods():
            name = str(pod["metadata"]["name"])
            if self.facts.lock_of(pod) == LockState.FALSE:
                continue
            f = self.facts.facts(name)
            if not holders(f, now) and f.slurm is not None and not f.slurm.busy:
                idle += 1
        return {(): float(idle)}
