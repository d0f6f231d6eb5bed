"""A node whose ResourceSlices and Slurm GPUs disagree (issue 23): the syncer shows why as the Node
condition SlurmGpuMismatch, clears it once they agree, and the scheduler keeps Pods that claim GPUs
off that Node while Pods asking for nvidia.com/gpu still go there."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from devstack import resourceslices
from tandem import keys
from tandem.dra.claims import DraConfig
from tandem.scheduler import eligibility
from tandem.slurm.dialects import Dialect
from tandem.slurm.models import Node
from tandem.syncer import gpucheck
from tandem.syncer import nodesync as ns
from tandem.syncer.cluster import slim_node
from tests.unit.syncer.test_nodesync import facts, kube_node

CFG = DraConfig(product_types={"NVIDIA H100 80GB HBM3": "h100"})
GPU_NODE = Node("gpu-000", "IDLE", gres="gpu:h100:8(S:0-1)")


def test_slurmrestd_s_node_gres_is_read() -> None:
    raw = {"name": "gpu-000", "state": ["IDLE"], "gres": "gpu:h100:8(S:0-1)"}
    assert Dialect("v0.0.41").parse_node(raw).gres == "gpu:h100:8(S:0-1)"
    assert Dialect("v0.0.41").parse_node({"name": "cpu-001", "state": ["IDLE"], "gres": ["x"]}).gres == ""


def test_a_slice_that_matches_slurm_agrees() -> None:
    slices = [resourceslices.resource_slice("node-000")]
    assert gpucheck.mismatch(GPU_NODE, "node-000", slices, CFG) == ""


def test_a_slice_short_of_slurm_s_gpus_says_by_how_many() -> None:
    slices = [resourceslices.resource_slice("node-000", gpus=6)]
    why = gpucheck.mismatch(GPU_NODE, "node-000", slices, CFG)
    assert why == "Slurm has 8 gpu:h100, the ResourceSlice has 6 devices of that type"


def test_a_node_without_slices_is_not_judged() -> None:
    """A cluster that serves GPUs to Pods as nvidia.com/gpu only: nothing to show on its Nodes."""
    assert gpucheck.mismatch(GPU_NODE, "node-000", [], CFG) is None


def test_slurm_s_unreadable_gres_is_a_mismatch_not_a_crash() -> None:
    why = gpucheck.mismatch(replace(GPU_NODE, gres="gpu:h100:8(IDX:0-"), "node-000", [{"spec": {}}], CFG)
    assert why is not None and why.startswith("Slurm's GRES of gpu-000")


def _node_showing(difference: str | None) -> dict[str, Any]:
    node = kube_node()
    node["status"]["gpuMismatch"] = difference
    return node


def test_the_node_sync_shows_a_difference_and_clears_it() -> None:
    why = "Slurm has 8 gpu:h100, the ResourceSlice has 6 devices of that type"
    shown = replace(facts(node=_node_showing(None)), gpu_mismatch=why)
    assert ns.decide(shown).gpus == (why, True)
    assert ns.decide(replace(facts(node=_node_showing(why)), gpu_mismatch=why)).gpus is None
    assert ns.decide(replace(facts(node=_node_showing(why)), gpu_mismatch="")).gpus == ("", False)
    assert ns.decide(replace(facts(node=_node_showing(why)), gpu_mismatch=None)).gpus == ("", False)
    assert ns.decide(replace(facts(node=_node_showing(None)), gpu_mismatch=None)).gpus is None


def test_the_syncer_s_node_cache_keeps_the_condition_s_message() -> None:
    node = {
        "metadata": {"name": "node-000"},
        "status": {
            "conditions": [
                {
                    "type": keys.GPU_MISMATCH_CONDITION,
                    "status": "True",
                    "message": "Slurm has 8 gpu:h100, ...",
                }
            ]
        },
    }
    assert slim_node(node)["status"]["gpuMismatch"] == "Slurm has 8 gpu:h100, ..."
    assert slim_node({"metadata": {"name": "n"}})["status"]["gpuMismatch"] is None


def _ready_node(mismatch: bool) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}]
    if mismatch:
        conditions.append({"type": keys.GPU_MISMATCH_CONDITION, "status": "True", "message": "..."})
    return eligibility.slim_node(
        {"metadata": {"name": "node-000"}, "status": {"conditions": conditions, "allocatable": {"cpu": "64"}}}
    )


def _judge(pod: dict[str, Any], mismatch: bool) -> eligibility.Eligibility:
    node = _ready_node(mismatch)
    return eligibility.judge(
        pod,
        {"cpu": 1000},
        {"gpu-000": "node-000"},
        {"node-000": node},
        lambda n: eligibility.NO_ROOM_TAKEN,
    )


def test_a_pod_claiming_gpus_does_not_fit_a_node_whose_gpus_disagree() -> None:
    claiming = {
        "metadata": {"name": "p"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "c"}]},
    }
    plain = {"metadata": {"name": "p"}, "spec": {}}
    assert _judge(claiming, mismatch=True).excluded == ("gpu-000",)
    assert "GPU devices that disagree" in _judge(claiming, mismatch=True).message()
    assert _judge(claiming, mismatch=False).excluded == ()
    assert _judge(plain, mismatch=True).excluded == ()
