"""A GPU the kubelet reports Unhealthy in a Pod's status (KEP-4680) is read as a taint: Slurm must not
give it out either (issue 37)."""

from __future__ import annotations

from typing import Any

from tandem.syncer import devicehealth


def pod(*resources: tuple[str, str], node: str = "node-001") -> dict[str, Any]:
    return {
        "spec": {"nodeName": node},
        "status": {
            "containerStatuses": [
                {
                    "name": "c",
                    "allocatedResourcesStatus": [
                        {
                            "name": "claim:gpus/gpus",
                            "resources": [{"resourceID": rid, "health": health} for rid, health in resources],
                        }
                    ],
                }
            ]
        },
    }


def test_only_unhealthy_devices_are_kept() -> None:
    reported = pod(
        ("gpu.nvidia.com/node-001/gpu-3", "Unhealthy"),
        ("gpu.nvidia.com/node-001/gpu-4", "Healthy"),
        ("gpu.nvidia.com/node-001/gpu-5", "Unknown"),
    )
    assert devicehealth.kept(reported) == ["gpu.nvidia.com/node-001/gpu-3"]


def test_the_devices_of_one_pool_and_driver_are_found() -> None:
    pods: list[dict[str, Any]] = [
        {
            "status": {
                "unhealthyDevices": ["gpu.nvidia.com/node-001/gpu-3", "other.example.com/node-001/nic-0"]
            }
        },
        {"status": {"unhealthyDevices": ["gpu.nvidia.com/node-002/gpu-1", "gpu.nvidia.com/node-001/a/b"]}},
        {"status": {}},
    ]
    assert devicehealth.unhealthy(pods, "gpu.nvidia.com", "node-001") == {"gpu-3"}


def test_a_status_of_any_shape_reads_as_no_report() -> None:
    for junk in (
        {},
        {"status": None},
        {"status": {"containerStatuses": [None, {"allocatedResourcesStatus": [None]}]}},
    ):
        assert devicehealth.kept(junk) == []
