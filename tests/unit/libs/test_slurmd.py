"""The Slurm node -> Node mapping, one owner (tandem.slurmd): who is a slurmd Pod, where it runs,
what its lock says."""

from __future__ import annotations

from typing import Any

from tandem import keys, slurmd
from tandem.keys import LockState


def pod(name: str, namespace: str = "slurm", node: str = "node-1", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
            "annotations": annotations,
        },
        "spec": {"nodeName": node} if node else {},
    }


def test_a_slurmd_pod_is_known_by_its_namespace_and_label_not_the_label_alone() -> None:
    assert slurmd.slurm_node_of(pod("gpu-001"), "slurm") == "gpu-001"
    # A tenant can write the label on any Pod of its own namespace.
    assert slurmd.slurm_node_of(pod("gpu-001", namespace="tenant"), "slurm") is None
    unlabelled = pod("gpu-001")
    unlabelled["metadata"]["labels"] = {}
    assert slurmd.slurm_node_of(unlabelled, "slurm") is None


def test_the_host_is_the_node_the_slurmd_pod_runs_on() -> None:
    assert slurmd.host_of(pod("gpu-001", node="node-7")) == "node-7"
    assert slurmd.host_of(pod("gpu-001", node="")) == ""  # scheduled nowhere yet
    assert slurmd.host_of(None) == ""


def test_the_lock_state_is_the_annotation_or_false() -> None:
    assert slurmd.lock_state_of(pod("a", **{keys.LOCK_KEY: "locked_strict"})) == LockState.LOCKED_STRICT
    assert slurmd.lock_state_of(pod("a")) == LockState.FALSE
    assert slurmd.lock_state_of(pod("a", **{keys.LOCK_KEY: "bogus"})) == LockState.FALSE
    assert slurmd.lock_state_of(None) == LockState.FALSE


def test_hosting_maps_each_slurm_node_to_its_pod_and_skips_impostors() -> None:
    found = slurmd.hosting([pod("gpu-001"), pod("gpu-002", namespace="tenant"), pod("gpu-003")], "slurm")
    assert sorted(found) == ["gpu-001", "gpu-003"]
