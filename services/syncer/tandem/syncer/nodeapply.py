"""Carries a node sync's plan out for one Slurm node (a Runner's reconcile): Slurm's drain or resume,
what the Node shows, then the lock's writes in the plan's order, Events and the hold store's
bookkeeping. Nothing waits in a pass: a write that fails goes back to the runner, which brings the
node back after its backoff.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol

from tandem import keys
from tandem.events import EventRecorder
from tandem.keys import LockState
from tandem.kube import JSON, KubeClient, KubeError, rfc3339
from tandem.metrics import REGISTRY
from tandem.runner import Requeue
from tandem.slurm.models import Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer import gputaints, killwait
from tandem.syncer.facts import NodeFacts
from tandem.syncer.holds import Asked, HoldStore
from tandem.syncer.killwait import NodeKillWait
from tandem.syncer.locking import (
    EVICTION_RETRY_SECONDS,
    Eviction,
    LockPlan,
    OrphanFacts,
    decide_orphan,
    node_ref,
)
from tandem.syncer.nodefacts import NODE_KEY_PREFIX
from tandem.syncer.nodesync import CONDITION, Plan, decide
from tandem.syncer.writes import LockWrites
from tandem.transient import unreachable

log = logging.getLogger(__name__)

# How long a job cancelled for a GPU tainted NoExecute is not cancelled again (its end shows in the
# mirror within a poll or two).
EVICTED_JOB_MEMORY_SECONDS = 60.0

EVICTIONS = REGISTRY.counter("tandem_evictions_total", "Pods evicted to lock a Node", ["strict"])
NODE_SYNC_ACTIONS = REGISTRY.counter(
    "tandem_node_sync_actions_total",
    "drains, resumes and Node writes made to keep node state in sync",
    ["action"],
)


class SlurmNodes(Protocol):
    """What the node sync changes in Slurm (tandem.slurm.rest.SlurmRestClient is one)."""

    def drain_node(self, node: str, reason: str) -> None: ...

    def resume_node(self, node: str) -> None: ...

    def cancel_job(self, job_id: int, signal: str | None = None) -> None: ...


class FactsSource(Protocol):
    def facts(self, slurm_node: str) -> NodeFacts: ...

    def orphan(self, kube_node: str) -> OrphanFacts: ...


class NodeSync:
    """Carries the plan out for one Slurm node (a Runner's reconcile). Nothing waits in a pass: a
    write that fails goes back to the runner, which brings the node back after its backoff; a
    lock still waiting for Pods to leave comes back when one changes or at its next deadline."""

    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmNodes,
        facts: FactsSource,
        wrote: Callable[[Node], None] = lambda node: None,
        *,
        store: HoldStore | None = None,
        writes: LockWrites | None = None,
        events: EventRecorder | None = None,
        lookup: Callable[[int], object] = lambda job_id: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `wrote`: told the Slurm node as this sync left it (the mirror's SlurmMirror.expect_node).
        # `lookup`: read a job from Slurm into the mirror (SlurmMirror.refresh_job).
        self.kube, self.slurm, self.facts, self.wrote = kube, slurm, facts, wrote
        self.store = store if store is not None else HoldStore()
        self.writes = writes if writes is not None else LockWrites(kube, "", lambda name: None)
        self.events, self.lookup, self.clock = events, lookup, clock
        # Job id -> until when a cancel for a GPU tainted NoExecute is not asked again.
        self._evicted: dict[int, float] = {}
        # Events go out from here, never in a pass: a slow API must not hold a node up.
        self._event_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lock-events")

    def reconcile(self, key: str) -> Requeue:
        if key.startswith(NODE_KEY_PREFIX):
            return self._orphan(key[len(NODE_KEY_PREFIX) :])
        f = self.facts.facts(key)
        plan = decide(f, self.clock())
        # The node's state, then its lock: the lock is carried out (and the hook calls waiting
        # for it answered) even when Slurm refused the state's drain or resume; that error still
        # goes back to the runner.
        refused: SlurmApiError | None = None
        try:
            try:
                self._apply_state(key, f, plan)
            except SlurmApiError as e:
                refused = e
            self._apply_lock(key, f, plan.lock)
        except Exception as e:
            not_reached = isinstance(e, KubeError) and unreachable(e.status)
            self.store.passed(key, f.memory.seq, str(e) or type(e).__name__, not_reached)
            raise
        self.store.passed(key, f.memory.seq)
        if refused is not None:
            raise refused
        return plan.requeue_after

    def _apply_state(self, slurm_node: str, f: NodeFacts, plan: Plan) -> None:
        lock = plan.lock
        for job_id, drained in plan.killwait.settle:
            self.store.killwait_settled(slurm_node, job_id, drained)
        if plan.killwait.drain is not None and plan.drain == plan.killwait.drain.reason:
            self._drain_at_killwait(slurm_node, f, plan.killwait.drain)
        elif plan.drain:
            self._drain(slurm_node, f, plan.drain, timed_out=bool(lock.drain))
        if plan.resume:
            self.slurm.resume_node(slurm_node)
            NODE_SYNC_ACTIONS.inc(action="resume")
            log.info(
                "resumed: the cause of its drain cleared",
                extra={"node": slurm_node, "reason": f.slurm.reason if f.slurm is not None else ""},
            )
            if f.slurm is not None:
                flags = tuple(x for x in f.slurm.flags if x != "DRAIN")
                self.wrote(replace(f.slurm, flags=flags, reason="", reason_set_by=""))
        if plan.show is not None and f.kube_node_name:
            self._show(f.kube_node_name, *plan.show)
        if plan.gpus is not None and f.kube_node_name:
            self._show_gpus(f.kube_node_name, *plan.gpus)
        if plan.rules and f.rules_served:
            self._apply_rules(slurm_node, f, plan.rules)
        for job_id, index in plan.evict:
            self._evict_job(slurm_node, f, job_id, index)

    def _evict_job(self, slurm_node: str, f: NodeFacts, job_id: int, index: int) -> None:
        """A Slurm job on a GPU tainted NoExecute is cancelled, once (its end takes a moment to
        show in the mirror, and the passes between would ask again)."""
        now = self.clock()
        if self._evicted.get(job_id, float("-inf")) > now:
            return
        self.slurm.cancel_job(job_id)
        self._evicted = {j: t for j, t in self._evicted.items() if t > now}
        self._evicted[job_id] = now + EVICTED_JOB_MEMORY_SECONDS
        NODE_SYNC_ACTIONS.inc(action="gpu evict")
        message = (
            f"Slurm job {job_id} held GPU {index} of Slurm node {slurm_node}, tainted NoExecute in"
            " Kubernetes: cancelled, as the Pods using that device are evicted"
        )
        log.warning("cancelled a job on a GPU tainted NoExecute", extra={"job": job_id, "node": slurm_node})
        if f.kube_node_name:
            self._event(node_ref(f.kube_node_name), "Warning", "SlurmJobEvicted", message)

    def _apply_rules(self, slurm_node: str, f: NodeFacts, rules: gputaints.RulesPlan) -> None:
        """The DeviceTaintRules mirroring the GPUs a Slurm drain names: stale ones go first (a
        rule of the same name made anew), then the new; an Event on the Node says which."""
        base = f"/apis/{f.rules_served}/{keys.DEVICE_TAINT_RULES}"
        for name in rules.delete:
            try:
                self.kube.delete(f"{base}/{name}")
            except KubeError as e:
                if not e.not_found:
                    raise
        for manifest in rules.create:
            try:
                self.kube.post(base, {**manifest, "apiVersion": f.rules_served})
            except KubeError as e:
                if e.status != 409:  # made by an earlier pass the cache does not show yet
                    raise
        NODE_SYNC_ACTIONS.inc(action="gpu taint" if rules.create else "gpu untaint")
        reason = f.slurm.reason if f.slurm is not None else ""
        if rules.create:
            devices = ", ".join(str(m["spec"]["deviceSelector"]["device"]) for m in rules.create)
            message = (
                f"Slurm node {slurm_node} is drained naming GPUs ({reason}): devices {devices} tainted"
                f" {keys.SLURM_GPU_TAINT_KEY}:NoSchedule, so no Pod is given them until Slurm resumes it"
            )
            log.warning("GPUs tainted for a Slurm drain", extra={"node": slurm_node, "devices": devices})
            self._event(node_ref(f.kube_node_name), "Warning", "SlurmDrainedGpus", message)
        elif rules.delete:
            message = f"Slurm node {slurm_node} no longer names GPUs in a drain: their device taints removed"
            log.info("GPU taints removed", extra={"node": slurm_node, "rules": list(rules.delete)})
            self._event(node_ref(f.kube_node_name), "Normal", "SlurmGpusResumed", message)

    def _show_gpus(self, kube_node: str, difference: str, shown: bool) -> None:
        if shown:
            condition = {
                "type": keys.GPU_MISMATCH_CONDITION,
                "status": "True",
                "reason": "GpuDevicesDisagree",
                "message": difference,
                "lastTransitionTime": rfc3339(),
                "lastHeartbeatTime": rfc3339(),
            }
            log.warning(
                "a Node's GPUs and Slurm's disagree", extra={"kube_node": kube_node, "why": difference}
            )
        else:
            condition = {"type": keys.GPU_MISMATCH_CONDITION, "$patch": "delete"}
        self.kube.strategic_patch(
            f"/api/v1/nodes/{kube_node}/status", {"status": {"conditions": [condition]}}
        )
        NODE_SYNC_ACTIONS.inc(action="gpu mismatch" if shown else "gpu agree")

    def _drain(self, slurm_node: str, f: NodeFacts, reason: str, timed_out: bool) -> None:
        try:
            self.slurm.drain_node(slurm_node, reason)
        except SlurmApiError as e:
            if not timed_out:
                raise
            # The prolog fails anyway, and Slurm drains the node as a prolog error.
            log.warning(
                "cannot drain a node whose lock timed out", extra={"node": slurm_node, "error": str(e)}
            )
            return
        NODE_SYNC_ACTIONS.inc(action="drain")
        log.warning("node drained", extra={"node": slurm_node, "reason": reason})
        if f.slurm is not None:
            flags = f.slurm.flags if f.slurm.drained else (*f.slurm.flags, "DRAIN")
            self.wrote(replace(f.slurm, flags=flags, reason=reason, reason_set_by=f.own_user))

    def _drain_at_killwait(self, slurm_node: str, f: NodeFacts, due: NodeKillWait) -> None:
        """Just before KillWait: Slurm gives the node to no other job while the Pod runs there."""
        try:
            self._drain(slurm_node, f, due.reason, timed_out=False)
        except SlurmApiError:
            self.store.killwait_refused(slurm_node, due.job_id)
            raise
        self.store.killwait_settled(slurm_node, due.job_id, drained=True)
        if due.pod is not None:
            message = killwait.drained_event(due.job_id, slurm_node, due.reason)
            self._event(due.pod, "Warning", "SlurmNodeDrained", message)

    def _apply_lock(self, slurm_node: str, f: NodeFacts, lock: LockPlan) -> None:
        if lock.taint is not None and f.kube_node_name and f.kube_node is not None:
            self.writes.set_taint(f.kube_node_name, lock.taint)
        if lock.annotate_first is not None:
            self.writes.annotate(slurm_node, lock.annotate_first)
        for job_id in lock.lookup:
            try:
                self.lookup(job_id)
            except SlurmApiError as e:
                log.warning("cannot look up a Pod's job", extra={"job": job_id, "error": str(e)})
            self.store.looked_up(job_id)
        for eviction in lock.evict:
            self._evict(slurm_node, eviction)
        if lock.annotate is not None:
            self.writes.annotate(slurm_node, lock.annotate)
            log.info(
                "node unlocked" if lock.annotate == LockState.FALSE else "node locked",
                extra={"node": slurm_node, "kube_node": f.kube_node_name, "lock": lock.annotate.value},
            )
        for event in lock.events:
            self._event(event.obj, event.type, event.reason, event.message)
        for job_id, failure in lock.fail:
            log.warning("lock failed", extra={"node": slurm_node, "job": job_id, "error": failure.message})
            self.store.fail(slurm_node, job_id, failure)
        if lock.forget:
            self.store.forget(slurm_node, lock.forget)
        if lock.locked_for is not None:
            self.store.locked(slurm_node, lock.locked_for or None)

    def _evict(self, slurm_node: str, eviction: Eviction) -> None:
        pod, strict = eviction.pod, str(eviction.strict).lower()
        why = self.writes.evict(pod)
        meta = pod.get("metadata") or {}
        uid, version = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        self.store.asked(slurm_node, uid, Asked(why, self.clock() + EVICTION_RETRY_SECONDS, version))
        if why:
            return
        log.info(
            "evicted",
            extra={
                "pod": f"{meta.get('namespace')}/{meta.get('name')}",
                "node": slurm_node,
                "job": eviction.job_id,
            },
        )
        EVICTIONS.inc(strict=strict)
        self._event(
            pod,
            "Warning",
            "Evicted",
            f"Slurm job {eviction.job_id} locks Node {(pod.get('spec') or {}).get('nodeName')} "
            f"(Slurm node {slurm_node}); Pods that do not tolerate {keys.LOCK_KEY} must leave",
        )

    def _orphan(self, kube_node: str) -> Requeue:
        """A Node that may carry a lock taint no Slurm node maps to any more."""
        remove, after = decide_orphan(self.facts.orphan(kube_node), self.clock())
        if remove:
            self.writes.set_taint(kube_node, False)
            self.store.orphaned_since(kube_node, False)
            log.info("removed a lock taint from a Node no Slurm node maps to", extra={"kube_node": kube_node})
        return after

    def _event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        if self.events is not None:
            self._event_pool.submit(self.events.record, obj, type_, reason, message)

    def _show(self, kube_node: str, reason: str, cordoned: bool) -> None:
        path = f"/api/v1/nodes/{kube_node}"
        self.kube.merge_patch(
            path, {"metadata": {"annotations": {keys.DRAIN_ANNOTATION: reason if cordoned else None}}}
        )
        if cordoned:
            condition = {
                "type": CONDITION,
                "status": "True",
                "reason": "SlurmNodeDrained",
                "message": reason,
                "lastTransitionTime": rfc3339(),
                "lastHeartbeatTime": rfc3339(),
            }
        else:
            condition = {"type": CONDITION, "$patch": "delete"}
        self.kube.strategic_patch(f"{path}/status", {"status": {"conditions": [condition]}})
        NODE_SYNC_ACTIONS.inc(action="show" if cordoned else "clear")
