"""Observing one placement key: the members a key places (a Pod alone, a gang, a composite), its
Slurm jobs and everything `decide` reads, as a snapshot of plain values (tandem.scheduler.decide.
Observed), with this process's writes its caches do not show yet (tandem.scheduler.assumed). No
API call and no write: the placement view (tandem.scheduler.placements) observes too."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from tandem import keys, placeholder
from tandem.dra import extended
from tandem.dra.claims import PodGpus
from tandem.dra.shape import at
from tandem.dra.slices import NodeDevices
from tandem.kube import JSON, pod_finished
from tandem.scheduler import actions, eligibility, groups, podmemo, podstate, workloads
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.caches import BY_GROUP, BY_PARENT, Caches
from tandem.scheduler.controller_settings import ControllerSettings
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.killwait_source import FROM_DEFAULT, KillWait
from tandem.slurm.models import JobStatus

# What observe() shows while Slurm's KillWait is not known yet (a reconcile waits instead).
UNKNOWN_KILL_WAIT = KillWait(30.0, f"{FROM_DEFAULT} (not read from Slurm yet)")


class Observer:
    def __init__(
        self, caches: Caches, jobs: JobTracker, assumed: Assumed, settings: ControllerSettings
    ) -> None:
        self.caches = caches
        self.jobs = jobs
        self.assumed = assumed
        self.settings = settings
        # Each Pod's requests and validation, once per version (this observer's own).
        self.memo = podmemo.PodMemo()

    def in_gang(self, pod: JSON) -> bool:
        gkey = groups.group_key(pod)
        if gkey is None:
            return False
        if self.caches.placement_key(gkey) != gkey:
            return True  # a child of a gang CompositePodGroup
        return (
            groups.resolve(
                groups.target(gkey), self.caches.pods.by_index(BY_GROUP, gkey), self.caches.podgroups.get
            )
            is not None
        )

    def members_and_jobs(
        self, placed: groups.Target
    ) -> tuple[tuple[JSON, ...], groups.Group | None, list[JobStatus]]:
        """The Pods a key places, what they are (a group, or a Pod alone) and every job it has."""
        key, composite = placed.key, placed.composite
        if composite is not None:
            children = self.caches.podgroups.by_index(BY_PARENT, composite)
            members = tuple(
                pod
                for child in children
                for pod in self.caches.pods.by_index(BY_GROUP, groups.key_of_podgroup(child))
                if not gated(pod)
            )
            group = groups.resolve_composite(placed, self.caches.composites.get(composite), children, members)
            return members, group, self.jobs.for_pod_key(key)
        if not placed.alone:
            members = tuple(p for p in self.caches.pods.by_index(BY_GROUP, key) if not gated(p))
            return (
                members,
                groups.resolve(placed, members, self.caches.podgroups.get),
                self.jobs.for_pod_key(key),
            )
        pod = self.caches.pods.get(key)
        if pod is None:
            return (), groups.alone(placed, None), self.jobs.for_pod_key(key)  # deleted: by its name
        # Every job of its name: observe keeps its own (of its uid) apart from an earlier Pod's.
        return (pod,), groups.alone(placed, pod), self.jobs.for_pod_key(key)

    def _as_bound(self, pod: JSON) -> JSON:
        """The Pod as this process bound it, while the informer's copy does not show that yet."""
        if (pod.get("spec") or {}).get("nodeName"):
            return pod
        node = self.assumed.bound.get(str(pod["metadata"]["uid"]))
        return pod if node is None else {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}

    def observe(self, placed: groups.Target, kill_wait: KillWait | None = None) -> actions.Observed:
        """A snapshot of plain values: everything decide reads but the fits (decide asks for
        them: Judge). `kill_wait`: the one a reconcile read; else the current one, or (only shown,
        by the placement view) Slurm's default while none is known."""
        kill_wait = kill_wait or self.settings.kill_wait() or UNKNOWN_KILL_WAIT
        policy = self.settings.policy()
        members, group, jobs = self.members_and_jobs(placed)
        members = tuple(self._as_bound(pod) for pod in members)
        # A Pod alone: its own jobs, and the live ones of an earlier Pod of its name (a StatefulSet's
        # Pod deleted and made again at once: one reconcile may see only the new one).
        earlier: tuple[int, ...] = ()
        if placed.alone and members:
            uid = str(members[0]["metadata"]["uid"])
            theirs = [j for j in jobs if (ref := placeholder.pod_of(j.job)) is not None and ref.uid != uid]
            earlier = tuple(j.job_id for j in theirs if not j.ended)
            jobs = [j for j in jobs if j not in theirs]
        recorded: dict[str, int] = {}
        for pod in members:
            uid = str(pod["metadata"]["uid"])
            written = self.assumed.recorded.get(uid, version(pod))
            carried = written if written is not None else keys.recorded_job_id(pod)
            if carried is not None:
                recorded[uid] = carried
        submitted = self.assumed.submitted.get(owner(placed, members))
        if submitted is not None and any(j.job_id == submitted for j in jobs):
            submitted = None  # the stream shows it now
        core_jobs, by_extra = (jobs, {}) if placed.alone else split_jobs(jobs)
        wanted = set(recorded.values()) or ({submitted} if submitted is not None else set())
        job = _job_of(core_jobs, wanted)
        duplicates: tuple[int, ...] = ()
        if job is not None and job.job_id in recorded.values():
            duplicates = tuple(j.job_id for j in core_jobs if not j.ended and j is not job)
        extras: dict[str, JobStatus] = {}
        for uid, its in by_extra.items():
            mine = _job_of(its, {recorded[uid]} if uid in recorded else set())
            if mine is not None:
                extras[uid] = mine
                duplicates += tuple(j.job_id for j in its if not j.ended and j is not mine)
        extra_submitted = {}
        if group is not None and not group.alone and len(members) > group.min_count:  # elastic
            extra_submitted = {
                uid: job_id
                for pod in members
                if (uid := str(pod["metadata"]["uid"])) not in by_extra
                and (job_id := self.assumed.submitted.get(extra_owner(placed.key, uid))) is not None
            }
        hosts = self._hosts(job, extras.values())
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
            if job is not None and job.job.nodes and any(self._asks_gpus(m) for m in members):
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
        return actions.Observed(
            placed.key,
            group,
            members,
            job=job,
            jobs=tuple(jobs),
            recorded=recorded,
            submitted_job_id=submitted,
            duplicates=duplicates,
            extras=extras,
            extra_submitted=extra_submitted,
            earlier_jobs=earlier,
            cancel_sent=self._cancels_sent(
                [*(j.job_id for j in jobs), *earlier, *([submitted] if submitted else [])]
            ),
            hosts=hosts,
            node_labels=self._node_labels(hosts.values()),
            slurm_nodes=self.jobs.slurm_node_count(),
            fits=actions.NOT_JUDGED,
            job_excludes=self._job_excludes(job),
            job_constraint=self.assumed.constraints.get(str(job.job_id)) if job is not None else None,
            asked=workloads.asked_of(members, self.caches.kube_jobs.get)
            if group is not None and group.target.podgroup is not None and not group.alone
            else None,
            job_shrunk_to=self.assumed.shrunk.get(str(job.job_id)) if job is not None else None,
            kill_wait=kill_wait.seconds,
            kill_wait_source=kill_wait.source,
            reject_static_cpu=self.settings.reject_static_cpu,
            policy=policy,
            validations={
                str(pod["metadata"]["uid"]): self.memo.validate(
                    pod, kill_wait.seconds, self.settings.reject_static_cpu, policy, kill_wait.source
                )
                for pod in members
                if podstate.is_live(pod)
            },
            job_phase_age=self.jobs.in_phase_for(job.job_id) if job is not None else float("inf"),
            gpu=actions.GpuFacts(
                gpus,
                claims,
                devices,
                class_config,
                extended_class,
                dra_served,
                extended_claims,
                # Read only for a Pod asking shares, before its job: refused when no GPU has as many.
                most_shares=self.caches.dra.most_shares()
                if self.caches.dra is not None and job is None and any(g.shares for g in gpus.values())
                else None,
            ),
            topology=self.settings.topology(),
        )

    def _asks_gpus(self, pod: JSON) -> bool:
        try:
            return self.memo.requests(pod).get(keys.GPU_RESOURCE, 0) > 0
        except ValueError:
            return False

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

    def _hosts(self, job: JobStatus | None, extras: Iterable[JobStatus] = ()) -> dict[str, str]:
        """Slurm node -> the Node hosting it, for the nodes of the job (and of its extra members'
        jobs) the syncer has published."""
        nodes = [*(job.job.nodes if job is not None else ()), *(n for e in extras for n in e.job.nodes)]
        return {s: host for s in nodes if (host := self.jobs.kube_node(s)) is not None}

    def fits(
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
                requests = self.memo.requests(pod)
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


def owner(placed: groups.Target, members: tuple[JSON, ...]) -> str:
    """Whose submit is remembered: a group's key, a Pod alone's uid (a Pod of the same name made
    again is another Pod)."""
    if not placed.alone or not members:
        return placed.key
    return str(members[0]["metadata"]["uid"])


def extra_owner(key: str, member_uid: str) -> str:
    """Whose submit is remembered for an elastic gang's extra member (tandem.scheduler.elastic)."""
    return f"{key}+{member_uid}"


def split_jobs(jobs: Iterable[JobStatus]) -> tuple[list[JobStatus], dict[str, list[JobStatus]]]:
    """A key's jobs: its own (a Pod's, a group's core), and its extra members' by member uid."""
    own: list[JobStatus] = []
    extras: dict[str, list[JobStatus]] = {}
    for j in jobs:
        member = placeholder.extra_member_of(j.job)
        if member is None:
            own.append(j)
        else:
            extras.setdefault(member, []).append(j)
    return own, extras


def version(obj: JSON) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def gated(pod: JSON) -> bool:
    """The Pod still has scheduling gates (Kueue's admission gate on a Pod group's members, for
    one): like kube-scheduler, Tandem neither places it nor counts it as a member until they are
    gone. Gates are only ever removed, so a gated Pod has no job to mind."""
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def _may_need_a_fit(pod: JSON, job: JobStatus | None) -> bool:
    """Whether deciding may ask which Nodes would take the Pod: only before its job runs."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if spec.get("nodeName") or meta.get("deletionTimestamp") or pod_finished(pod) or podstate.refused(pod):
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
