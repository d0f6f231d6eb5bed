"""The scheduler's watches: which events of which source queue which placement keys, in
controller-runtime's Watches(source, handler, predicates) shape (tandem.watches).

    source                           predicates (drop)                      handler (keys queued)
    Pods (this scheduler's)          a kubelet's running report, the echo   the Pod's, its group's
                                     of this process's record or bind, a
                                     Pod deleted once its jobs stopped
      ... as Pods a Node holds       (room upkeep)                          see bound Pods
    Nodes                            a heartbeat                            every unbound Pod's
    bound Pods (other schedulers')   no room freed                          the Pods no Node took
    PodGroups, CompositePodGroups                                           the group's, its members'
    Jobs (batch/v1)                  the size it asks for did not move      its Pods' groups
    ResourceClaims, their templates                                         the Pods naming them
    Slurm jobs (the syncer's stream) a job ending after its Pod went        its Pod's (urgent when
                                                                            it started or ends)
    a Slurm node moved               -                                      its jobs' Pods (urgent)
    Slurm's topology                 -                                      every unbound Pod's
    the tenant policy                -                                      the Pods of the namespaces
                                                                            whose rules changed

A placement key is what tandem.scheduler.controller reconciles: a Pod alone's, or its group's
(caches.Caches.key_of). Predicates only drop what no decision would act on; the reconcile that a
queued key brings decides everything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tandem import keys, placeholder
from tandem.dra import extended
from tandem.dra.shape import at, items, obj
from tandem.kube import JSON, object_key, pod_finished
from tandem.metrics import REGISTRY
from tandem.scheduler import groups, podstate
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.caches import (
    BY_GROUP,
    BY_NAMESPACE,
    BY_OWNER_JOB,
    BY_PARENT,
    BY_UNBOUND,
    BY_UNSCHEDULABLE,
    Caches,
    Informers,
)
from tandem.scheduler.dra_source import BY_CLAIM
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.policy import Policy
from tandem.scheduler.policy_source import PolicySource
from tandem.scheduler.topology_source import TopologySource
from tandem.slurm.models import JobStatus
from tandem.watches import Change, Watch, on_change
from tandem.workqueue import Key, WorkQueue

WAKEUPS = REGISTRY.counter(
    "tandem_scheduler_wakeups_total",
    "keys queued for a reconcile, by what queued them (a Pod, its job, a Node, a freed Node, ...)",
    ["source"],
)

SKIPPED = REGISTRY.counter(
    "tandem_scheduler_wakeups_skipped_total",
    "changes that queued no reconcile: no decision would act on them (why)",
    ["why"],
)


@dataclass(frozen=True)
class PolicyChange:
    """The tenant policy in force before and after a change of its ConfigMap."""

    old: Policy
    new: Policy


@dataclass(frozen=True)
class JobChange:
    """The syncer's stream showed a placeholder job of this scheduler change."""

    pod: placeholder.PodRef
    job: JobStatus


def _always(event: object) -> bool:
    return True


