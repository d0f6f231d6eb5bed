"""nvidia.com/gpu served through DRA (KEP-5004): the claim Tandem makes for the Pod is the one
kube-scheduler would make (so quota, the ResourceClaim controller and the kubelet treat it as the
Pod's), it gets the devices of Slurm's indices, and the Pod's status says which container gets
which request; a decision at every step of the way, crash included."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tandem import keys, placeholder, reasons
from tandem.dra import extended
from tandem.dra.allocation import FINALIZER
from tandem.dra.slices import NodeDevices, SlicedDevice
from tandem.scheduler import actions, eligibility, groups, policy
from tandem.scheduler import decide as d
from tandem.slurm.models import Job, JobStatus

SCHEDULER = "tandem-test"
REF = placeholder.PodRef("default", "infer", "uid-1")
DEVICES = NodeDevices(
    "node-000",
    "gpu.nvidia.com",
    "node-000",
    tuple(SlicedDevice(f"gpu-{i}", "gpu", "h100", i) for i in range(8)),
)
CLASS = "gpu.nvidia.com"


def container(name: str, gpus: int | None, **extra: Any) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    limits: dict[str, str] = {}
    if gpus is not None:
        # As the apiserver stores it: a limit copied to the request it lacks.
        limits[keys.GPU_RESOURCE] = requests[keys.GPU_RESOURCE] = str(gpus)
    return {"name": name, "resources": {"requests": requests, "limits": limits}, **extra}


def pod(
    *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), status: Any = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "terminationGracePeriodSeconds": 5,
        "containers": list(containers) or [container("main", 2)],
    }
    if init:
        spec["initContainers"] = list(init)
    meta = {
        "namespace": "default",
        "name": REF.name,
        "uid": REF.uid,
        "annotations": {keys.JOB_ID_ANNOTATION: "7"},
    }
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending", **(status or {})}}


def device_class(name: str, created: str, resource: str = keys.GPU_RESOURCE) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"extendedResourceName": resource},
    }


# -- which class, which requests ---------------------------------------------------------------


def test_the_newest_class_naming_the_resource_serves_it_then_the_first_by_name() -> None:
    classes = [
        device_class("gpu.nvidia.com", "2026-01-01T00:00:00Z"),
        device_class("b-gpus", "2026-02-01T00:00:00Z"),
        device_class("a-gpus", "2026-02-01T00:00:00Z"),
        device_class("nics", "2026-03-01T00:00:00Z", "example.com/nic"),
    ]
    assert extended.mapped_class(classes) == "a-gpus"
    assert extended.mapped_class(classes[:1]) == "gpu.nvidia.com"
    assert extended.mapped_class([{"metadata": {"name": "mig.nvidia.com"}, "spec": {}}]) == ""


def test_requests_are_named_by_container_and_the_resource_among_its_sorted_requests() -> None:
    # init containers count first; j is nvidia.com/gpu's place among cpu, memory, nvidia.com/gpu.
    sidecar = container("proxy", 1, restartPolicy="Always")
    got = extended.container_gpus(pod(container("cpu-only", None), container("main", 2), init=(sidecar,)))
    assert got == (
        extended.ContainerGpus("proxy", "container-0-request-2", 1),
        extended.ContainerGpus("main", "container-2-request-2", 2),
    )


@pytest.mark.parametrize(
    ("p", "why"),
    [
        (pod(init=(container("warmup", 1),)), "init container 'warmup' asks for nvidia.com/gpu"),
        (pod(container("main", 40)), "is not a count from 1 to 32"),
        (pod({"name": "main", "resources": {"limits": {keys.GPU_RESOURCE: "1.5"}}}), "is not a count"),
        (pod({"name": "main", "resources": {"limits": {keys.GPU_RESOURCE: "lots"}}}), "is not a quantity"),
    ],
    ids=["init container", "too many", "fraction", "garbage"],
)
def test_what_cannot_be_one_claim_says_why(p: dict[str, Any], why: str) -> None:
    got = extended.container_gpus(p)
    assert isinstance(got, str) and why in got


def test_the_claim_is_kube_schedulers_shape_owned_by_the_pod() -> None:
    gpus = extended.container_gpus(pod())
    assert isinstance(gpus, tuple)
    manifest = extended.claim_manifest(pod(), gpus, CLASS)
    assert manifest["metadata"] == {
        "generateName": "infer-extended-resources-",
        "namespace": "default",
        "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "infer", "uid": REF.uid, "controller": True}
        ],
    }
    assert manifest["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-2",
            "exactly": {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 2},
        }
    ]
    # What the informer finds it by: its namespace and its owner's uid; a claim of the same shape
    # made by hand is not, nor one in another namespace naming the Pod's uid (an owner reference
    # names no namespace).
    ns = manifest["metadata"].get("namespace", "")
    assert extended.owner_index({**manifest, "metadata": {**manifest["metadata"], "name": "x"}}) == [
        f"{ns}/{REF.uid}"
    ]
    elsewhere = {**manifest, "metadata": {**manifest["metadata"], "namespace": "tenant-b"}}
    assert extended.owner_index(elsewhere) == [f"tenant-b/{REF.uid}"] != extended.owner_index(manifest)
    hand_made = {**manifest, "metadata": {**manifest["metadata"], "annotations": {}}}
    assert extended.owner_index(hand_made) == []
    long_name = extended.claim_manifest({"metadata": {"name": "p" * 80}}, gpus, CLASS)
    assert len(long_name["metadata"]["generateName"]) == 58


# -- the decision --------------------------------------------------------------------------------


def made_claim(
    status: dict[str, Any] | None = None, count: int = 2, finalizers: list[str] | None = None
) -> dict[str, Any]:
    gpus = extended.container_gpus(pod(container("main", count)))
    assert isinstance(gpus, tuple)
    manifest = extended.claim_manifest(pod(), gpus, CLASS)
    manifest["metadata"] = {
        **manifest["metadata"],
        "name": "infer-extended-resources-abcde",
        "uid": "claim-uid",
        "resourceVersion": "50",
        "finalizers": finalizers or [],
    }
    manifest["status"] = status or {}
    return manifest


def running(detail: str = "gpu:h100:2(IDX:4-5)") -> JobStatus:
    name = placeholder.job_name(REF, SCHEDULER)
    return JobStatus(
        Job(
            7,
            name,
            "RUNNING",
            nodes=("gpu-000",),
            admin_comment=name,
            tres_per_node="gres/gpu:2",
            gres_detail=(detail,),
        ),
        started=True,
    )


def seen(p: dict[str, Any], claim: dict[str, Any] | None, served: bool = True, **kw: Any) -> actions.Observed:
    j = kw.pop("job", running())
    return actions.Observed(
        REF.key,
        groups.alone(groups.target(REF.key), p),
        (p,),
        job=j,
        jobs=(j,),
        recorded={REF.uid: 7},
        hosts={"gpu-000": "node-000"},
        fits=None,
        kill_wait=30,
        policy=policy.parse("default: {defaultUser: 1001}"),
        gpu=actions.GpuFacts(
            devices={"node-000": DEVICES},
            extended_class=CLASS,
            dra_served=frozenset({"node-000"}) if served else frozenset(),
            extended_claims={REF.uid: claim} if claim is not None else {},
        ),
        **kw,
    )


def test_no_claim_yet_makes_one_before_anything_else() -> None:
    action = d.decide(seen(pod(), None))
    assert isinstance(action, actions.MakeClaims) and not action.stale
    [(member, manifest)] = action.new
    assert member["metadata"]["uid"] == REF.uid
    assert manifest["metadata"]["generateName"] == "infer-extended-resources-"


def test_the_claim_gets_slurms_devices_then_the_pod_status_names_it_then_the_bind() -> None:
    action = d.decide(seen(pod(), made_claim()))
    assert isinstance(action, actions.Bind)
    [write] = action.claims[REF.uid]
    assert write.devices == ("gpu-4", "gpu-5") and write.needs_finalizer
    assert [r["request"] for r in write.status["allocation"]["devices"]["results"]] == [
        "container-0-request-2"
    ] * 2
    assert write.status["reservedFor"] == [{"resource": "pods", "name": "infer", "uid": REF.uid}]
    assert action.pod_statuses[REF.uid] == {
        "resourceClaimName": "infer-extended-resources-abcde",
        "requestMappings": [
            {
                "containerName": "main",
                "resourceName": keys.GPU_RESOURCE,
                "requestName": "container-0-request-2",
            }
        ],
    }


def test_two_containers_share_slurms_indices_in_order() -> None:
    p = pod(container("a", 1), container("b", 3))
    gpus = extended.container_gpus(p)
    assert isinstance(gpus, tuple)
    claim = {**made_claim(), "spec": extended.claim_manifest(p, gpus, CLASS)["spec"]}
    action = d.decide(seen(p, claim, job=running("gpu:h100:4(IDX:0,2-3,6)")))
    assert isinstance(action, actions.Bind)
    results = action.claims[REF.uid][0].status["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [
        ("container-0-request-2", "gpu-0"),
        ("container-1-request-2", "gpu-2"),
        ("container-1-request-2", "gpu-3"),
        ("container-1-request-2", "gpu-6"),
    ]


def test_after_a_crash_each_write_done_is_not_done_again() -> None:
    first = d.decide(seen(pod(), made_claim()))
    assert isinstance(first, actions.Bind)
    written = first.claims[REF.uid][0].status
    # The claim's writes done, the Pod's status not: only the status.
    claimed = made_claim(written, finalizers=[FINALIZER])
    second = d.decide(seen(pod(), claimed))
    assert isinstance(second, actions.Bind)
    assert second.claims[REF.uid] == () and REF.uid in second.pod_statuses
    # Both done: the bind alone.
    p = pod(status={"extendedResourceClaimStatus": first.pod_statuses[REF.uid]})
    third = d.decide(seen(p, claimed))
    assert isinstance(third, actions.Bind) and third.claims[REF.uid] == () and third.pod_statuses == {}


def test_a_claim_allocated_for_another_placement_is_replaced_not_refused() -> None:
    # Allocated on an earlier run of the job (requeued before the bind), to other GPUs.
    old = d.decide(seen(pod(), made_claim(), job=running("gpu:h100:2(IDX:0-1)")))
    assert isinstance(old, actions.Bind)
    stale = made_claim(old.claims[REF.uid][0].status, finalizers=[FINALIZER])
    action = d.decide(seen(pod(), stale))
    assert isinstance(action, actions.MakeClaims) and not action.new
    [(claim, why)] = action.stale
    assert claim is stale and "allocated already, to gpu-0, gpu-1" in why


def test_a_claim_of_another_shape_is_replaced() -> None:
    action = d.decide(seen(pod(), made_claim(count=3)))
    assert isinstance(action, actions.MakeClaims) and "other devices" in action.stale[0][1]


def test_a_node_whose_device_plugin_serves_the_gpus_binds_as_before() -> None:
    action = d.decide(seen(pod(), None, served=False))
    assert isinstance(action, actions.Bind) and action.claims == {} and action.pod_statuses == {}


def test_slurms_indices_without_devices_refuse_the_pod() -> None:
    action = d.decide(seen(pod(), made_claim(), job=running("gpu:h100:2(IDX:8-9)")))
    assert isinstance(action, actions.Refuse) and action.reason == reasons.REASON_GPU_MISMATCH
    assert f"cannot be given to the Pod's {keys.GPU_RESOURCE}" in action.message


def test_slurms_indices_not_read_yet_wait() -> None:
    unread = replace(running(), job=replace(running().job, gres_detail=()))
    assert isinstance(d.decide(seen(pod(), made_claim(), job=unread)), actions.Wait)


# -- which Nodes take the Pod ----------------------------------------------------------------------


def node(gpus: int | None, mismatch: bool = False) -> dict[str, Any]:
    allocatable = {"cpu": 32000, "memory": 2**40, "pods": 110}
    if gpus is not None:
        allocatable[keys.GPU_RESOURCE] = gpus
    return {
        "metadata": {"name": "node-000", "labels": {}},
        "spec": {"taints": []},
        "status": {"ready": True, "allocatable": allocatable, "gpuMismatch": mismatch},
    }


def judge(p: dict[str, Any], n: dict[str, Any], dra: eligibility.DraGpus | None) -> eligibility.Eligibility:
    requests = {"cpu": 1000, "memory": 2**30, keys.GPU_RESOURCE: 2}
    return eligibility.judge(
        p, requests, {"gpu-000": "node-000"}, {"node-000": n}, lambda h: eligibility.NO_ROOM_TAKEN, dra
    )


SERVED = eligibility.DraGpus(CLASS, lambda n: True)


@pytest.mark.parametrize(
    ("p", "n", "dra", "reason"),
    [
        (pod(), node(None), SERVED, ""),
        (pod(), node(None), None, f"Insufficient {keys.GPU_RESOURCE}"),
        (pod(), node(None), eligibility.DraGpus(CLASS, lambda n: False), f"Insufficient {keys.GPU_RESOURCE}"),
        (pod(), node(None), eligibility.DraGpus("", lambda n: True), f"Insufficient {keys.GPU_RESOURCE}"),
        (pod(), node(None, mismatch=True), SERVED, "node(s) had GPU devices that disagree with Slurm's GRES"),
        (pod(), node(8, mismatch=True), SERVED, ""),  # the device plugin serves it there
        (pod(), node(1), SERVED, f"Insufficient {keys.GPU_RESOURCE}"),
        (
            pod(init=(container("warmup", 1),)),
            node(None),
            SERVED,
            "node(s) served nvidia.com/gpu through DRA, which Tandem cannot map: init container 'warmup'",
        ),
        (
            pod(),
            node(None),
            eligibility.DraGpus("example.com-gpus", lambda n: True),
            "not one Tandem translates",
        ),
    ],
    ids=[
        "served by DRA",
        "DRA not read",
        "no devices on the Node",
        "no class maps it",
        "devices disagree",
        "device plugin on a disagreeing Node",
        "device plugin short",
        "init container",
        "another driver's class",
    ],
)
def test_a_node_serving_gpus_through_dra_takes_the_pod_where_it_can_be_mapped(
    p: dict[str, Any], n: dict[str, Any], dra: eligibility.DraGpus | None, reason: str
) -> None:
    got = judge(p, n, dra)
    if not reason:
        assert got.excluded == ()
    else:
        assert got.excluded == ("gpu-000",)
        assert any(reason in r for r in got.reasons), got.reasons
