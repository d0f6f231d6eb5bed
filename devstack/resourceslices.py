"""The lab's DRA objects: the ResourceSlice each GPU node would have, and NVIDIA's DeviceClasses.

kwok nodes have no GPUs and no DRA driver, so the lab publishes what NVIDIA's driver
(gpu.nvidia.com) would, from the same facts gres.conf is written from (devstack.slurm.gres_conf):
per GPU node one slice, its pool named after the Node, a device `gpu-<i>` per GPU with the `index`
attribute equal to Slurm's GRES index (gres.conf lists /dev/nvidia0..7 in order, so file i is
index i) and the identity and memory of a real H100 (lab/GPU.md); the shard node's GPUs are
sharable, each publishing as many `shares` as gres.conf gives it shards, and the MPS node's as
much `mps` as gres.conf gives it MPS. `resource.kubernetes.io/pciBusID`
follows the same order, so numbering by bus (what the driver's newer releases leave Tandem) agrees.
"""

from __future__ import annotations

import uuid
from typing import Any

from devstack import config
from tandem.dra.claims import SHARE_CAPACITY, SHARED_GRES
from tandem.keys import GPU_RESOURCE

DRIVER = "gpu.nvidia.com"
# Attribute names without a domain are the driver's own (gpu.nvidia.com/<name>).
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
API_VERSION = "resource.k8s.io/v1"
# A fixed namespace for the lab's GPU UUIDs: the same node and index always get the same one.
_UUIDS = uuid.UUID("6a1b3c5e-7d2f-4e8a-9b0c-1d2e3f405162")


def gpu_uuid(node: str, index: int) -> str:
    """NVML's form (`GPU-<uuid>`), stable per node and index."""
    return f"GPU-{uuid.uuid5(_UUIDS, f'{node}/{index}')}"


def pci_bus_id(index: int) -> str:
    # Ascending with the index, as on a real board where NVML's index follows the bus.
    return f"0000:{0x18 + 0x10 * index:02x}:00.0"


def gpu_device(
    node: str, minor: int, index: int | None = None, shares: int = 0, capacity: str = SHARE_CAPACITY
) -> dict[str, Any]:
    """GPU `minor` (/dev/nvidia<minor>), whose Slurm index is `index` (the minor by default: a
    node whose GPUs are all whole lists them in order). With `shares`, a GPU several claims may
    share (KEP-5075 consumable capacity), `shares` of `capacity` in all: as many as Slurm's shards
    (or MPS) of it."""
    shared: dict[str, Any] = {}
    if shares:
        shared = {
            "allowMultipleAllocations": True,
            "capacity": {
                "memory": {"value": f"{config.GPU_MEMORY_MIB}Mi"},
                capacity: {"value": str(shares)},
            },
        }
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": minor if index is None else index},
            "uuid": {"string": gpu_uuid(node, minor)},
            "productName": {"string": config.GPU_PRODUCT_NAME},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            PCI_BUS_ID: {"string": pci_bus_id(minor)},
        },
        "capacity": {"memory": {"value": f"{config.GPU_MEMORY_MIB}Mi"}},
        **shared,
    }


def mig_device(node: str, parent: int, number: int, index: int) -> dict[str, Any]:
    """MIG slice `number` of GPU `parent`, of the lab's profile, Slurm index `index`: named as
    NVIDIA's driver names a MIG device (`gpu-<parent>-mig-<profile>-<profile id>-<n>`)."""
    profile = config.MIG_PROFILE
    return {
        "name": f"gpu-{parent}-mig-{profile.replace('.', '')}-19-{number}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "index": {"int": index},
            "uuid": {"string": f"MIG-{uuid.uuid5(_UUIDS, f'{node}/{parent}/{number}')}"},
            "parentUUID": {"string": gpu_uuid(node, parent)},
            "productName": {"string": config.GPU_PRODUCT_NAME},
        },
        "capacity": {"memory": {"value": f"{config.MIG_MEMORY_MIB}Mi"}},
    }


def devices(
    node: str, layout: tuple[config.GpuGres, ...], shares: int = 0, capacity: str = SHARE_CAPACITY
) -> list[dict[str, Any]]:
    """The devices of a node whose GPUs Slurm counts as `layout` (config.gpu_gres), each with the
    index Slurm gives it: records in order, each record's files in order; each whole GPU sharable
    as `shares` of `capacity` when given (Slurm's shards, or MPS, of it)."""
    found: list[dict[str, Any]] = []
    for g in layout:
        for n in range(g.count):
            index = len(found)
            found.append(
                mig_device(node, 0, n, index)
                if g.mig
                else gpu_device(node, g.first + n, index, shares, capacity)
            )
    return found


def resource_slice(
    node: str,
    layout: tuple[config.GpuGres, ...] | None = None,
    gpus: int | None = None,
    shares: int = 0,
    capacity: str = SHARE_CAPACITY,
) -> dict[str, Any]:
    """The one slice of a GPU Node's pool (generation 1 of 1 slice): its devices as `layout`
    (default: 8 whole H100s), the first `gpus` of them when given (a slice short of Slurm's), each
    GPU sharable as `shares` of `capacity` when given."""
    listed = devices(node, layout if layout is not None else config.gpu_gres(0), shares, capacity)[:gpus]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": listed,
        },
    }


def lab_slice(index: int, gpus: int | None = None) -> dict[str, Any]:
    """The slice the lab publishes for its GPU node `index` (the first `gpus` devices when given):
    its GPUs sharable as Slurm shares them, by shard or by MPS."""
    shared = config.shared_gres(index)
    name, count = shared[0] if shared else ("shard", 0)
    return resource_slice(
        config.kube_node_name(index),
        config.gpu_gres(index),
        gpus,
        shares=count // config.GPUS_PER_NODE,
        capacity=next(c for c, gres in SHARED_GRES.items() if gres == name),
    )


def resource_slices(nodes: int) -> list[dict[str, Any]]:
    """A slice for every GPU node of a lab of `nodes` nodes, on its Kubernetes Node's name."""
    return [lab_slice(i) for i in range(nodes) if config.is_gpu_node(i)]


def device_classes() -> list[dict[str, Any]]:
    """NVIDIA's two GPU DeviceClasses, with the selectors its chart installs
    (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-{gpu,mig}.yaml), and, as its chart
    sets on the GPU class, `extendedResourceName: nvidia.com/gpu`: a Node without the device
    plugin's nvidia.com/gpu serves it through DRA (the lab's Nodes all have it, but a test takes it
    away from one)."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}'"
                            f" && device.attributes['{DRIVER}'].type == '{kind}'"
                        }
                    }
                ],
                **({"extendedResourceName": GPU_RESOURCE} if kind == "gpu" else {}),
            },
        }
        for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"))
    ]