class SchedulerWatches:
    """Each source's callback, as its informer or stream calls it (`register` hands them out)."""

    def __init__(self, caches: Caches, jobs: JobTracker, assumed: Assumed, queue: WorkQueue) -> None:
        self.caches = caches
        self.jobs = jobs
        self.assumed = assumed
        self.queue = queue
        pod = Watch(
            queue,
            self._pod_keys,
            (_not_running_report, self._not_own_write_echo, self._not_gone_with_its_jobs),
        )
        # The memory forgets what the change shows after the predicates read it: they stay pure.
        self.on_pod = on_change(self._own_pod_held, pod, self._memory_sees)
        self.on_node = on_change(Watch(queue, self._unbound_keys_for("node"), (_not_heartbeat,)))
        self.on_bound_pod = on_change(
            self._count_room, Watch(queue, self._unschedulable_keys, (_room_freed,))
        )
        self.on_podgroup = on_change(Watch(queue, self._podgroup_keys))
        self.on_composite = on_change(Watch(queue, self._composite_keys))
        self.on_kube_job = on_change(Watch(queue, self._kube_job_keys))
        self.on_claim = on_change(Watch(queue, self._claim_keys))
        self.on_claim_template = on_change(Watch(queue, self._claim_template_keys))
        self._job = Watch(queue, self._job_keys, (self._not_after_its_pod_went,), _bind_or_stop)
        self.on_node_moved = Watch(queue, self._keys_on_slurm_node, urgent=_always)
        self._topology = Watch(queue, self._unbound_keys_for("topology"))
        self._policy = Watch(queue, self._keys_under_rules_changed)

    # -- what the stream and the sources without objects call ------------------------------------

    def on_job(self, pod: placeholder.PodRef, job: JobStatus) -> None:
        self.assumed.job_changed(job)
        self._job(JobChange(pod, job))

    def on_topology_changed(self) -> None:
        """Slurm's topology changed: a gang waiting for a domain with room may fit now."""
        self._topology(None)

    def on_policy_changed(self, old: Policy, new: Policy) -> None:
        """The tenant policy changed: the Pods its change concerns are judged again. One not bound
        yet may be refused now (and its job cancelled); a bound one is only told
        (admission.would_be_refused_message)."""
        self._policy(PolicyChange(old, new))

    # -- caches derived from the events -----------------------------------------------------------

    def _count_room(self, change: Change) -> None:
        """What a Node holds changed: its room is summed again (eligibility.RoomLedger)."""
        cluster = self.caches.cluster
        if cluster is None:
            return
        for pod in (change.old, change.new):
            node = (pod or {}).get("spec", {}).get("nodeName")
            if node:
                cluster.rooms.changed(str(node))

    def _memory_sees(self, change: Change) -> None:
        self.assumed.pod_changed(change.old, change.new)

    def _own_pod_held(self, change: Change) -> None:
        """One of this scheduler's Pods as a Pod a Node holds (the bound-Pod informer leaves them
        out, ClusterCaches.own holds them): its Node's room changes, its end frees room."""
        old, new = change.old, change.new
        held_before = old if old is not None and _node_name(old) else None
        held_now = new if new is not None and _node_name(new) else None
        if held_before is not None or held_now is not None:
            self.on_bound_pod(change.key, held_before, held_now)

    # -- handlers: the keys an event concerns -----------------------------------------------------

    def _pod_keys(self, change: Change) -> list[Key]:
        WAKEUPS.inc(source="pod")
        # A member of a group is placed with its group: the group's key is what is reconciled.
        found = [
            self.caches.placement_key(gkey)
            for pod in (change.old, change.new)
            if pod is not None and (gkey := groups.group_key(pod)) is not None
        ]
        return [*found, change.key]

    def _unbound_keys_for(self, source: str) -> Callable[[object], list[Key]]:
        """Every Pod not bound yet looks again: a Node's labels, taints, cordon, readiness or room
        changed, or Slurm's topology did (a gang waiting for a domain with room may fit now)."""

        def unbound_keys(event: object) -> list[Key]:
            WAKEUPS.inc(source=source)
            return [self.caches.key_of(pod) for pod in self.caches.pods.by_index(BY_UNBOUND, "yes")]

        return unbound_keys

    def _keys_under_rules_changed(self, change: PolicyChange) -> list[Key]:
        """Every Pod's key when the default rules changed (they apply to every namespace not
        listed); else the keys of the Pods in the namespaces whose rules changed. A Pod's
        validation reads only its own namespace's rules (policy.check)."""
        old, new = change.old, change.new
        if old.default != new.default:
            return [self.caches.key_of(pod) for pod in self.caches.pods.items()]
        changed = sorted(ns for ns in {*old.namespaces, *new.namespaces} if old.rules(ns) != new.rules(ns))
        return [
            self.caches.key_of(pod) for ns in changed for pod in self.caches.pods.by_index(BY_NAMESPACE, ns)
        ]

    def _unschedulable_keys(self, change: Change) -> list[Key]:
        """Room freed on a Node (a Pod left or finished): the Pods no Node would take look again."""
        WAKEUPS.inc(source="room freed")
        return [self.caches.key_of(pod) for pod in self.caches.pods.by_index(BY_UNSCHEDULABLE, "yes")]

    def _podgroup_keys(self, change: Change) -> list[Key]:
        pg = change.new or change.old
        if pg is None:
            return []
        gkey = groups.key_of_podgroup(pg)
        return [
            gkey,
            self.caches.placement_key(gkey),  # its CompositePodGroup's, when it has one
            # A basic policy: its Pods go one by one.
            *(object_key(pod) for pod in self.caches.pods.by_index(BY_GROUP, gkey)),
        ]

    def _composite_keys(self, change: Change) -> list[Key]:
        """A CompositePodGroup came, changed or went: it and each child PodGroup look again (a
        child is placed by its own key when its composite is basic)."""
        composite = change.new or change.old
        if composite is None:
            return []
        children = self.caches.podgroups.by_index(BY_PARENT, change.key)
        return [groups.key_of_composite(composite), *(groups.key_of_podgroup(c) for c in children)]

    def _kube_job_keys(self, change: Change) -> list[Key]:
        """A Job asks for another number of Pods (the informer drops every other update): its Pods'
        groups look again (an elastic gang's core shrinks when its workload asks for fewer)."""
        WAKEUPS.inc(source="workload size")
        pods = self.caches.pods.by_index(BY_OWNER_JOB, change.key)
        return list(dict.fromkeys(self.caches.key_of(p) for p in pods))

    def _claim_keys(self, change: Change) -> list[Key]:
        """A ResourceClaim came or changed: the Pods naming it look again (one made from a template
        is what a Pod waits for before its bind), and the Pod one was made for."""
        found = [self.caches.key_of(pod) for pod in self.caches.pods.by_index(BY_CLAIM, change.key)]
        claim = change.new or change.old
        if claim is not None and extended.owner_index(claim):
            for ref in items(at(claim, "metadata", "ownerReferences")):
                owner = self.caches.pods.get(f"{at(claim, 'metadata', 'namespace')}/{obj(ref).get('name')}")
                if owner is not None and at(owner, "metadata", "uid") == obj(ref).get("uid"):
                    found.append(self.caches.key_of(owner))
        return found

    def _claim_template_keys(self, change: Change) -> list[Key]:
        return [
            self.caches.key_of(pod) for pod in self.caches.pods.by_index(BY_CLAIM, f"template:{change.key}")
        ]

    def _job_keys(self, change: JobChange) -> list[Key]:
        WAKEUPS.inc(source="job")
        return [change.pod.key]

    def _keys_on_slurm_node(self, slurm_node: str) -> list[Key]:
        """A slurmd Pod moved (or its Node became known): the Pods of the jobs on that node look
        again, those still in the cache (a deleted one's reconcile has run)."""
        found: list[Key] = []
        for job in self.jobs.on_node(slurm_node):
            ref = placeholder.pod_of(job.job)
            if ref is not None and ref.key not in found and self._placed_under(ref):
                found.append(ref.key)
        return found

    def _placed_under(self, ref: placeholder.PodRef) -> bool:
        """Whether a Pod in the cache is placed under the job's key: the Pod alone it was
        submitted for (that uid), or a member of the group whose job it is."""
        placed = groups.target(ref.key)
        if placed.alone:
            pod = self.caches.pods.get(ref.key)
            return (
                pod is not None and groups.group_key(pod) is None and str(pod["metadata"]["uid"]) == ref.uid
            )
        composite = placed.composite
        gkeys = (
            [groups.key_of_podgroup(child) for child in self.caches.podgroups.by_index(BY_PARENT, composite)]
            if composite is not None
            else [ref.key]
        )
        return any(
            self.caches.placement_key(gkey) == ref.key and self.caches.pods.by_index(BY_GROUP, gkey)
            for gkey in gkeys
        )

    # -- predicates: events no decision would act on (False drops them) ---------------------------

    def _not_own_write_echo(self, change: Change) -> bool:
        """The update only shows what this process wrote and the reconcile that wrote it already
        acted on (it assumed the write): the job id recorded (with its toleration), or the bind.
        The memory forgets the assumption after (Assumed.pod_changed), since no reconcile comes to
        forget it. A third of a Pod's reconciles decided nothing for this reason (issue 40)."""
        old, new = change.old, change.new
        if old is None or new is None:
            return True
        uid = str(new["metadata"]["uid"])
        recorded = self.assumed.recorded.get(uid)
        bound = self.assumed.bound.get(uid)
        if recorded is None and bound is None:
            return True  # nothing of ours awaits its echo (most updates): no views to build
        before, after = _decision_view(old), _decision_view(new)
        if (
            recorded is not None
            and keys.recorded_job_id(new) == recorded != keys.recorded_job_id(old)
            and _without_record(before) == _without_record(after)
        ):
            SKIPPED.inc(why="own write shown")
            return False
        if (
            bound is not None
            and _node_name(new) == bound
            and not _node_name(old)
            and _without_bind(before) == _without_bind(after)
        ):
            SKIPPED.inc(why="own write shown")
            return False
        return True

    def _not_gone_with_its_jobs(self, change: Change) -> bool:
        """Drops a Pod alone deleted once every job it had was stopped (its deletion's reconcile
        sent the cancel): the reconcile its going would bring has nothing left to stop."""
        pod = change.old
        if change.new is not None or pod is None or groups.group_key(pod) is not None:
            return True  # a group's reconcile weighs the members that remain
        uid = str(pod["metadata"]["uid"])
        if self.assumed.submitted.get(uid) is None and self._all_stopped(self.jobs.for_pod(uid)):
            SKIPPED.inc(why="deleted, its jobs stopped")
            return False
        return True

    def _not_after_its_pod_went(self, change: JobChange) -> bool:
        """Drops a change of a Pod alone's job once the Pod is gone or going (deleted, being
        deleted, finished) and every job it had was stopped: with no live member and no job left
        to cancel, its reconcile decides nothing (decide). The job's stop and end that follow a
        deletion's cancel were most of the reconciles deciding nothing in a burst (issue 40)."""
        ref = change.pod
        if not groups.target(ref.key).alone:
            return True  # a group's reconcile weighs the members that remain
        pod = self.caches.pods.get(ref.key)
        if pod is None:
            owner, jobs = ref.uid, self.jobs.for_pod_key(ref.key)
        elif podstate.is_live(pod):
            return True
        else:
            owner = str(pod["metadata"]["uid"])
            jobs = self.jobs.for_pod(owner)
        if self.assumed.submitted.get(owner) is None and self._all_stopped(jobs):
            SKIPPED.inc(why="its Pod gone or going, its jobs stopped")
            return False
        return True

    def _all_stopped(self, jobs: list[JobStatus]) -> bool:
        return all(j.ended or self.assumed.cancelled.get(str(j.job_id)) is not None for j in jobs)


