"""The scheduler's reconciler: observe one placement key (a Pod alone, or a group), `decide`
(tandem.scheduler.decide), carry the one action out through its writers. What queues a key is
tandem.scheduler.watches; requeues and backoff belong to the runner (tandem.runner): this module
only says "look again in N seconds" or raises."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from tandem import keys, placeholder, tracing
from tandem.assume import version_of
from tandem.dra import extended
from tandem.dra.claims import PodGpus
from tandem.dra.shape import at
from tandem.dra.slices import NodeDevices
from tandem.events import EventRecorder
from tandem.kube import JSON, KubeClient, KubeError, object_key, parse_rfc3339, pod_finished
from tandem.metrics import REGISTRY
from tandem.runner import NotYet, Requeue
from tandem.scheduler import decide as d
from tandem.scheduler import eligibility, groups, jobspec, podmemo
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.caches import BY_GROUP, BY_PARENT, Caches
from tandem.scheduler.claimwrites import ClaimApi
from tandem.scheduler.gpuclaims import ClaimWrite
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.killwait_source import FROM_DEFAULT, KillWait
from tandem.scheduler.podapi import PodApi, condition
from tandem.scheduler.policy import BUILTIN, Policy
from tandem.scheduler.validation import Problem, Validation
from tandem.slurm.dialects import UnsupportedBySlurm
from tandem.slurm.hostlist import expand
from tandem.slurm.models import JobSpec, JobStatus
from tandem.slurm.rest import SlurmApiError, waits_for_topology
from tandem.slurm.wire import job_to_proto
from tandem.topology import Topology
from tandem.v1 import scheduler_pb2

log = logging.getLogger(__name__)

PODS_VALIDATED = REGISTRY.counter(
    "tandem_pods_validated_total",
    "Pods checked before a job is made, by result and failing field (once per Pod)",
    ["result", "reason"],
)
JOBS_SUBMITTED = REGISTRY.counter("tandem_jobs_submitted_total", "placeholder job submissions", ["result"])
SUBMIT_SECONDS = REGISTRY.histogram("tandem_submit_seconds", "time to submit a placeholder job")
BIND_SECONDS = REGISTRY.histogram("tandem_bind_seconds", "time from the job's script start to the Pod bound")
CREATE_TO_BOUND_SECONDS = REGISTRY.histogram(
    "tandem_pod_create_to_bound_seconds",
    "time from Pod creation to binding",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
)

DECISIONS = REGISTRY.counter(
    "tandem_scheduler_decisions_total",
    "what reconciles decided, by action (Nothing: a wake-up that found nothing to do)",
    ["action"],
)

RECONCILES_TO_BIND = REGISTRY.histogram(
    "tandem_scheduler_reconciles_to_bind",
    "reconciles of a Pod's key (a group's, for a gang) from its first to its bind: how often it woke",
    buckets=(1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100),
)
# Keys whose reconciles are counted until their bind: the oldest are let go past this many.
COUNTED_KEYS = 20_000

# slurmrestd unreachable or overloaded: worth another try. Anything else is Slurm's answer.
TRANSIENT_HTTP = (0, 502, 503, 504)


class JobSubmitter(Protocol):
    """What the scheduler asks of Slurm (tandem.slurm.rest.SlurmRestClient is one)."""

    def submit_job(self, spec: JobSpec) -> int: ...

    def cancel_job(self, job_id: int, signal: str | None = None) -> None: ...

    def set_excluded_nodes(self, job_id: int, hostlist: str) -> None: ...


def _asks_gpus(pod: JSON) -> bool:
    try:
        return podmemo.requests(pod).get(keys.GPU_RESOURCE, 0) > 0
    except ValueError:
        return False


@dataclass(frozen=True)
class Writers:
    """What a reconcile acts through: Slurm, the Pod and ResourceClaim writes, the Events."""

    slurm: JobSubmitter
    pods: PodApi
    claims: ClaimApi
    events: EventRecorder

    @classmethod
    def of(cls, kube: KubeClient, slurm: JobSubmitter, events: EventRecorder) -> Writers:
        return cls(slurm, PodApi(kube), ClaimApi(kube), events)


def _no_topology() -> Topology | str:
    return "the scheduler reads no topology (--topology-configmap)"


@dataclass
class ControllerSettings:
    """What every decision reads besides the caches and Slurm's jobs."""

    placeholder: jobspec.PlaceholderConfig
    # Slurm's KillWait now (tandem.scheduler.killwait_source: cached, read again now and then);
    # None until it is first known. killwait_source.fixed: as --slurm-kill-wait gives it.
    kill_wait: Callable[[], KillWait | None]
    policy: Callable[[], Policy] = lambda: BUILTIN
    # Slurm's topology as tandem-syncer publishes it, or why there is none.
    topology: Callable[[], Topology | str] = _no_topology
    reject_static_cpu: bool = False


