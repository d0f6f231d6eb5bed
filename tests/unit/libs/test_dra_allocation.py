"""The claim status Tandem writes: exactly the devices of the indices Slurm allocated on the node, the
node selector and configs kube-scheduler's allocator would write, and the Pod in reservedFor."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.dra.allocation import (
    MAX_RESERVED_FOR,
    ClaimStatus,
    PodConsumer,
    claim_status,
    split_indices,
)
from tandem.dra.claims import ClaimRequest
from tandem.dra.slices import NodeDevices, SlicedDevice
from tandem.dra.taints import DeviceTaint

NODE = NodeDevices(
    node="node-000",
    driver="gpu.nvidia.com",
    pool="node-000",
    devices=(
        *(SlicedDevice(f"gpu-{i}", "gpu", "h100", i) for i in range(6)),
        SlicedDevice("gpu-6", "gpu", "h100", 6, taints=(DeviceTaint("example.com/xid", "79", "NoSchedule"),)),
        SlicedDevice("gpu-1-mig-1g10gb-19-0", "mig", "1g.10gb", 7),
    ),
)
POD = PodConsumer(name="p", uid="pod-uid")
OPAQUE = {"opaque": {"driver": "gpu.nvidia.com", "parameters": {"kind": "GpuConfig"}}}


def req(count: int = 2, gres_type: str = "h100", kind: str = "gpu", pod_claim: str = "gpus") -> ClaimRequest:
    return ClaimRequest(
        pod_claim=pod_claim,
        claim_name="p-gpus-x7k2q",
        request="gpus",
        device_class="mig.nvidia.com" if kind == "mig" else "gpu.nvidia.com",
        kind=kind,
        count=count,
        gres_type=gres_type,
    )


def claim(status: dict[str, Any] | None = None, config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
    }
    if config is not None:
        devices["config"] = config
    return {"metadata": {"name": "p-gpus-x7k2q"}, "spec": {"devices": devices}, "status": status or {}}


def result(device: str) -> dict[str, str]:
    return {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "node-000", "device": device}


def test_the_claim_gets_the_devices_slurm_chose() -> None:
    got = claim_status(claim(), req(2), NODE, [5, 2], POD)
    assert isinstance(got, ClaimStatus) and not got.unchanged
    assert got.devices == ("gpu-2", "gpu-5")
    assert got.status == {
        "allocation": {
            "devices": {"results": [result("gpu-2"), result("gpu-5")]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-000"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
    }


def test_a_mig_slice_by_its_slurm_index() -> None:
    got = claim_status(claim(), req(1, "1g.10gb", "mig"), NODE, [7], POD)
    assert isinstance(got, ClaimStatus)
    assert got.devices == ("gpu-1-mig-1g10gb-19-0",)


def test_an_untyped_request_takes_any_whole_gpu() -> None:
    got = claim_status(claim(), req(1, ""), NODE, [0], POD)
    assert isinstance(got, ClaimStatus) and got.devices == ("gpu-0",)


def test_class_and_claim_config_are_copied_as_kube_scheduler_does() -> None:
    mine = {"requests": ["gpus"], **OPAQUE}
    everyone = {**OPAQUE}
    others = {"requests": ["other"], **OPAQUE}
    got = claim_status(claim(config=[mine, everyone, others]), req(1), NODE, [0], POD, class_config=[OPAQUE])
    assert isinstance(got, ClaimStatus)
    assert got.status["allocation"]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["gpus"], **OPAQUE},
        {"source": "FromClaim", "requests": ["gpus"], **OPAQUE},
        {"source": "FromClaim", **OPAQUE},
    ]


def test_other_consumers_stay_reserved() -> None:
    other = {"resource": "pods", "name": "q", "uid": "q-uid"}
    got = claim_status(claim({"reservedFor": [other]}), req(1), NODE, [0], POD)
    assert isinstance(got, ClaimStatus)
    assert got.status["reservedFor"] == [other, POD.reference()]


def test_written_before_is_kept_and_unchanged() -> None:
    # A crash between the status write and the bind: the same write again changes nothing.
    first = claim_status(claim(), req(2), NODE, [0, 1], POD)
    assert isinstance(first, ClaimStatus)
    again = claim_status(claim(first.status), req(2), NODE, [1, 0], POD)
    assert isinstance(again, ClaimStatus)
    assert again.unchanged and again.status == first.status


def test_allocated_but_not_reserved_gets_the_reservation() -> None:
    first = claim_status(claim(), req(1), NODE, [0], POD)
    assert isinstance(first, ClaimStatus)
    status = {"allocation": first.status["allocation"]}
    got = claim_status(claim(status), req(1), NODE, [0], POD)
    assert isinstance(got, ClaimStatus)
    assert not got.unchanged and got.status["reservedFor"] == [POD.reference()]


@pytest.mark.parametrize(
    ("status", "request_", "indices", "says"),
    [
        ({}, req(2), [0], "asks for 2 devices, Slurm gave it 1"),
        ({}, req(2), [0, 0], "repeat one"),
        (
            {},
            req(1),
            [9],
            "Slurm gave index 9 on Node node-000, its ResourceSlice has no device of that index",
        ),
        ({}, req(1), [7], "Slurm gave index 7 (gpu-1-mig-1g10gb-19-0, a mig) to a request for a gpu"),
        ({}, req(1, "1g.10gb", "mig"), [0], "(gpu-0, a gpu) to a request for a mig"),
        ({}, req(1, "a100"), [0], "Slurm gave index 0 (gpu-0, h100) to a request for a100"),
        ({}, req(1), [6], "device gpu-6 (Slurm index 6) on Node node-000 is tainted"),
        (
            {"allocation": {"devices": {"results": [result("gpu-4")]}}},
            req(1),
            [0],
            "ResourceClaim p-gpus-x7k2q is allocated already, to gpu-4",
        ),
        (
            {"allocation": {"devices": {"results": [result("gpu-0"), result("gpu-1")]}}},
            req(1),
            [0],
            "allocated already, to gpu-0, gpu-1",
        ),
        ({"allocation": {"devices": {}}}, req(1), [0], "allocated already, to no device"),
        (
            {
                "reservedFor": [
                    {"resource": "pods", "name": f"q{i}", "uid": f"q{i}"} for i in range(MAX_RESERVED_FOR)
                ]
            },
            req(1),
            [0],
            "is reserved for 256 consumers already",
        ),
    ],
)
def test_what_tandem_will_not_write(
    status: dict[str, Any], request_: ClaimRequest, indices: list[int], says: str
) -> None:
    got = claim_status(claim(status), request_, NODE, indices, POD)
    assert isinstance(got, str)
    assert says in got


def test_slurms_indices_are_shared_over_the_pods_claims_in_order() -> None:
    requests = [req(2, pod_claim="a"), req(1, pod_claim="b")]
    assert split_indices(requests, [7, 1, 4]) == {"a": (1, 4), "b": (7,)}


@pytest.mark.parametrize(
    ("indices", "says"),
    [([1, 4], "Slurm allocated 2 GPUs on the node, the Pod's claims ask for 3"), ([1, 1, 4], "repeat one")],
)
def test_indices_that_do_not_fit_the_claims(indices: list[int], says: str) -> None:
    got = split_indices([req(2, pod_claim="a"), req(1, pod_claim="b")], indices)
    assert isinstance(got, str) and says in got