def register(
    watches: SchedulerWatches,
    informers: Informers,
    jobs: JobTracker,
    policy: PolicySource,
    topology: TopologySource,
) -> None:
    """Each source calls its watches back on a change. Before the sources start (Manager.start)."""
    informers.pods.on_change = watches.on_pod
    informers.nodes.on_change = watches.on_node
    informers.bound.on_change = watches.on_bound_pod
    informers.podgroups.on_change = watches.on_podgroup
    informers.composites.on_change = watches.on_composite
    informers.claims.on_change = watches.on_claim
    informers.kube_jobs.on_change = watches.on_kube_job
    informers.claim_templates.on_change = watches.on_claim_template
    jobs.on_change = watches.on_job
    jobs.on_node_moved = watches.on_node_moved
    policy.on_change = watches.on_policy_changed
    topology.on_change = watches.on_topology_changed


def _bind_or_stop(change: JobChange) -> bool:
    """A Pod to bind or to stop goes ahead of pending-reason updates."""
    job = change.job
    return job.started or job.terminating or job.ended


# -- what of a Pod or an object a change changed ---------------------------------------------------


def _node_name(pod: JSON) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _not_running_report(change: Change) -> bool:
    """Drops a bound Pod's kubelet reporting on it (Running, Ready, container states): nothing a
    decision reads changed. Two of the six updates a Pod gets in its life, a fifth of the
    scheduler's reconciles in a burst (issue 22)."""
    old, new = change.old, change.new
    if old is None or new is None:
        return True
    bound = (old.get("spec") or {}).get("nodeName") and (new.get("spec") or {}).get("nodeName")
    return not (bool(bound) and _decision_view(old) == _decision_view(new))


