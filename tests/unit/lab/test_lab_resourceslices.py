"""The lab's ResourceSlices and DeviceClasses: the shape NVIDIA's DRA driver publishes, built from
the facts gres.conf is (GPU nodes, GPUs per node, Slurm's index order) and a real H100's identity."""

from __future__ import annotations

import re

from devstack import config, resourceslices, slurm
from devstack.config import StackConfig
from tandem.dra import gres, slices
from tandem.dra.claims import DraConfig


def test_one_slice_per_gpu_node_on_its_kubernetes_node() -> None:
    slices = resourceslices.resource_slices(6)
    assert [s["spec"]["nodeName"] for s in slices] == ["node-000", "node-002", "node-004"]
    for s in slices:
        node = s["spec"]["nodeName"]
        assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
        assert s["metadata"]["name"] == f"{node}-gpu.nvidia.com"
        assert s["spec"]["driver"] == "gpu.nvidia.com"
        assert s["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
        assert len(s["spec"]["devices"]) == config.GPUS_PER_NODE


def test_devices_are_numbered_as_gres_conf_lists_them() -> None:
    devices = resourceslices.resource_slice("node-000")["spec"]["devices"]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert [d["attributes"]["index"] for d in devices] == [{"int": i} for i in range(8)]
    # Bus order is index order, so numbering by bus agrees with numbering by index.
    buses = [d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] for d in devices]
    assert buses == sorted(buses) and len(set(buses)) == 8
    assert all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", b) for b in buses)


def test_devices_are_a_real_h100() -> None:
    device = resourceslices.gpu_device("node-000", 3)
    attributes = device["attributes"]
    assert attributes["type"] == {"string": "gpu"}
    assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert device["capacity"] == {"memory": {"value": "81559Mi"}}
    # Every attribute and capacity name is one the API accepts (a C identifier, or domain/identifier).
    for name in [*attributes, *device["capacity"]]:
        assert re.fullmatch(r"([a-z0-9.-]+/)?[A-Za-z_][A-Za-z0-9_]{0,31}", name)
    for value in attributes.values():
        assert len(value) == 1 and all(len(str(v)) <= 64 for v in value.values())


def test_uuids_are_nvml_shaped_stable_and_distinct() -> None:
    first = resourceslices.gpu_uuid("node-000", 0)
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", first)
    assert first == resourceslices.gpu_uuid("node-000", 0)
    uuids = {resourceslices.gpu_uuid(f"node-{n:03d}", i) for n in range(0, 8, 2) for i in range(8)}
    assert len(uuids) == 32


def test_device_classes_select_as_nvidias_chart_does() -> None:
    classes = {c["metadata"]["name"]: c for c in resourceslices.device_classes()}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        assert classes[name]["apiVersion"] == "resource.k8s.io/v1"
        assert classes[name]["spec"]["selectors"] == [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com'"
                    f" && device.attributes['gpu.nvidia.com'].type == '{kind}'"
                }
            }
        ]


def test_the_mig_node_s_slices_and_gpus_are_numbered_as_slurm_numbers_them() -> None:
    """Issue 23: GPU 0 of the MIG node is 7 slices of 1g.10gb (Slurm's indices 0-6), GPUs 1-7 whole
    (7-13), in gres.conf's order; its slice says the same, so both sides agree."""
    layout = config.gpu_gres(config.MIG_NODE)
    assert config.gres_string(config.MIG_NODE) == "gpu:1g.10gb:7,gpu:h100:7"
    devices = resourceslices.devices("node-006", layout)
    assert [d["attributes"]["index"]["int"] for d in devices] == list(range(14))
    assert [d["attributes"]["type"]["string"] for d in devices] == ["mig"] * 7 + ["gpu"] * 7
    assert devices[0]["name"] == "gpu-0-mig-1g10gb-19-0" and devices[7]["name"] == "gpu-1"
    assert {d["attributes"]["parentUUID"]["string"] for d in devices[:7]} == {
        resourceslices.gpu_uuid("node-006", 0)
    }
    cfg = DraConfig(product_types={config.GPU_PRODUCT_NAME: config.GPU_GRES_TYPE})
    numbered = slices.node_devices("node-006", [resourceslices.resource_slice("node-006", layout)], cfg)
    assert not isinstance(numbered, str)
    assert slices.agreement(numbered, gres.parse_gres(config.gres_string(config.MIG_NODE))).agree


def test_gres_conf_lists_the_mig_slices_before_the_whole_gpus() -> None:
    conf = slurm.gres_conf(StackConfig.from_env())
    lines = [line for line in conf.splitlines() if line.startswith("NodeName=gpu-006 ")]
    assert len(lines) == 2
    assert "Type=1g.10gb" in lines[0] and lines[0].endswith("/gpu-006/nvidia-cap[0-6]")
    assert "Type=h100" in lines[1] and lines[1].endswith("/gpu-006/nvidia[1-7]")