class Controller:
    def __init__(
        self,
        caches: Caches,
        jobs: JobTracker,
        writers: Writers,
        settings: ControllerSettings,
        assumed: Assumed | None = None,
    ) -> None:
        self.caches = caches
        self.jobs = jobs
        self.writers = writers
        self.settings = settings
        # What this process wrote that its caches do not show yet (shared with the watches, which
        # forget the echoes no reconcile comes for).
        self.assumed = assumed if assumed is not None else Assumed()
        self._background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="events")
        # Key -> reconciles so far, until its bind (RECONCILES_TO_BIND).
        self._reconciles: OrderedDict[str, int] = OrderedDict()
        self._counting = threading.Lock()
        REGISTRY.gauge(
            "tandem_pods",
            "this scheduler's unfinished Pods: pending (not bound yet), bound, refused",
            ["state"],
            collect=self._count_pods,
        )

    def _count_pods(self) -> dict[tuple[str, ...], float]:
        counts: dict[tuple[str, ...], float] = dict.fromkeys((("pending",), ("bound",), ("refused",)), 0.0)
        for pod in self.caches.pods.items():
            if pod_finished(pod):
                continue
            state = (
                "bound"
                if (pod.get("spec") or {}).get("nodeName")
                else "refused"
                if d.refused(pod)
                else "pending"
            )
            counts[(state,)] += 1
        return counts

    def reconcile(self, key: str) -> Requeue:
        if not groups.is_group_key(key):
            pod = self.caches.pods.get(key)
            if pod is not None and gated(pod):
                return None  # not schedulable yet; the gates' removal is a change that comes back
            if pod is not None and self._in_gang(pod):
                return None  # its group's reconcile places it
        elif self.caches.placement_key(key) != key:
            return None  # a child PodGroup: its CompositePodGroup's reconcile places it
        kill_wait = self.settings.kill_wait()
        if kill_wait is None:
            # Not read from Slurm yet (slurmrestd unreachable so far: the source logs why). A Pod
            # refused for a guessed KillWait would stay refused, so nothing is decided until then.
            raise NotYet("Slurm's KillWait is not known yet")
        self._forget_what_the_caches_show(key)
        self._count_reconcile(key)
        observed, action = self.decision(key, kill_wait)
        DECISIONS.inc(action=type(action).__name__)
        return self._act(observed, action)

    def _count_reconcile(self, key: str) -> None:
        with self._counting:
            self._reconciles[key] = self._reconciles.pop(key, 0) + 1
            while len(self._reconciles) > COUNTED_KEYS:
                self._reconciles.popitem(last=False)

    def _bound_after(self, key: str) -> None:
        """The key's members are all bound: how many reconciles it took."""
        with self._counting:
            count = self._reconciles.pop(key, None)
        if count is not None:
            RECONCILES_TO_BIND.observe(count)

    def decision(self, key: str, kill_wait: KillWait | None = None) -> tuple[d.Observed, d.Action]:
        """What to do for a key: decided on a snapshot, judged against every Node only when the
        decision needs which Nodes would take the members."""
        observed = self.observe(key, kill_wait)
        action = d.decide(observed)
        if isinstance(action, d.Judge):
            observed = dataclasses.replace(observed, fits=self._fits(observed.members, observed.job))
            action = d.decide(observed)
        return observed, action

    def _forget_what_the_caches_show(self, key: str) -> None:
        """What this process wrote that the caches show now: a job id a cached member carries (a
        write the API answered without a resourceVersion is seen only so), a submit or the excluded
        nodes the stream shows. Done by a reconcile only: observing (which the read-only
        placement() does too) forgets nothing."""
        members, _, jobs = self._members_and_jobs(key)
        carried = set()
        for pod in members:
            if (pod.get("spec") or {}).get("nodeName"):
                self.assumed.bound.forget(str(pod["metadata"]["uid"]))
            if self.caches.dra is not None and self.caches.dra.extended_claim(pod) is not None:
                self.assumed.made_claims.forget(str(pod["metadata"]["uid"]))  # the informer shows it
            uid, annotated = str(pod["metadata"]["uid"]), d.recorded_job_id(pod)
            if annotated is None:
                continue
            carried.add(annotated)
            if self.assumed.recorded.get(uid, _version(pod)) == annotated:
                self.assumed.recorded.forget(uid)
        owner = self._owner(key, members)
        submitted = self.assumed.submitted.get(owner)
        if submitted is not None and (submitted in carried or any(j.job_id == submitted for j in jobs)):
            self.assumed.submitted.forget(owner)
        for job in jobs:
            excluded = frozenset(job.job.excluded_nodes)
            if excluded and self.assumed.excludes.get(str(job.job_id)) == excluded:
                self.assumed.excludes.forget(str(job.job_id))

    def _in_gang(self, pod: JSON) -> bool:
        gkey = groups.group_key(pod)
        if gkey is None:
            return False
        if self.caches.placement_key(gkey) != gkey:
            return True  # a child of a gang CompositePodGroup
        return (
            groups.resolve(gkey, self.caches.pods.by_index(BY_GROUP, gkey), self.caches.podgroups.get)
            is not None
        )

    # -- observing -----------------------------------------------------------------------------

    def _members_and_jobs(self, key: str) -> tuple[tuple[JSON, ...], groups.Group | None, list[JobStatus]]:
        """The Pods a key places, what they are (a group, or a Pod alone) and every job it has."""
        composite = groups.composite_key(key)
        if composite is not None:
            children = self.caches.podgroups.by_index(BY_PARENT, composite)
            members = tuple(
                pod
                for child in children
                for pod in self.caches.pods.by_index(BY_GROUP, groups.key_of_podgroup(child))
                if not gated(pod)
            )
            group = groups.resolve_composite(key, self.caches.composites.get(composite), children, members)
            return members, group, self.jobs.for_pod_key(key)
        if groups.is_group_key(key):
            members = tuple(p for p in self.caches.pods.by_index(BY_GROUP, key) if not gated(p))
            return (
                members,
                groups.resolve(key, members, self.caches.podgroups.get),
                self.jobs.for_pod_key(key),
            )
        pod = self.caches.pods.get(key)
        if pod is None:
            return (), groups.alone(key, None), self.jobs.for_pod_key(key)  # deleted: by its name
        return (pod,), groups.alone(key, pod), self.jobs.for_pod(str(pod["metadata"]["uid"]))

    def _as_bound(self, pod: JSON) -> JSON:
        """The Pod as this process bound it, while the informer's copy does not show that yet."""
        if (pod.get("spec") or {}).get("nodeName"):
            return pod
        node = self.assumed.bound.get(str(pod["metadata"]["uid"]))
        return pod if node is None else {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}

    @staticmethod
    def _owner(key: str, members: tuple[JSON, ...]) -> str:
        """Whose submit is remembered: a group's key, a Pod alone's uid (a Pod of the same name
        made again is another Pod)."""
        if groups.is_group_key(key) or not members:
            return key
        return str(members[0]["metadata"]["uid"])

    def observe(self, key: str, kill_wait: KillWait | None = None) -> d.Observed:
        """A snapshot of plain values: everything decide reads but the fits (decide asks for
        them: Judge). `kill_wait`: the one a reconcile read; else the current one, or (only shown,
        by the read-only placement()) Slurm's default while none is known."""
        kill_wait = kill_wait or self.settings.kill_wait() or _UNKNOWN_KILL_WAIT
        members, group, jobs = self._members_and_jobs(key)
        members = tuple(self._as_bound(pod) for pod in members)
        recorded: dict[str, int] = {}
        for pod in members:
            uid = str(pod["metadata"]["uid"])
            written = self.assumed.recorded.get(uid, _version(pod))
            carried = written if written is not None else d.recorded_job_id(pod)
            if carried is not None:
                recorded[uid] = carried
        submitted = self.assumed.submitted.get(self._owner(key, members))
        if submitted is not None and any(j.job_id == submitted for j in jobs):
            submitted = None  # the stream shows it now
        wanted = set(recorded.values()) or ({submitted} if submitted is not None else set())
        job = _job_of(jobs, wanted)
        duplicates: tuple[int, ...] = ()
        if job is not None and job.job_id in recorded.values():
            duplicates = tuple(j.job_id for j in jobs if not j.ended and j is not job)
        hosts = self._hosts(job)
        gpus: dict[str, PodGpus] = {}
        claims: dict[str, JSON] = {}
        devices: dict[str, NodeDevices | str] = {}
        class_config: dict[str, tuple[JSON, ...]] = {}
        extended_class = ""
        dra_served: frozenset[str] = frozenset()
        extended_claims: dict[str, JSON] = {}
        if self.caches.dra is not None:
            for pod in members:
                found = self.caches.dra.pod_gpus(pod)
                if found is not None:
                    gpus[str(pod["metadata"]["uid"])] = found
            if job is not None and job.job.nodes and any(_asks_gpus(m) for m in members):
                extended_class = self.caches.dra.extended_class()
                if extended_class:
                    dra_served = frozenset(h for h in hosts.values() if self._serves_gpus_by_dra(h))
                    for pod in members:
                        uid = str(pod["metadata"]["uid"])
                        made = self.caches.dra.extended_claim(pod) or self.assumed.made_claims.get(uid)
                        if made is not None:
                            extended_claims[uid] = made
            if job is not None and job.job.nodes and (any(g.requests for g in gpus.values()) or dra_served):
                # What the bind writes the claims' allocations from.
                claims = self.caches.dra.claims_of(members)
                devices = self.caches.dra.devices(hosts.values())
                class_config = self.caches.dra.class_config()
        return d.Observed(
            key,
            group,
            members,
            job=job,
            jobs=tuple(jobs),
            recorded=recorded,
            submitted_job_id=submitted,
            duplicates=duplicates,
            cancel_sent=self._cancels_sent([*(j.job_id for j in jobs), *([submitted] if submitted else [])]),
            hosts=hosts,
            node_labels=self._node_labels(hosts.values()),
            slurm_nodes=self.jobs.slurm_node_count(),
            fits=d.NOT_JUDGED,
            job_excludes=self._job_excludes(job),
            kill_wait=kill_wait.seconds,
            kill_wait_source=kill_wait.source,
            reject_static_cpu=self.settings.reject_static_cpu,
            policy=self.settings.policy(),
            job_phase_age=self.jobs.in_phase_for(job.job_id) if job is not None else float("inf"),
            gpus=gpus,
            claims=claims,
            devices=devices,
            class_config=class_config,
            extended_class=extended_class,
            dra_served=dra_served,
            extended_claims=extended_claims,
            topology=self.settings.topology(),
        )

    def _node_labels(self, kube_nodes: Iterable[str]) -> dict[str, Mapping[str, str]]:
        """The labels of the job's Nodes the Node informer holds (none when no Node is watched)."""
        cluster = self.caches.cluster
        if cluster is None:
            return {}
        found = {n: cluster.nodes.get(n) for n in kube_nodes}
        return {n: at(node, "metadata", "labels") or {} for n, node in found.items() if node is not None}

    def _serves_gpus_by_dra(self, kube_node: str) -> bool:
        node = self.caches.cluster.nodes.get(kube_node) if self.caches.cluster is not None else None
        allocatable = at(node, "status", "allocatable") or {}
        return (
            node is not None
            and self.caches.dra is not None
            and extended.served_by_dra(allocatable)
            and self.caches.dra.has_devices(kube_node)
        )

    def _cancels_sent(self, job_ids: Iterable[int]) -> frozenset[int]:
        return frozenset(j for j in job_ids if self.assumed.cancelled.get(str(j)) is not None)

    def _hosts(self, job: JobStatus | None) -> dict[str, str]:
        """Slurm node -> the Node hosting it, for the job's nodes the syncer has published."""
        nodes = job.job.nodes if job is not None else ()
        return {s: host for s in nodes if (host := self.jobs.kube_node(s)) is not None}

    def _fits(
        self, members: tuple[JSON, ...], job: JobStatus | None
    ) -> dict[str, eligibility.Eligibility] | None:
        """Member uid -> which Slurm nodes' Nodes would take it now, for the members that may still
        need it (not bound, no job running); None when no Node is watched."""
        cluster = self.caches.cluster
        if cluster is None:
            return None
        fits: dict[str, eligibility.Eligibility] = {}
        hosts: Mapping[str, str] | None = None
        nodes: Mapping[str, JSON] = {}
        for pod in members:
            if not _may_need_a_fit(pod, job):
                continue
            try:
                requests = podmemo.requests(pod)
            except ValueError:
                continue  # validation reports it
            if hosts is None:
                hosts, nodes = self.jobs.kube_nodes(), cluster.nodes.snapshot()
            fit = eligibility.judge(
                pod,
                requests,
                hosts,
                nodes,
                cluster.rooms.room,
                self._dra_gpus() if requests.get(keys.GPU_RESOURCE, 0) > 0 else None,
            )
            fits[str(pod["metadata"]["uid"])] = self._with_whole_gpu_types(pod, fit, hosts)
        return fits

    def _with_whole_gpu_types(
        self, pod: JSON, fit: eligibility.Eligibility, hosts: Mapping[str, str]
    ) -> eligibility.Eligibility:
        """The fit, with the whole-GPU types of the Nodes it leaves when the Pod's claims ask whole
        GPUs of no product (the job must name one: decide picks it)."""
        gpus = self.caches.dra.pod_gpus(pod) if self.caches.dra is not None else None
        if self.caches.dra is None or gpus is None or not gpus.needs_whole_type:
            return fit
        excluded = set(fit.excluded)
        candidates = {h for s, h in hosts.items() if h and s not in excluded}
        types = frozenset(t for h in candidates for t in self.caches.dra.whole_gpu_types(h))
        return dataclasses.replace(fit, whole_gpu_types=types)

    def _dra_gpus(self) -> eligibility.DraGpus | None:
        if self.caches.dra is None:
            return None
        return eligibility.DraGpus(self.caches.dra.extended_class(), self.caches.dra.has_devices)

    def _job_excludes(self, job: JobStatus | None) -> frozenset[str] | None:
        if job is None or job.job.excluded_nodes:
            return None  # Slurm says
        return self.assumed.excludes.get(str(job.job_id))

    def _remember_excludes(self, job_id: int, hostlist: str) -> None:
        self.assumed.excludes.assume(str(job_id), frozenset(expand(hostlist) if hostlist else ()))

    # -- acting --------------------------------------------------------------------------------

    def _act(self, o: d.Observed, action: d.Action) -> Requeue:
        match action:
            case d.Nothing():
                return None
            case d.Wait(why=why):
                raise NotYet(why)
            case d.Later(after=after):
                return after
            case d.Cancel(job_ids=job_ids, why=why, pods=pods, event_reason=reason, message=message):
                self._cancel(o.key, job_ids, why)
                for target in (*pods, *((action.subject,) if action.subject is not None else ())):
                    self._event(target, "Normal", reason, message)
                return None
        group = o.group
        assert group is not None  # every other action is about Pods that are there
        match action:
            case d.Reject(pods=pods, message=message, problems=problems):
                self._reject(group, pods, message, problems)
            case d.Warn(pods=pods, reason=reason, message=message):
                for pod in pods:
                    self._event(pod, "Warning", reason, message)
            case d.Refuse(pods=pods, reason=reason, message=message):
                self._refuse(group, pods, reason, message)
            case d.Submit(
                members=members,
                validations=validations,
                excluded=excluded,
                components=components,
                domains=domains,
            ):
                self._submit(group, members, validations, excluded, o.kill_wait, components, domains)
            case d.Record(pods=pods, job_id=job_id):
                for pod in pods:
                    self._record(pod, job_id)
            case d.Pend(pods=pods, reason=reason, message=message, event=event):
                self._pend(group, pods, reason, message, event)
            case d.Nominate(placements=placements):
                for placement in placements:
                    self.writers.pods.nominate(placement.pod, placement.kube_node)
            case d.Exclude(job_id=job_id, hostlist=hostlist, component_ids=component_ids):
                # A het job's components each keep their own list (Slurm sets the one asked).
                for each in component_ids or (job_id,):
                    self.writers.slurm.set_excluded_nodes(each, hostlist)
                self._remember_excludes(job_id, hostlist)
                log.info("excluded nodes updated", extra={"pod": o.key, "job": job_id, "excluded": hostlist})
            case d.MakeClaims(new=new, stale=stale):
                for claim, why in stale:
                    self.writers.claims.drop(claim, why)
                if not stale:
                    for pod, manifest in new:
                        made = self.writers.claims.make(pod, manifest)
                        self.assumed.made_claims.assume(str(pod["metadata"]["uid"]), made)
            case d.Bind(job=job, placements=placements, claims=claim_writes, pod_statuses=pod_statuses):
                for placement in placements:
                    uid = str(placement.pod["metadata"]["uid"])
                    writes = claim_writes.get(uid, ())
                    self.writers.claims.allocate(placement.pod, writes)
                    if uid in pod_statuses:
                        self.writers.pods.extended_claim_status(placement.pod, pod_statuses[uid])
                    self._bind(placement.pod, job, placement.slurm_node, placement.kube_node, writes)
                bound = {str(p.pod["metadata"]["uid"]) for p in placements}
                unbound = [
                    m
                    for m in o.members
                    if str(m["metadata"]["uid"]) not in bound and not (m.get("spec") or {}).get("nodeName")
                ]
                if not unbound:
                    self._bound_after(o.key)
                    where = f", {action.landed}" if action.landed else ""
                    self._group_status(
                        group,
                        True,
                        "Scheduled",
                        f"all members bound to the nodes of Slurm job {job.job_id}{where}",
                        # Only where a person asked for a domain: the Event says which one.
                        ("Normal", "Scheduled") if action.landed else None,
                    )
            case d.Delete(pods=pods, event_type=type_, event_reason=reason, message=message):
                for pod in pods:
                    self._event(pod, type_, reason, message)
                    self.writers.pods.delete(pod)
        return None

    def _reject(
        self, group: groups.Group, pods: tuple[JSON, ...], message: str, problems: tuple[Problem, ...]
    ) -> None:
        for pod in pods:
            self.writers.pods.set_unscheduled(pod, d.REASON_INVALID, message)
            self._event(pod, "Warning", "FailedValidation", message)
            log.info("pod rejected", extra={"pod": object_key(pod), "reason": message})
        for problem in problems:
            PODS_VALIDATED.inc(result="invalid", reason=problem.reason)
        self._group_status(group, False, "Unschedulable", message, event=("Warning", "FailedValidation"))

    def _pend(
        self, group: groups.Group, pods: tuple[JSON, ...], reason: str, message: str, event: str
    ) -> None:
        for pod in pods:
            if self.writers.pods.set_unscheduled(pod, reason, message) and event:
                self._event(pod, "Warning", event, message)
        self._group_status(group, False, "Unschedulable", message)

    def _refuse(self, group: groups.Group, pods: tuple[JSON, ...], reason: str, message: str) -> None:
        """Slurm said no (or never could): like a validation error, it is not retried."""
        for pod in pods:
            self.writers.pods.set_unscheduled(pod, reason, message)
        self._group_event(group, pods, "Warning", "FailedScheduling", message)
        self._group_status(group, False, "Unschedulable", message)

    def _submit(
        self,
        group: groups.Group,
        members: tuple[JSON, ...],
        validations: tuple[Validation, ...],
        excluded: tuple[str, ...] = (),
        kill_wait: float | None = None,
        components: tuple[int, ...] = (),
        domains: tuple[str, ...] = (),
    ) -> None:
        """`kill_wait`: the KillWait the members were validated against, which the placeholder
        script is told (TANDEM_KILL_WAIT) so it leaves before Slurm's SIGKILL. `components`: a
        heterogeneous job's, as how many of the members (in order) each holds."""
        what = "the placeholder job" if group.alone else "the group's job"
        cfg = self.settings.placeholder
        if kill_wait is not None:
            cfg = dataclasses.replace(
                cfg, environment={**cfg.environment, "TANDEM_KILL_WAIT": str(int(kill_wait))}
            )
        attributes = (
            {"k8s.pod": group.key} if group.alone else {"k8s.group": group.key, "members": len(members)}
        )
        with tracing.span(
            "submit placeholder job" if group.alone else "submit group job", attributes=attributes
        ) as span:
            for pod, result in zip(members, validations, strict=True):
                self._warn_before_submit(pod, result)
            spec = jobspec.build_group_job_spec(
                group.ref,
                members,
                cfg,
                [v.requests for v in validations],
                excluded,
                validations[0].job_annotations,  # the members agree (validation.disagreements)
                components,
                [v.gpu_type for v in validations],
                domains,
            )
            spec = jobspec.with_trace_context(spec, tracing.current_traceparent())
            submit_started = time.monotonic()
            try:
                # Root submits on the Pod user's behalf (as SUNK does over RPC): uid, gid and
                # priority all apply.
                job_id = self.writers.slurm.submit_job(spec)
            except SlurmApiError as e:
                if e.status in TRANSIENT_HTTP:
                    JOBS_SUBMITTED.inc(result="error")
                    self._pend(
                        group,
                        members,
                        d.REASON_SLURM_UNAVAILABLE,
                        f"cannot submit {what}, retrying: {e.summary}",
                        d.REASON_SLURM_UNAVAILABLE,
                    )
                    raise  # the runner retries with backoff
                if waits_for_topology(e):
                    # Not the Pod's fault: Slurm's topology does not join its nodes now (being
                    # rewritten, say). Refused for good, it would stay Pending with no job for ever.
                    JOBS_SUBMITTED.inc(result="error")
                    self._pend(
                        group,
                        members,
                        d.REASON_UNSCHEDULABLE,
                        f"Slurm cannot place {what} on its topology as it is now, retrying: {e.summary}",
                        "FailedScheduling",
                    )
                    raise NotYet(f"Slurm's topology does not join {what}'s nodes yet") from e
                JOBS_SUBMITTED.inc(result="refused")
                refused = "the placeholder job" if group.alone else f"the job of {group.title}"
                self._refuse(group, members, d.REASON_SUBMIT_FAILED, f"Slurm refused {refused}: {e}")
                return
            except UnsupportedBySlurm as e:
                JOBS_SUBMITTED.inc(result="refused")
                who = "this Pod" if group.alone else group.title
                self._refuse(group, members, d.REASON_SUBMIT_FAILED, f"Slurm cannot run {who}: {e}")
                return
            JOBS_SUBMITTED.inc(result="ok")
            for _ in members:
                PODS_VALIDATED.inc(result="valid", reason="")
            span.set_attribute("slurm.job_id", job_id)
            SUBMIT_SECONDS.observe(time.monotonic() - submit_started)
            self.assumed.submitted.assume(self._owner(group.key, members), job_id)
            self._remember_excludes(job_id, spec.excluded_nodes)
            self.jobs.announce(job_id, spec.name)
            log.info(
                "placeholder job submitted",
                extra={
                    "pod": group.key,
                    "job": job_id,
                    "nodes": len(members),
                    "uid": spec.user_id,
                    "gid": spec.group_id,
                },
            )
            for pod in members:
                self._record(pod, job_id)
            where = f" to partition {spec.partition}" if spec.partition else ""
            if group.alone:
                # No Event: a Pod alone reads its job in its PodScheduled condition while the job
                # pends and in its Scheduled Event once bound, as kube-scheduler's Pods do; one
                # Event more was a quarter of the API requests Tandem made per Pod (issue 22).
                return
            if spec.components:
                parts = ", ".join(
                    f"{c.nodes} for {g.name}" for c, g in zip(spec.components, group.components, strict=False)
                )
                message = (
                    f"heterogeneous job {job_id} for {group.title} ({len(members)} nodes, one per member: "
                    f"{parts}; each sized for its own members) submitted{where}"
                )
            else:
                message = (
                    f"job {job_id} for {group.title} ({spec.nodes} nodes, one per member) submitted{where}"
                )
            self._group_event(group, members, "Normal", "SlurmJobSubmitted", message)

    def _group_event(
        self, group: groups.Group, members: tuple[JSON, ...], type_: str, reason: str, message: str
    ) -> None:
        """On the PodGroup when there is one, else on the group's first member (the LWS leader, or
        the Pod alone)."""
        self._event(group.podgroup if group.podgroup is not None else members[0], type_, reason, message)

    def _group_status(
        self,
        group: groups.Group,
        scheduled: bool,
        reason: str,
        message: str,
        event: tuple[str, str] | None = None,
    ) -> None:
        if group.podgroup is None:
            return
        try:
            written = self.writers.pods.set_group_scheduled(group.podgroup, scheduled, reason, message)
        except KubeError as e:
            if e.not_found:
                return
            raise
        if written and event is not None:
            self._event(group.podgroup, event[0], event[1], message)

    def _warn_before_submit(self, pod: JSON, result: Validation) -> None:
        """What validation let through but the Pod's owner should hear."""
        for warning in result.warnings:
            self._event(pod, "Warning", "UnknownAnnotation", warning)
        if result.static_cpu:
            self._event(pod, "Warning", "StaticCPU", result.static_cpu)

    def _record(self, pod: JSON, job_id: int) -> None:
        answer = self.writers.pods.record_job(pod, job_id)
        self.assumed.recorded.assume(str(pod["metadata"]["uid"]), job_id, version_of(answer))

    def _bind(
        self, pod: JSON, job: JobStatus, slurm_node: str, kube_node: str, writes: tuple[ClaimWrite, ...] = ()
    ) -> None:
        job_id = job.job_id
        picked_up = time.monotonic()
        with tracing.span(
            "bind pod",
            parent=self.jobs.trace_context.get(job_id),
            attributes={"k8s.pod": object_key(pod), "k8s.node": kube_node, "slurm.job_id": job_id},
        ):
            self.writers.pods.bind(pod, kube_node)
        self.assumed.bound.assume(str(pod["metadata"]["uid"]), kube_node)
        started = self.jobs.started_at.get(job_id, picked_up)
        BIND_SECONDS.observe(time.monotonic() - started)
        created = _created_at(pod)
        if created is not None:
            CREATE_TO_BOUND_SECONDS.observe(max(0.0, time.time() - created))
        log.info(
            "pod bound",
            extra={
                "pod": object_key(pod),
                "job": job_id,
                "node": slurm_node,
                "kube_node": kube_node,
                "queued_ms": round((picked_up - started) * 1000, 1),
                "bind_ms": round((time.monotonic() - picked_up) * 1000, 1),
            },
        )
        devices = [f"{w.name}: {', '.join(w.devices)}" for w in writes]
        claimed = f"; claims allocated the GPUs Slurm chose ({'; '.join(devices)})" if devices else ""
        self._event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {object_key(pod)} to {kube_node}"
            f" (Slurm job {job_id} on {slurm_node}{claimed})",
        )

    def _cancel(self, key: str, job_ids: tuple[int, ...], why: str) -> None:
        for job_id in job_ids:
            log.info("cancelling job", extra={"pod": key, "job": job_id, "why": why})
            self.writers.slurm.cancel_job(job_id)
            self.assumed.cancelled.assume(str(job_id), True)
        if groups.is_group_key(key):
            self.assumed.submitted.forget(key)
        elif why == "Pod deleted":
            for job in self.jobs.for_pod_key(key):
                ref = placeholder.pod_of(job.job)
                if ref is not None:
                    self.assumed.submitted.forget(ref.uid)  # deleted before its annotation was seen
                    self.assumed.recorded.forget(ref.uid)

    def _event(self, pod: JSON, type_: str, reason: str, message: str) -> None:
        self._background.submit(self.writers.events.record, pod, type_, reason, message)

    # -- placements (gRPC) ---------------------------------------------------------------------

    def placement(self, pod: JSON) -> scheduler_pb2.Placement:
        """Where the Pod stands, from the same observation and decision a reconcile acts on."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        gkey = groups.group_key(pod)
        # A member of a gang stands where its group does.
        observed, action = self.decision(
            self.caches.key_of(pod) if gkey is not None and self._in_gang(pod) else object_key(pod)
        )
        job = observed.job
        cond = condition(pod, "PodScheduled") or {}
        return scheduler_pb2.Placement(
            pod_namespace=meta["namespace"],
            pod_name=meta["name"],
            pod_uid=meta["uid"],
            job_id=job.job_id if job is not None else (observed.recorded.get(str(meta["uid"])) or 0),
            job_state=job_to_proto(job).state if job is not None else "JOB_STATE_UNSPECIFIED",
            slurm_node=job.job.nodes[0] if job is not None and job.job.nodes else "",
            kube_node=spec.get("nodeName", ""),
            state=f"PLACEMENT_STATE_{d.placement_state(observed, action, pod)}",
            reason=str(cond.get("message", "")) if cond.get("status") == "False" else "",
        )


# What placement() shows while Slurm's KillWait is not known yet (a reconcile waits instead).
_UNKNOWN_KILL_WAIT = KillWait(30.0, f"{FROM_DEFAULT} (not read from Slurm yet)")


def _version(obj: JSON) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def gated(pod: JSON) -> bool:
    """The Pod still has scheduling gates (Kueue's admission gate on a Pod group's members, for
    one): like kube-scheduler, Tandem neither places it nor counts it as a member until they are
    gone. Gates are only ever removed, so a gated Pod has no job to mind."""
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def _may_need_a_fit(pod: JSON, job: JobStatus | None) -> bool:
    """Whether deciding may ask which Nodes would take the Pod: only before its job runs."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if spec.get("nodeName") or meta.get("deletionTimestamp") or pod_finished(pod) or d.refused(pod):
        return False
    return job is None or job.ended or job.pending


def _job_of(candidates: list[JobStatus], recorded: set[int]) -> JobStatus | None:
    """The job of a Pod or group: the live one its members recorded, else any live one, else one
    they recorded, else the newest."""
    live = [j for j in candidates if not j.ended]
    for j in live:
        if j.job_id in recorded:
            return j
    if live:
        return live[-1]
    for j in candidates:
        if j.job_id in recorded:
            return j
    return candidates[-1] if candidates else None


def _created_at(pod: JSON) -> float | None:
    created = parse_rfc3339(pod["metadata"].get("creationTimestamp"))
    return created.timestamp() if created is not None else None
