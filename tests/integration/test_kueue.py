"""Issue 41: Kueue as the front door. A Job queued through Kueue waits, suspended, until its
ClusterQueue has quota; once admitted its Pods run through Tandem as Slurm jobs (an Indexed Job gang
as one). Kueue's preemption suspends a Job, and Tandem cancels its Slurm jobs.

The lab's queue (devstack.kueue): LocalQueue `tandem` in `default`, ClusterQueue `tandem-lab` with
4 CPUs of quota, preempting lower priorities within itself; its flavor's node labels (`type:
kwok`) land in each admitted Pod's nodeSelector. Kueue's topology-aware scheduling (TAS) is on for
a second queue only (LocalQueue `tandem-tas`): a gang queued there runs on the Nodes TAS chose in
one rack."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config, kueue
from devstack import kube as devkube
from devstack.config import StackConfig
from tandem import keys
from tandem.cli import main as cli_main
from tandem.slurm.hostlist import expand
from tests.integration import helpers as h

# Not `slurm`: Kueue admits on the Kubernetes side; the cancels it causes go through the deletion
# flow every Slurm release's leg tests already. The 1.37 leg (`make test`) runs it.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("late_controllers", "clean")]

NS = kueue.LOCAL_QUEUE_NAMESPACE
KUEUE = ("kueue.x-k8s.io", "v1beta2")
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# What a PodSet asks TAS for: all its Pods in one domain of this level.
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
RACK, HOSTNAME = kueue.TAS_LEVELS
# What a TAS Workload's Pod template must tolerate: Kueue (v0.17, TASReplaceNodeOnNodeTaints) takes
# a taint its PodSets do not tolerate on a Node it assigned them for a failed Node, fails the Pods
# not bound there yet and evicts the Workload; Tandem's lock taint is on the Nodes of the gang's
# job from its prologs until its end, before the members are bound.
LOCK_TOLERATION = {"key": keys.LOCK_KEY, "operator": "Exists", "effect": keys.LOCK_TAINT_EFFECT}


@pytest.fixture
def batch(stack_cfg: StackConfig) -> Iterator[k8s.BatchV1Api]:
    """Deletes the test's Jobs (their Workloads go with them) before `clean` deletes the Pods."""
    api = k8s.BatchV1Api(devkube.api(stack_cfg))
    yield api
    api.delete_collection_namespaced_job(NS, propagation_policy="Background")


@pytest.fixture(scope="module")
def custom(stack_cfg: StackConfig) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(devkube.api(stack_cfg))


