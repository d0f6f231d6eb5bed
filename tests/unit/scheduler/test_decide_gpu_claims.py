"""A Pod that claims GPUs by ResourceClaim (issue 23), through the one decide: its job asks Slurm
for them as GRES, its claims are allocated the devices of Slurm's indices before the bind, and a
claim Slurm cannot satisfy is refused with the field that says why."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tandem import keys, placeholder, reasons
from tandem.dra.allocation import FINALIZER
from tandem.dra.claims import DraConfig, pod_gpus
from tandem.dra.slices import NodeDevices, SlicedDevice
from tandem.dra.taints import DeviceTaint
from tandem.scheduler import actions, groups, policy
from tandem.scheduler import decide as d
from tandem.scheduler.eligibility import Eligibility
from tandem.slurm.models import Job, JobStatus

SCHEDULER = "tandem-test"
REF = placeholder.PodRef("default", "infer", "uid-1")
HOSTS = {"gpu-000": "node-000"}
POLICY = policy.parse("default: {defaultUser: 1001}")
CFG = DraConfig(product_types={"NVIDIA H100 80GB HBM3": "h100"})
DEVICES = NodeDevices(
    "node-000",
    "gpu.nvidia.com",
    "node-000",
    tuple(SlicedDevice(f"gpu-{i}", "gpu", "h100", i) for i in range(8)),
)


def claim(count: Any = 2, selector: str = "", status: dict[str, Any] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "metadata": {"namespace": "default", "name": "two-gpus", "resourceVersion": "41"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
        "status": status or {},
    }


def pod(job_id: int | None = None, node: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "default", "name": REF.name, "uid": REF.uid, "annotations": {}}
    if job_id is not None:
        meta["annotations"][keys.JOB_ID_ANNOTATION] = str(job_id)
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "gpus"}]},
            }
        ],
        "resourceClaims": [{"name": "gpus", "resourceClaimName": "two-gpus"}],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def running(detail: tuple[str, ...] = ("gpu:h100:2(IDX:4-5)",)) -> JobStatus:
    name = placeholder.job_name(REF, SCHEDULER)
    return JobStatus(
        Job(
            7,
            name,
            "RUNNING",
            nodes=("gpu-000",),
            admin_comment=name,
            tres_per_node="gres/gpu:h100:2",
            gres_detail=detail,
        ),
        started=True,
    )


def seen(
    p: dict[str, Any], j: JobStatus | None = None, c: dict[str, Any] | None = None, **kw: Any
) -> actions.Observed:
    c = c if c is not None else claim()
    claims = {"two-gpus": c} if c else {}
    return actions.Observed(
        REF.key,
        groups.alone(groups.target(REF.key), p),
        (p,),
        job=j,
        jobs=(j,) if j is not None else (),
        recorded={REF.uid: 7} if j is not None else {},
        hosts=HOSTS,
        fits=kw.pop("fits", None),
        kill_wait=30,
        policy=POLICY,
        gpu=actions.GpuFacts(
            gpus={REF.uid: pod_gpus(p, claims, {}, CFG)},
            claims=claims,
            devices=kw.pop("devices", {"node-000": DEVICES}),
            most_shares=kw.pop("gpu_most", None),
        ),
        **kw,
    )


def test_the_job_asks_slurm_for_the_claimed_gpus_of_the_selected_type() -> None:
    selector = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
    action = d.decide(seen(pod(), c=claim(2, selector)))
    assert isinstance(action, actions.Submit)
    assert action.validations[0].requests[keys.GPU_RESOURCE] == 2
    assert action.validations[0].gpu_type == "h100"


def test_a_claim_slurm_cannot_allocate_is_refused_naming_the_field() -> None:
    action = d.decide(seen(pod(), c=claim(count=0)))
    assert isinstance(action, actions.Reject)
    assert "exactly.count" in action.message and "GPU claims not allocatable by Slurm" in action.message


def test_a_claim_not_seen_yet_waits_for_it_without_a_job() -> None:
    action = d.decide(seen(pod(), c={}))
    assert action == actions.Wait("waiting for ResourceClaim two-gpus")


def test_the_bind_allocates_the_claim_the_devices_slurm_chose() -> None:
    action = d.decide(seen(pod(7), running()))
    assert isinstance(action, actions.Bind)
    (write,) = action.claims[REF.uid]
    assert write.devices == ("gpu-4", "gpu-5") and write.needs_finalizer
    results = write.status["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-4", "gpu-5"]
    assert write.status["reservedFor"] == [{"resource": "pods", "name": REF.name, "uid": REF.uid}]


def test_the_bind_waits_for_slurm_s_indices() -> None:
    action = d.decide(seen(pod(7), running(detail=())))
    assert isinstance(action, actions.Wait) and "which GPUs" in action.why


def test_slurm_s_indices_missing_from_the_slice_refuse_the_pod_and_so_cancel_its_job() -> None:
    action = d.decide(seen(pod(7), running(("gpu:h100:2(IDX:8-9)",))))
    assert isinstance(action, actions.Refuse) and action.reason == reasons.REASON_GPU_MISMATCH
    assert "no device of that index" in action.message
    # Refused: the decision after that write cancels the job that holds the GPUs.
    refused = pod(7)
    refused["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": reasons.REASON_GPU_MISMATCH,
            "message": action.message,
        }
    ]
    assert d.decide(seen(refused, running(("gpu:h100:2(IDX:8-9)",)))) == actions.Cancel(
        (7,), actions.CancelCause.REFUSED, "the Pod was refused before it was bound"
    )


def test_a_node_without_slices_refuses_rather_than_guessing() -> None:
    action = d.decide(
        seen(pod(7), running(), devices={"node-000": "no ResourceSlice of gpu.nvidia.com for Node node-000"})
    )
    assert isinstance(action, actions.Refuse) and "no ResourceSlice" in action.message


def test_a_crash_after_the_status_write_binds_with_only_the_finalizer_left() -> None:
    first = d.decide(seen(pod(7), running()))
    assert isinstance(first, actions.Bind)
    written = replace_claim_status(first.claims[REF.uid][0].status)
    again = d.decide(seen(pod(7), running(), c=written))
    assert isinstance(again, actions.Bind)
    (write,) = again.claims[REF.uid]
    assert write.status_written and write.needs_finalizer
    done = {**written, "metadata": {**written["metadata"], "finalizers": [FINALIZER]}}
    last = d.decide(seen(pod(7), running(), c=done))
    assert isinstance(last, actions.Bind) and last.claims[REF.uid] == ()


def replace_claim_status(status: dict[str, Any]) -> dict[str, Any]:
    return {**claim(), "status": status}


def test_a_pod_without_claims_is_as_before() -> None:
    p = pod()
    del p["spec"]["resourceClaims"]
    before = seen(p)
    observed = replace(before, gpu=replace(before.gpu, gpus={}))
    action = d.decide(observed)
    assert isinstance(action, actions.Submit) and keys.GPU_RESOURCE not in action.validations[0].requests


def _fit(types: frozenset[str] | None) -> dict[str, Eligibility]:
    return {REF.uid: Eligibility(total=1, whole_gpu_types=types)}


def test_whole_gpus_of_no_product_ask_for_the_one_whole_type_the_nodes_publish() -> None:
    """Issue 37: untyped, `gres/gpu:2` on the lab's mixed node was given as two MIG slices (a `gpu`
    GRES of type 1g.10gb), which no whole-GPU claim can hold; the job was cancelled."""
    action = d.decide(seen(pod(), fits=_fit(frozenset({"h100"}))))
    assert isinstance(action, actions.Submit)
    assert action.validations[0].gpu_type == "h100"
    assert action.validations[0].requests[keys.GPU_RESOURCE] == 2


@pytest.mark.parametrize(
    ("types", "says"),
    [
        (
            frozenset({"a100", "h100"}),
            "whole GPUs of Slurm types a100, h100; one Slurm job asks for one type",
        ),
        (frozenset(), "no Node that would take it publishes any"),
    ],
    ids=["several types", "none"],
)
def test_whole_gpus_no_one_type_expresses_wait_unschedulable_with_the_reason(
    types: frozenset[str], says: str
) -> None:
    action = d.decide(seen(pod(), fits=_fit(types)))
    assert isinstance(action, actions.Pend) and action.reason == reasons.REASON_UNSCHEDULABLE
    assert says in action.message and action.event == "FailedScheduling"


def test_a_product_selector_names_the_type_whatever_the_nodes_publish() -> None:
    selector = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
    action = d.decide(seen(pod(), c=claim(2, selector), fits=_fit(frozenset({"a100", "h100"}))))
    assert isinstance(action, actions.Submit) and action.validations[0].gpu_type == "h100"


MIXED = NodeDevices(
    "node-000",
    "gpu.nvidia.com",
    "node-000",
    (
        *(SlicedDevice(f"gpu-0-mig-1g10gb-19-{i}", "mig", "1g.10gb", i) for i in range(7)),
        *(SlicedDevice(f"gpu-{g}", "gpu", "h100", 6 + g) for g in range(1, 8)),
    ),
)


def test_on_a_mixed_node_the_claim_gets_exactly_the_whole_gpus_slurm_chose() -> None:
    detail = ("gpu:1g.10gb:0(IDX:),gpu:h100:2(IDX:9-10)",)
    action = d.decide(seen(pod(7), running(detail), devices={"node-000": MIXED}))
    assert isinstance(action, actions.Bind)
    (write,) = action.claims[REF.uid]
    assert write.devices == ("gpu-3", "gpu-4")


def test_slices_given_for_whole_gpus_refuse_the_pod_once_with_the_reason_not_a_parse_error() -> None:
    detail = ("gpu:1g.10gb:2(IDX:0-1),gpu:h100:0(IDX:)",)
    action = d.decide(seen(pod(7), running(detail), devices={"node-000": MIXED}))
    assert isinstance(action, actions.Refuse) and action.reason == reasons.REASON_GPU_MISMATCH
    assert "a mig) to a request for a gpu" in action.message


# Shares of a GPU (issue 54): the lab's shard node, 16 shares on each of its 8 GPUs.
SHARED = replace(DEVICES, devices=tuple(replace(x, shares=16, capacity="shares") for x in DEVICES.devices))
TAINTED = replace(
    SHARED,
    devices=tuple(
        replace(x, taints=(DeviceTaint("example.com/xid", "79", "NoSchedule"),)) if x.index == 2 else x
        for x in SHARED.devices
    ),
)


def share_claim(n: Any, uid: str = "claim-uid") -> dict[str, Any]:
    c = claim(1)
    c["metadata"]["uid"] = uid
    c["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"shares": n}}
    return c


def shard_job(detail: str = "shard:h100:4(0/16,0/16,4/16,0/16,0/16,0/16,0/16,0/16)") -> JobStatus:
    job = running((detail,))
    return replace(job, job=replace(job.job, tres_per_node="gres/shard:h100:4"))


def test_a_claim_for_shares_asks_slurm_for_shards_and_no_gpus() -> None:
    action = d.decide(seen(pod(), c=share_claim("4"), gpu_most={"shares": 16}))
    assert isinstance(action, actions.Submit)
    requests = action.validations[0].requests
    assert requests[keys.GPU_SHARES] == 4 and keys.GPU_RESOURCE not in requests


def test_more_shares_than_any_gpu_has_are_refused_before_a_job() -> None:
    action = d.decide(seen(pod(), c=share_claim(17), gpu_most={"shares": 16}))
    assert isinstance(action, actions.Reject)
    assert "asks for 17 shares of one GPU; the most any GPU publishes is 16" in action.message
    none = d.decide(seen(pod(), c=share_claim(1), gpu_most={}))
    assert (
        isinstance(none, actions.Reject) and "no Node publishes a GPU with 'shares' capacity" in none.message
    )


def test_the_bind_gives_the_claim_the_gpu_whose_shards_slurm_chose() -> None:
    action = d.decide(seen(pod(7), shard_job(), c=share_claim(4), devices={"node-000": SHARED}))
    assert isinstance(action, actions.Bind)
    (write,) = action.claims[REF.uid]
    (result,) = write.status["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-2" and result["consumedCapacity"] == {"shares": "4"}
    assert result["shareID"]  # a share of a device several claims may hold
    # The same claim and device always name the same share: a rewrite after a crash agrees.
    again = d.decide(seen(pod(7), shard_job(), c=share_claim(4), devices={"node-000": SHARED}))
    assert isinstance(again, actions.Bind)
    assert again.claims[REF.uid][0].status == write.status


@pytest.mark.parametrize(
    ("detail", "devices", "says"),
    [
        (
            "shard:h100:4(2/16,2/16,0/16,0/16,0/16,0/16,0/16,0/16)",
            SHARED,
            "holds shards 2 on GPU 0, 2 on GPU 1",
        ),
        ("shard:h100:3(0/16,3/16,0/16,0/16,0/16,0/16,0/16,0/16)", SHARED, "ask for 4 of one GPU"),
        ("shard:h100:4(4/16,0/16,0/16,0/16,0/16,0/16,0/16,0/16)", DEVICES, "gpu-0 is not sharable"),
        ("shard:h100:4(0/16,0/16,4/16,0/16,0/16,0/16,0/16,0/16)", TAINTED, "device gpu-2 (Slurm index 2)"),
    ],
)
def test_shards_the_claim_cannot_hold_refuse_the_pod(detail: str, devices: NodeDevices, says: str) -> None:
    action = d.decide(seen(pod(7), shard_job(detail), c=share_claim(4), devices={"node-000": devices}))
    assert isinstance(action, actions.Refuse) and action.reason == reasons.REASON_GPU_MISMATCH
    assert says in action.message


def test_a_whole_gpu_on_a_sharable_device_consumes_all_its_shares() -> None:
    action = d.decide(seen(pod(7), running(), devices={"node-000": SHARED}))
    assert isinstance(action, actions.Bind)
    results = action.claims[REF.uid][0].status["allocation"]["devices"]["results"]
    assert [r["consumedCapacity"] for r in results] == [{"shares": "16"}] * 2


# An MPS share of a GPU (issue 54): the lab's MPS node, 100 on each of its 8 GPUs.
MPS = replace(DEVICES, devices=tuple(replace(x, shares=100, capacity="mps") for x in DEVICES.devices))


def mps_claim(n: Any, config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c = claim(1)
    c["metadata"]["uid"] = "claim-uid"
    c["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"mps": n}}
    if config is not None:
        c["spec"]["devices"]["config"] = config
    return c


def mps_job(detail: str = "mps:h100:30(0/100,30/100,0/100,0/100,0/100,0/100,0/100,0/100)") -> JobStatus:
    job = running((detail,))
    return replace(job, job=replace(job.job, tres_per_node="gres/mps:h100:30"))


def gpu_config(percentage: int) -> dict[str, Any]:
    sharing = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": percentage}}
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}
    return {"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}


def test_a_claim_for_mps_asks_slurm_for_mps_and_no_gpus_or_shards() -> None:
    action = d.decide(seen(pod(), c=mps_claim("30"), gpu_most={"mps": 100}))
    assert isinstance(action, actions.Submit)
    requests = action.validations[0].requests
    assert requests[keys.GPU_MPS] == 30
    assert keys.GPU_SHARES not in requests and keys.GPU_RESOURCE not in requests


def test_more_mps_than_any_gpu_has_is_refused_before_a_job_even_where_gpus_have_shards() -> None:
    action = d.decide(seen(pod(), c=mps_claim(101), gpu_most={"mps": 100, "shares": 1000}))
    assert isinstance(action, actions.Reject)
    assert "asks for 101 mps of one GPU; the most any GPU publishes is 100" in action.message
    shards_only = d.decide(seen(pod(), c=mps_claim(1), gpu_most={"shares": 16}))
    assert isinstance(shards_only, actions.Reject)
    assert "no Node publishes a GPU with 'mps' capacity" in shards_only.message


def test_the_bind_gives_the_claim_the_gpu_slurm_chose_and_the_mps_limit_of_its_share_last() -> None:
    # The tenant's own GpuConfig asks for all of the GPU's threads: Slurm counted 30 of 100.
    action = d.decide(seen(pod(7), mps_job(), c=mps_claim(30, [gpu_config(100)]), devices={"node-000": MPS}))
    assert isinstance(action, actions.Bind)
    (write,) = action.claims[REF.uid]
    devices = write.status["allocation"]["devices"]
    (result,) = devices["results"]
    assert result["device"] == "gpu-1" and result["consumedCapacity"] == {"mps": "30"}
    assert result["shareID"]
    # NVIDIA's driver applies the last configuration naming the request: Tandem's, of the share.
    assert [c["source"] for c in devices["config"]] == ["FromClaim", "FromClaim"]
    assert devices["config"][-1] == {"source": "FromClaim", "requests": ["gpus"], **gpu_config(30)}


@pytest.mark.parametrize(
    ("detail", "devices", "says"),
    [
        (
            "mps:h100:30(0/100,30/100,0/100,0/100,0/100,0/100,0/100,0/100)",
            SHARED,
            "Slurm gave 30 MPS of index 1 to ResourceClaim two-gpus; gpu-1 publishes no mps",
        ),
        ("mps:h100:30(0/100,30/100,0/100,0/100,0/100,0/100,0/100,0/100)", DEVICES, "gpu-1 is not sharable"),
        (
            "shard:h100:30(0/100,30/100,0/100,0/100,0/100,0/100,0/100,0/100)",
            MPS,
            "Slurm printed no GPU mps for job 7 on gpu-000",
        ),
    ],
)
def test_mps_the_claim_cannot_hold_refuses_the_pod(detail: str, devices: NodeDevices, says: str) -> None:
    action = d.decide(seen(pod(7), mps_job(detail), c=mps_claim(30), devices={"node-000": devices}))
    assert isinstance(action, actions.Refuse) and action.reason == reasons.REASON_GPU_MISMATCH
    assert says in action.message


def test_a_whole_gpu_on_an_mps_device_consumes_all_its_mps_and_carries_no_limit() -> None:
    action = d.decide(seen(pod(7), running(), devices={"node-000": MPS}))
    assert isinstance(action, actions.Bind)
    devices = action.claims[REF.uid][0].status["allocation"]["devices"]
    assert [r["consumedCapacity"] for r in devices["results"]] == [{"mps": "100"}] * 2
    assert "config" not in devices
