"""`nvidia.com/gpu` served through DRA (issue 23, KEP-5004): on a Node with no device plugin (no
nvidia.com/gpu in its allocatable) whose GPUs NVIDIA's DeviceClass maps to the extended resource,
a Pod that asks `nvidia.com/gpu` unchanged gets a claim Tandem makes as kube-scheduler would,
allocated exactly the devices Slurm gave its job, and the status the kubelet hands devices out
from; Pods and a Slurm job share the node GPU by GPU, and the claim goes with the Pod."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config
from devstack.config import StackConfig
from tandem import keys
from tandem.kube import KubeClient
from tests.integration import helpers as h
from tests.integration.test_gpu_claims import CLAIMS, allocated, running, slurm_indices

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

NODE_INDEX = 2
SLURM_NODE = config.slurm_node_name(NODE_INDEX)
GPU = keys.GPU_RESOURCE.replace("/", "~1")  # a JSON pointer's escape


@pytest.fixture
def api(stack_cfg: StackConfig) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    yield client
    client.close()


@pytest.fixture
def dra_only(core: k8s.CoreV1Api) -> Iterator[str]:
    """The Node of SLURM_NODE without the device plugin's nvidia.com/gpu: it serves GPUs through
    DRA only (kwok keeps a Node's capacity as written)."""
    node = config.kube_node_name(NODE_INDEX)
    _gpus(core, node, None)
    yield node
    _gpus(core, node, str(config.GPUS_PER_NODE))


def _gpus(core: k8s.CoreV1Api, node: str, count: str | None) -> None:
    allocatable = core.read_node_status(node).status.allocatable or {}
    if count is None and keys.GPU_RESOURCE not in allocatable:
        return
    op = {"op": "remove"} if count is None else {"op": "add", "value": count}
    core.patch_node_status(
        node, [{**op, "path": f"/status/{field}/{GPU}"} for field in ("capacity", "allocatable")]
    )


def gpu_pod(cfg: StackConfig, name: str, *counts: int, init: int = 0) -> dict[str, Any]:
    pod = h.tandem_pod(cfg, name, {h.PREFIX + "required-nodes": SLURM_NODE}, gpus=counts[0])
    template = pod["spec"]["containers"][0]
    for i, count in enumerate(counts[1:], start=1):
        extra = {**template, "name": f"side-{i}", "resources": {"requests": {}, "limits": {}}}
        extra["resources"]["requests"] = {"cpu": "100m", "memory": "64Mi", keys.GPU_RESOURCE: str(count)}
        extra["resources"]["limits"] = {keys.GPU_RESOURCE: str(count)}
        pod["spec"]["containers"].append(extra)
    if init:
        pod["spec"]["initContainers"] = [
            {
                "name": "warmup",
                "image": "ubuntu",
                "resources": {
                    "requests": {keys.GPU_RESOURCE: str(init)},
                    "limits": {keys.GPU_RESOURCE: str(init)},
                },
            }
        ]
    return pod


def test_pods_asking_nvidia_gpu_get_slurms_devices_through_a_claim_made_for_them(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient, dra_only: str
) -> None:
    single, double = h.unique("xgpu"), h.unique("xgpu")
    h.create(core, gpu_pod(stack_cfg, single, 2))
    h.create(core, gpu_pod(stack_cfg, double, 1, 2))  # two containers: a request each
    training = h.sbatch(
        stack_cfg, "--gres=gpu:h100:3", f"--nodelist={SLURM_NODE}", "--cpus-per-task=1", "--mem=1G"
    )
    for name in (single, double):
        h.wait_until(f"{name} running", functools.partial(running, core, name), 60)
    h.wait_until(
        "the Slurm job running",
        lambda: "RUNNING" in h.squeue(stack_cfg, "-j", str(training), "-h", "-o", "%T"),
        60,
    )

    taken: list[set[int]] = []
    for name, containers in ((single, ["main"]), (double, ["main", "side-1"])):
        pod = h.get_pod(core, name)
        assert pod is not None and pod.spec.node_name == dra_only
        raw = api.get(f"/api/v1/namespaces/default/pods/{name}")
        status = raw["status"]["extendedResourceClaimStatus"]
        assert [m["containerName"] for m in status["requestMappings"]] == containers
        assert {m["resourceName"] for m in status["requestMappings"]} == {keys.GPU_RESOURCE}
        claim = api.get(f"{CLAIMS}/{status['resourceClaimName']}")
        # What quota, the ResourceClaim controller and the kubelet know it by.
        assert claim["metadata"]["annotations"][keys.EXTENDED_CLAIM_ANNOTATION] == "true"
        [owner] = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", pod.metadata.uid, True)
        requests = {r["name"] for r in claim["spec"]["devices"]["requests"]}
        assert requests == {m["requestName"] for m in status["requestMappings"]}
        got = allocated(api, status["resourceClaimName"])
        assert got is not None
        devices, reserved = got
        assert [r["uid"] for r in reserved] == [pod.metadata.uid]
        assert devices == slurm_indices(stack_cfg, h.job_id_of(core, name) or 0)
        taken.append(devices)
    taken.append(slurm_indices(stack_cfg, training))
    assert [len(t) for t in taken] == [2, 3, 3]
    assert set().union(*taken) == set(range(config.GPUS_PER_NODE)), f"GPUs given twice: {taken}"

    # The claim goes with its Pod (Kubernetes' garbage collector and ResourceClaim controller).
    made = api.get(f"/api/v1/namespaces/default/pods/{single}")["status"]["extendedResourceClaimStatus"]
    h.delete_pod(core, single, grace=0)
    h.wait_until(
        "the claim deleted",
        lambda: (
            not any(
                c["metadata"]["name"] == made["resourceClaimName"] for c in api.get(CLAIMS).get("items") or []
            )
            or None
        ),
        60,
    )
    h.scancel(stack_cfg, training)


def test_an_init_container_asking_gpus_is_not_offered_a_node_serving_them_through_dra(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, dra_only: str
) -> None:
    name = h.unique("xinit")
    h.create(core, gpu_pod(stack_cfg, name, 1, init=1))
    condition = h.wait_until(
        "the Pod unschedulable",
        lambda: (
            (p := h.get_pod(core, name)) is not None
            and (c := h.scheduled_condition(p)) is not None
            and c.reason == "Unschedulable"
            and c
        ),
        30,
    )
    assert "which Tandem cannot map: init container 'warmup'" in condition.message
    assert f"required node(s) {SLURM_NODE}" in condition.message
    assert h.job_id_of(core, name) is None
