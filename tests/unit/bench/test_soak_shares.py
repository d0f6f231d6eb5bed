"""The soak's invariants over shares of a GPU (issue 54): a device in several live claims is given
twice only when one of them holds it whole; the shares live claims consume on a GPU never exceed
the shards Slurm counts in use there."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from bench import soak
from devstack import config
from devstack.config import StackConfig

POOL = config.kube_node_name(config.SHARD_NODE)


def _claim(device: str, shares: int | None = None, reserved: bool = True) -> dict[str, Any]:
    result: dict[str, Any] = {"driver": "gpu.nvidia.com", "pool": POOL, "device": device, "request": "gpus"}
    if shares is not None:
        result |= {"shareID": f"share-{device}-{shares}", "consumedCapacity": {"shares": str(shares)}}
    return {
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}] if reserved else [],
        }
    }


def _soak(claims: list[dict[str, Any]]) -> soak.Soak:
    world = soak.Soak.__new__(soak.Soak)
    world.cfg = mock.Mock(spec=StackConfig)
    world.shard_node = config.SHARD_NODE
    world.kube = mock.Mock()
    world.kube.get.return_value = {"items": claims}
    return world


def test_shares_of_one_device_are_not_given_twice_but_a_whole_device_beside_them_is() -> None:
    assert _soak([_claim("gpu-0", 4), _claim("gpu-0", 8)])._gpus_given_twice() == 0
    assert _soak([_claim("gpu-0", 4), _claim("gpu-0")])._gpus_given_twice() == 1
    assert _soak([_claim("gpu-1"), _claim("gpu-1", reserved=False)])._gpus_given_twice() == 0


@pytest.mark.parametrize(
    ("claims", "used", "over"),
    [
        ([_claim("gpu-0", 4), _claim("gpu-0", 8)], {0: 12}, 0),
        # Slurm counts more (a shard job of its own beside the Pods): not over.
        ([_claim("gpu-0", 4)], {0: 12}, 0),
        # The Pods' claims consume 12 where Slurm counts 8 in use: Slurm could give 4 again.
        ([_claim("gpu-0", 4), _claim("gpu-0", 8)], {0: 8}, 1),
        ([_claim("gpu-3", 16)], {}, 1),
        ([_claim("gpu-3", 16, reserved=False)], {}, 0),  # its Pod ended: not consumed
    ],
)
def test_claimed_shares_beyond_slurms_are_overcommitted(
    claims: list[dict[str, Any]], used: dict[int, int], over: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(soak, "slurm_shards_used", lambda cfg, node: used)
    assert _soak(claims)._gpu_shares_overcommitted() == over