def _room_freed(change: Change) -> bool:
    """A Pod a Node held left it or finished."""
    old, new = change.old, change.new
    return old is not None and (new is None or (pod_finished(new) and not pod_finished(old)))


def _not_heartbeat(change: Change) -> bool:
    """Drops a Node's update that changed nothing but its resourceVersion: a heartbeat."""
    return _content(change.old) != _content(change.new)


def _decision_view(pod: JSON) -> JSON:
    """What of a Pod any decision reads: all but its resourceVersion and the kubelet's reports."""
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    return {
        "metadata": {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")},
        "spec": pod.get("spec"),
        "finished": pod_finished(pod),
        "conditions": [c for c in status.get("conditions") or [] if c.get("type") in _DECISION_CONDITIONS],
        "nominated": status.get("nominatedNodeName"),
    }


def _without_record(view: JSON) -> JSON:
    """A decision view without what recording a job writes: the job id, the lock toleration."""
    meta = view["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != keys.JOB_ID_ANNOTATION}
    spec = {k: v for k, v in (view.get("spec") or {}).items() if k != "tolerations"}
    tolerations = [
        t for t in (view.get("spec") or {}).get("tolerations") or [] if t.get("key") != keys.LOCK_KEY
    ]
    return {
        **view,
        "metadata": {**meta, "annotations": annotations},
        "spec": {**spec, "tolerations": tolerations},
    }


def _without_bind(view: JSON) -> JSON:
    """A decision view without what a bind writes: the node, and PodScheduled turned True."""
    spec = {k: v for k, v in (view.get("spec") or {}).items() if k != "nodeName"}
    conditions = [c for c in view["conditions"] if c.get("type") != "PodScheduled"]
    return {**view, "spec": spec, "conditions": conditions}


# The Pod conditions decisions read: this scheduler's refusals, and kube-scheduler's preemption.
_DECISION_CONDITIONS = ("PodScheduled", keys.DISRUPTION_TARGET)


def _content(obj: JSON | None) -> JSON | None:
    """An object without its resourceVersion: what a change changed."""
    if obj is None:
        return None
    return {
        **obj,
        "metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"},
    }