@pytest.fixture
def priorities(custom: k8s.CustomObjectsApi) -> Iterator[tuple[str, str]]:
    """Two WorkloadPriorityClasses, (low, high)."""
    names = (h.unique("low"), h.unique("high"))
    for name, value in zip(names, (10, 1000), strict=True):
        custom.create_cluster_custom_object(
            *KUEUE,
            "workloadpriorityclasses",
            {
                "apiVersion": "/".join(KUEUE),
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    yield names
    for name in names:
        custom.delete_cluster_custom_object(*KUEUE, "workloadpriorityclasses", name)


def _job(
    cfg: StackConfig,
    name: str,
    pods: int,
    *,
    seconds: float | None = None,
    priority: str | None = None,
    gang: bool = False,
    queue: str = kueue.LOCAL_QUEUE,
    cpu: str = "1",
) -> dict[str, Any]:
    """A Job of `pods` Pods of `cpu` CPUs each, queued in a LocalQueue of the lab (its plain one
    unless told) and scheduled by Tandem; its Pods succeed `seconds` after they start (never when
    None)."""
    labels = {kueue.QUEUE_LABEL: queue}
    if priority:
        labels[PRIORITY_LABEL] = priority
    pod = h.tandem_pod(cfg, name, labels={"job": name}, cpu=cpu)
    template = {"metadata": {"labels": {"job": name}}, "spec": {**pod["spec"], "restartPolicy": "Never"}}
    if seconds is not None:
        template["metadata"]["annotations"] = devkube.complete_after(seconds)
    spec: dict[str, Any] = {"parallelism": pods, "completions": pods, "template": template}
    if gang:
        spec |= {"completionMode": "Indexed", **h.indexed_job_gang(pods)}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def _pods(core: k8s.CoreV1Api, job: str) -> list[k8s.V1Pod]:
    return [
        p
        for p in core.list_namespaced_pod(NS, label_selector=f"job={job}").items
        if not p.metadata.deletion_timestamp
    ]


def _running(core: k8s.CoreV1Api, job: str, count: int) -> list[k8s.V1Pod] | None:
    pods = [p for p in _pods(core, job) if p.status.phase == "Running" and p.spec.node_name]
    return pods if len(pods) == count else None


def _job_ids(pods: list[k8s.V1Pod]) -> set[int]:
    return {int(p.metadata.annotations[h.PREFIX + "job-id"]) for p in pods}


def _workload(custom: k8s.CustomObjectsApi, batch: k8s.BatchV1Api, job: str) -> dict[str, Any] | None:
    """The Kueue Workload that owns the Job's admission."""
    uid = batch.read_namespaced_job(job, NS).metadata.uid
    for wl in custom.list_namespaced_custom_object(*KUEUE, NS, "workloads")["items"]:
        if any(o.get("uid") == uid for o in wl["metadata"].get("ownerReferences") or []):
            return dict(wl)
    return None


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next(
        (c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {}
    )


def _suspended(batch: k8s.BatchV1Api, job: str) -> bool:
    return bool(batch.read_namespaced_job(job, NS).spec.suspend)


def test_a_queued_job_waits_for_quota_then_runs_through_slurm(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi
) -> None:
    filler, queued = h.unique("filler"), h.unique("queued")
    batch.create_namespaced_job(NS, _job(stack_cfg, filler, 4, seconds=12))
    first = h.wait_until("the 4 Pods that use the quota running", lambda: _running(core, filler, 4), 60)
    assert len(_job_ids(first)) == 4

    batch.create_namespaced_job(NS, _job(stack_cfg, queued, 1, seconds=2))
    pending = h.wait_until(
        "the queued Job's Workload pending on quota",
        lambda: (
            (wl := _workload(custom, batch, queued))
            and _condition(wl, "QuotaReserved").get("status") == "False"
            and wl
        ),
        20,
    )
    assert "insufficient unused quota" in _condition(pending, "QuotaReserved")["message"].lower()
    assert _suspended(batch, queued) and not _pods(core, queued)

    # The filler's Pods succeed; their quota comes back, Kueue admits the queued Job.
    h.wait_until(
        "the queued Job admitted",
        lambda: _condition(_workload(custom, batch, queued), "Admitted").get("status") == "True",
        60,
    )
    # Admitted is the Workload's write; unsuspending the Job is Kueue's next one.
    h.wait_until("the queued Job unsuspended", lambda: not _suspended(batch, queued), 30)
    pod = h.wait_until(
        "its Pod bound with a Slurm job",
        lambda: (
            (p := _pods(core, queued))
            and p[0].spec.node_name
            and h.job_id_of(core, p[0].metadata.name)
            and p[0]
        ),
        60,
    )
    # Kueue wrote the flavor's node labels into the Pod; Tandem's node is one that has them.
    assert pod.spec.node_selector == kueue.FLAVOR_NODE_LABELS
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels["type"] == "kwok"
    job_id = h.job_id_of(core, pod.metadata.name)
    assert job_id is not None and h.rest_job(stack_cfg, job_id)["job_state"] in (
        "RUNNING",
        "COMPLETED",
        "COMPLETING",
    )
    h.wait_until("the queued Job complete", lambda: _finished(batch, queued), 60)
    h.wait_until("its Slurm job ended", lambda: job_id not in h.squeue_ids(stack_cfg), 60)


def _finished(batch: k8s.BatchV1Api, job: str) -> bool:
    return any(
        c.type == "Complete" and c.status == "True"
        for c in batch.read_namespaced_job(job, NS).status.conditions or []
    )


def test_an_indexed_job_gang_is_admitted_whole_and_runs_as_one_slurm_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi
) -> None:
    name = h.unique("gang")
    batch.create_namespaced_job(NS, _job(stack_cfg, name, 3, gang=True))
    h.wait_until(
        "the gang's Workload admitted",
        lambda: _condition(_workload(custom, batch, name), "Admitted").get("status") == "True",
        30,
    )
    workload = _workload(custom, batch, name)
    assert workload is not None and [ps["count"] for ps in workload["spec"]["podSets"]] == [3]
    pods = h.wait_until("the three members running", lambda: _running(core, name, 3), 60)
    jobs = _job_ids(pods)
    assert len(jobs) == 1, jobs
    assert all(p.spec.scheduling_group and p.spec.scheduling_group.pod_group_name for p in pods)
    nodes = expand(str(h.rest_job(stack_cfg, jobs.pop())["nodes"]))
    assert len(nodes) == 3
    assert len({p.spec.node_name for p in pods}) == 3


def test_kueue_preemption_suspends_the_job_and_tandem_cancels_its_slurm_jobs(
    stack_cfg: StackConfig,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    priorities: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    low, high = priorities
    victim, urgent = h.unique("victim"), h.unique("urgent")
    batch.create_namespaced_job(NS, _job(stack_cfg, victim, 4, priority=low))
    pods = h.wait_until("the low-priority Job's 4 Pods running", lambda: _running(core, victim, 4), 60)
    victim_jobs = _job_ids(pods)
    victim_nodes = {str(h.rest_job(stack_cfg, j)["nodes"]) for j in victim_jobs}

    batch.create_namespaced_job(NS, _job(stack_cfg, urgent, 2, priority=high))
    h.wait_until("Kueue suspended the low-priority Job", lambda: _suspended(batch, victim), 30)
    evicted = _condition(_workload(custom, batch, victim), "Evicted")
    assert evicted.get("status") == "True" and evicted.get("reason") == "Preempted", evicted
    h.wait_until(
        "its Slurm jobs gone from the queue", lambda: not (victim_jobs & h.squeue_ids(stack_cfg)), 60
    )
    assert {h.rest_job(stack_cfg, j)["job_state"] for j in victim_jobs} == {"CANCELLED"}
    h.wait_until("its Pods gone", lambda: not _pods(core, victim), 30)
    urgent_pods = h.wait_until("the high-priority Job's Pods running", lambda: _running(core, urgent, 2), 60)
    assert len(_job_ids(urgent_pods)) == 2
    # Nothing stays locked on the victim's nodes, but what the urgent Pods now hold.
    held = {str(h.rest_job(stack_cfg, j)["nodes"]) for j in _job_ids(urgent_pods)}
    h.wait_until(
        "the victim's locks released",
        lambda: all(h.lock_annotation(core, n) == "false" for n in victim_nodes - held),
        30,
    )
    # The victim waits, suspended, for quota again (requeued, not failed).
    assert _suspended(batch, victim)

    # `kubectl tandem get` shows the Workload that admitted each Pod beside its Slurm job.
    workload = _workload(custom, batch, urgent)
    assert workload is not None
    assert cli_main.main(["--kubeconfig", str(stack_cfg.kubeconfig), "get", "-n", NS]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(urgent)]
    assert len(rows) == 2 and all(f"{workload['metadata']['name']} (Admitted)" in r for r in rows), rows


LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


@pytest.fixture
def lws(custom: k8s.CustomObjectsApi) -> Iterator[k8s.CustomObjectsApi]:
    """Deletes the test's LeaderWorkerSets (their Pods and Workloads go with them)."""
    yield custom
    for item in custom.list_namespaced_custom_object(*LWS[:2], NS, LWS[2])["items"]:
        custom.delete_namespaced_custom_object(*LWS[:2], NS, LWS[2], item["metadata"]["name"])


def test_a_leaderworkerset_group_queued_through_kueue_waits_then_runs_as_one_slurm_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, lws: k8s.CustomObjectsApi
) -> None:
    """The queue is named on the LeaderWorkerSet only (as Kueue's own LWS tests do): Kueue gates
    the group's Pods as LWS makes them, admits the group's Workload whole, and lifts the gates;
    Tandem then places the group (leader and workers) as one Slurm job."""
    name = h.unique("lws")
    pod = h.tandem_pod(stack_cfg, "x")
    template = {"metadata": {"labels": {}}, "spec": {**pod["spec"], "terminationGracePeriodSeconds": 5}}
    lws.create_namespaced_custom_object(
        *LWS[:2],
        NS,
        LWS[2],
        {
            "apiVersion": "/".join(LWS[:2]),
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "labels": {kueue.QUEUE_LABEL: kueue.LOCAL_QUEUE}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": template}},
        },
    )
    selector = f"leaderworkerset.sigs.k8s.io/name={name}"

    def members() -> list[k8s.V1Pod]:
        pods = core.list_namespaced_pod(NS, label_selector=selector).items
        return [p for p in pods if not p.metadata.deletion_timestamp]

    def both() -> list[k8s.V1Pod] | None:
        pods = members()
        return pods if len(pods) == 2 else None

    def both_running() -> list[k8s.V1Pod] | None:
        pods = [p for p in members() if p.status.phase == "Running" and p.spec.node_name]
        return pods if len(pods) == 2 else None

    created = h.wait_until("the group's two Pods", both, 30)
    # Gated as LWS made them, or already taken into Kueue's group: never placed on their own.
    assert all(
        any(g.name == "kueue.x-k8s.io/admission" for g in p.spec.scheduling_gates or [])
        or p.metadata.labels.get("kueue.x-k8s.io/pod-group-name")
        for p in created
    )
    running = h.wait_until("leader and worker running", both_running, 90)
    for p in running:
        assert not p.spec.scheduling_gates
        assert p.metadata.labels.get(kueue.QUEUE_LABEL) == kueue.LOCAL_QUEUE
        assert p.metadata.labels.get("kueue.x-k8s.io/pod-group-name")
        assert (p.spec.node_selector or {}).items() >= kueue.FLAVOR_NODE_LABELS.items()
    jobs = _job_ids(running)
    assert len(jobs) == 1, jobs
    assert len(expand(str(h.rest_job(stack_cfg, jobs.pop())["nodes"]))) == 2


def test_a_job_that_names_no_queue_runs_without_kueue(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi
) -> None:
    name = h.unique("plain")
    manifest = _job(stack_cfg, name, 1)
    del manifest["metadata"]["labels"][kueue.QUEUE_LABEL]
    batch.create_namespaced_job(NS, manifest)
    h.wait_until("its Pod running", lambda: _running(core, name, 1), 60)
    assert not _suspended(batch, name)
    assert _workload(custom, batch, name) is None


@pytest.fixture
def racks(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[dict[str, str]]:
    """The lab's Nodes in two racks (Node -> rack), which TAS needs: it counts only the Nodes that
    carry every level's label. Afterwards no Node carries it, and Slurm's topology is flat again."""
    racked = {
        config.kube_node_name(i): "tas-rack-a" if i < stack_cfg.nodes // 2 else "tas-rack-b"
        for i in range(stack_cfg.nodes)
    }
    for node, rack in racked.items():
        core.patch_node(node, {"metadata": {"labels": {RACK: rack}}})
    yield racked
    for node in racked:
        core.patch_node(node, {"metadata": {"labels": {RACK: None}}})
    h.wait_until(
        "Slurm's topology without the racks",
        lambda: "tas-rack" not in h.scontrol(stack_cfg, "show", "topology"),
        60,
    )


def _assigned(topology_assignment: dict[str, Any]) -> list[tuple[dict[str, str], int]]:
    """A Workload's topology assignment (v1beta2's sliced form) as (domain's node labels, Pods)."""
    levels = topology_assignment["levels"]
    domains = []
    for piece in topology_assignment["slices"]:
        for d in range(piece["domainCount"]):
            values = []
            for at_level in piece["valuesPerLevel"]:
                if "universal" in at_level:
                    values.append(at_level["universal"])
                else:
                    each = at_level["individual"]
                    values.append(each.get("prefix", "") + each["roots"][d] + each.get("suffix", ""))
            counts = piece["podCounts"]
            count = counts["universal"] if "universal" in counts else counts["individual"][d]
            domains.append((dict(zip(levels, values, strict=True)), count))
    return domains


def test_a_gang_kueues_tas_places_in_one_rack_runs_there_as_one_slurm_job(
    stack_cfg: StackConfig,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    racks: dict[str, str],
) -> None:
    """With TAS on anyway, what it chose is a constraint Tandem honours: Kueue admits the gang
    with one Node per Pod in one rack, lifts the topology gate writing each Pod's Node into its
    nodeSelector, and Tandem places the gang as one Slurm job on exactly those Nodes."""
    name = h.unique("tas")
    # 16 CPUs: more than half a lab Node (32, one held by its slurmd Pod), so TAS puts one Pod on
    # each Node, as a gang's Slurm job has one node per member.
    manifest = _job(stack_cfg, name, 3, seconds=10, gang=True, queue=kueue.TAS_LOCAL_QUEUE, cpu="16")
    template = manifest["spec"]["template"]
    template["metadata"]["annotations"][REQUIRED_TOPOLOGY] = RACK
    template["spec"]["tolerations"] = [LOCK_TOLERATION]
    batch.create_namespaced_job(NS, manifest)
    h.wait_until(
        "the gang's Workload admitted",
        lambda: _condition(_workload(custom, batch, name), "Admitted").get("status") == "True",
        30,
    )
    workload = _workload(custom, batch, name)
    assert workload is not None
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert set(assignment["flavors"].values()) == {kueue.TAS_FLAVOR}
    domains = _assigned(assignment["topologyAssignment"])
    # One Pod on each of three Nodes (named by hostname, the lowest level), all in one rack.
    by_hostname = {n.metadata.labels[HOSTNAME]: n.metadata.name for n in core.list_node().items}
    chosen = {by_hostname[labels[HOSTNAME]] for labels, _ in domains}
    assert sorted(count for _, count in domains) == [1, 1, 1] and len(chosen) == 3, domains
    (rack,) = {racks[node] for node in chosen}
    # Admitted on a TAS flavor: the Job's Pods are made gated, until TAS names their Nodes (Kueue
    # writes the gate into the template as it unsuspends the Job).
    h.wait_until("the gang's Job unsuspended", lambda: not _suspended(batch, name), 30)
    gates = batch.read_namespaced_job(name, NS).spec.template.spec.scheduling_gates or []
    assert TOPOLOGY_GATE in {g.name for g in gates}

    pods = h.wait_until("the three members running", lambda: _running(core, name, 3), 90)
    for p in pods:
        assert not p.spec.scheduling_gates
        injected = (p.spec.node_selector or {}).get(HOSTNAME)
        assert injected is not None and p.spec.node_name == by_hostname[injected], p.spec.node_selector
        assert racks[p.spec.node_name] == rack
    assert {p.spec.node_name for p in pods} == chosen
    jobs = _job_ids(pods)
    assert len(jobs) == 1, jobs
    job_id = jobs.pop()
    assert len(expand(str(h.rest_job(stack_cfg, job_id)["nodes"]))) == 3
    h.wait_until("the gang's Job complete", lambda: _finished(batch, name), 60)
    h.wait_until("its Slurm job ended", lambda: job_id not in h.squeue_ids(stack_cfg), 60)
