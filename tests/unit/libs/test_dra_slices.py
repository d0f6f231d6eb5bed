"""A node's ResourceSlices against its Slurm GRES: the device behind each Slurm index, and a one-line
difference when the two sides disagree (count, type, index)."""

from __future__ import annotations

from typing import Any

import pytest

from devstack import config, resourceslices
from tandem.dra.claims import DraConfig
from tandem.dra.gres import parse_gres
from tandem.dra.slices import (
    MAX_DEVICES,
    NodeDevices,
    SlicedDevice,
    agreement,
    node_devices,
    slim_slice,
)

H100 = "NVIDIA H100 80GB HBM3"
CFG = DraConfig(product_types={H100: "h100"})
NODE = "node-000"


def gpu(i: int, *, index: int | None = None, bus: str | None = None, **attrs: Any) -> dict[str, Any]:
    """A whole GPU as NVIDIA's driver publishes it: with `index` (up to v25.3, the lab) or only
    its PCI bus (since v25.8, named after its minor number)."""
    attributes: dict[str, Any] = {"type": {"string": "gpu"}, "productName": {"string": H100}}
    if index is not None:
        attributes["index"] = {"int": index}
    if bus is not None:
        attributes["resource.kubernetes.io/pciBusID"] = {"string": bus}
    attributes.update(attrs)
    return {"name": f"gpu-{i}", "attributes": attributes, "capacity": {"memory": {"value": "81559Mi"}}}


def mig(parent: int, profile: str, start: int, index: int | None = None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "mig"},
        "profile": {"string": profile},
        "productName": {"string": H100},
    }
    if index is not None:
        attributes["index"] = {"int": index}
    return {"name": f"gpu-{parent}-mig-{profile.replace('.', '')}-19-{start}", "attributes": attributes}


def pool(
    *devices: dict[str, Any],
    node: str = NODE,
    generation: int = 1,
    count: int = 1,
    driver: str = "gpu.nvidia.com",
    pool_name: str | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{driver}-{generation}"},
        "spec": {
            "driver": driver,
            "pool": {"name": pool_name or node, "generation": generation, "resourceSliceCount": count},
            "nodeName": node,
            "devices": list(devices),
        },
    }


def indexed(n: int = 8) -> list[dict[str, Any]]:
    return [pool(*(gpu(i, index=i) for i in range(n)))]


def agree(slices: list[dict[str, Any]], gres: str, used: str = "") -> str:
    got = agreement(node_devices(NODE, slices, CFG), parse_gres(gres), parse_gres(used)).difference
    # What the informers keep of a slice (slim_slice) says the same, in every row of every table.
    slim = [slim_slice(s) if isinstance(s, dict) else s for s in slices]
    assert agreement(node_devices(NODE, slim, CFG), parse_gres(gres), parse_gres(used)).difference == got
    return got


def test_the_lab_slice_agrees_with_the_lab_gres_conf() -> None:
    slices = resourceslices.resource_slices(4)
    assert [s["spec"]["nodeName"] for s in slices] == [config.kube_node_name(0), config.kube_node_name(2)]
    got = agreement(
        node_devices(config.kube_node_name(2), slices, CFG),
        parse_gres(f"gpu:{config.GPU_GRES_TYPE}:{config.GPUS_PER_NODE}(S:0-1)"),
        parse_gres("gpu:h100:2(IDX:0-1)"),
    )
    assert got.agree, got.difference
    assert got.devices is not None
    assert [(d.name, d.index) for d in got.devices.devices] == [(f"gpu-{i}", i) for i in range(8)]
    assert (got.devices.pool, got.devices.driver) == ("node-002", "gpu.nvidia.com")


@pytest.mark.parametrize(
    ("slices", "gres", "used"),
    [
        (indexed(), "gpu:h100:8(S:0-1)", ""),
        (indexed(), "gpu:h100:8(S:0-1)", "gpu:h100:3(IDX:0-1,7)"),
        (indexed(), "gpu:h100:8", "gpu:h100:0(IDX:N/A)"),
        # The driver since v25.8: no index, names after minors; Slurm (AutoDetect=nvml) numbers by bus.
        (
            [pool(*(gpu(7 - i, bus=f"0000:{0x18 + 0x10 * i:02x}:00.0") for i in range(8)))],
            "gpu:h100:8(S:0-1)",
            "",
        ),
        # A pool split in slices (the driver's one-slice-per-GPU layout), counter set first.
        (
            [pool(node=NODE, count=3), pool(gpu(0, index=0), count=3), pool(gpu(1, index=1), count=3)],
            "gpu:h100:2",
            "",
        ),
        # A pool being republished: the older generation is ignored.
        ([pool(gpu(0, index=5), generation=1), pool(gpu(0, index=0), generation=2)], "gpu:h100:1", ""),
        # Other drivers' and other nodes' slices are not this node's GPUs.
        (
            [
                *indexed(2),
                pool(gpu(9, index=9), driver="nic.example.com"),
                pool(gpu(9, index=9), node="node-001"),
            ],
            "gpu:h100:2",
            "",
        ),
        # vfio passthrough devices are not GPUs Slurm shares.
        (
            [pool(gpu(0, index=0), {"name": "gpu-vfio-0", "attributes": {"type": {"string": "vfio"}}})],
            "gpu:h100:1",
            "",
        ),
        # MIG slices the lab numbers like Slurm; gres_used tells which index is which type.
        (
            [pool(gpu(0, index=0), mig(1, "1g.10gb", 0, index=1), mig(1, "1g.10gb", 1, index=2))],
            "gpu:h100:1(S:0),gpu:1g.10gb:2(S:0)",
            "gpu:h100:1(IDX:0),gpu:1g.10gb:1(IDX:2)",
        ),
        # Partitions the driver offers for a GPU Slurm counts whole: unnumbered, not Slurm's.
        ([pool(gpu(0, index=0), mig(0, "1g.10gb", 0), mig(0, "1g.10gb", 1))], "gpu:h100:1", ""),
        # shard and other GRES are not devices of their own.
        (indexed(2), "gpu:h100:2,shard:8", ""),
    ],
)
def test_agreeing_nodes(slices: list[dict[str, Any]], gres: str, used: str) -> None:
    assert agree(slices, gres, used) == ""


@pytest.mark.parametrize(
    ("slices", "gres", "used", "difference"),
    [
        ([], "gpu:h100:8", "", "no ResourceSlice of gpu.nvidia.com for Node node-000"),
        (
            indexed(),
            "gpu:h100:7(S:0-1)",
            "",
            "Slurm has 7 gpu:h100, the ResourceSlice has 8 devices of that type",
        ),
        (indexed(7), "gpu:h100:8", "", "Slurm has 8 gpu:h100, the ResourceSlice has 7 devices of that type"),
        (
            [pool(*(gpu(i, index=i) for i in (0, 1, 2, 3, 4, 5, 6, 8)))],
            "gpu:h100:8",
            "",
            "Slurm has gpu:h100 index 7, the ResourceSlice has no device with index 7",
        ),
        (
            indexed(2),
            "gpu:a100:2",
            "",
            "Slurm has 2 gpu:a100, the ResourceSlice has 0 devices of that type",
        ),
        (indexed(2), "gpu:2", "", "Slurm's GPUs have no type"),
        (
            [pool(gpu(0, index=0), mig(1, "1g.10gb", 0, index=1), mig(1, "1g.10gb", 1, index=2))],
            "gpu:h100:1,gpu:1g.10gb:2",
            "gpu:1g.10gb:1(IDX:0)",
            "Slurm has gpu:1g.10gb index 0, the ResourceSlice's gpu-0 with index 0 is h100",
        ),
        (
            [pool(gpu(0, index=0), mig(0, "1g.10gb", 0), mig(0, "1g.10gb", 1))],
            "gpu:1g.10gb:2",
            "",
            "Slurm has 2 gpu:1g.10gb, the ResourceSlice has 0 devices of that type"
            " (its MIG devices carry no index)",
        ),
        (
            [pool(gpu(0, index=0), count=2)],
            "gpu:h100:1",
            "",
            "the pool of Node node-000 has 1 of its 2 ResourceSlices (generation 1)",
        ),
        (
            [pool(gpu(0, index=0)), pool(gpu(1, index=1), pool_name="elsewhere")],
            "gpu:h100:2",
            "",
            "name 2 pools: elsewhere, node-000",
        ),
        ([pool(gpu(0, index=0), gpu(1, index=0))], "gpu:h100:2", "", "gpu-0 and gpu-1 both have index 0"),
        (
            [pool(gpu(0, index=0), gpu(1))],
            "gpu:h100:2",
            "",
            "some GPUs have an index attribute and some do not",
        ),
        (
            [pool(gpu(0))],
            "gpu:h100:1",
            "",
            "device gpu-0 has neither an index nor a resource.kubernetes.io/pciBusID",
        ),
        (
            [pool(gpu(0, productName={"string": "NVIDIA B200"}))],
            "gpu:h100:1",
            "",
            "device gpu-0 has productName 'NVIDIA B200', which maps to no Slurm GRES type",
        ),
        (
            [pool(mig(0, "1g.10gb+me", 0, index=0))],
            "gpu:h100:1",
            "",
            "device gpu-0-mig-1g10gb+me-19-0 has MIG profile '1g.10gb+me', which maps to no Slurm GRES type",
        ),
        ([pool(gpu(0, index=-1))], "gpu:h100:1", "", "device gpu-0 has index -1, not an int from 0 to 4095"),
        ([pool(gpu(0, index=True))], "gpu:h100:1", "", "has index True"),
        ([pool(gpu(0, index={"x": 1}))], "gpu:h100:1", "", "has index"),  # type: ignore[arg-type]
        ([pool("not a device")], "gpu:h100:1", "", "a ResourceSlice device is not an object"),  # type: ignore[arg-type]
        (
            [pool(*(gpu(i, index=i % 4096) for i in range(MAX_DEVICES + 1)))],
            "gpu:h100:1",
            "",
            f"publishes {MAX_DEVICES + 1} devices, more than {MAX_DEVICES}",
        ),
        ([pool(gpu(i, index=i), count=65) for i in range(65)], "gpu:h100:1", "", "more than 64"),
    ],
)
def test_disagreeing_nodes_say_how_in_one_line(
    slices: list[dict[str, Any]], gres: str, used: str, difference: str
) -> None:
    got = agree(slices, gres, used)
    assert difference in got
    assert "\n" not in got


def test_garbage_slices_are_skipped_or_refused_not_crashed_on() -> None:
    junk: list[Any] = [{}, {"spec": None}, {"spec": {"driver": "gpu.nvidia.com"}}, "x", None]
    assert agree([*junk, *indexed(1)], "gpu:h100:1") == ""


def test_tainted_devices_are_marked_for_the_allocator() -> None:
    slices = [pool(gpu(0, index=0), {**gpu(1, index=1), "taints": [{"key": "k", "effect": "NoSchedule"}]})]
    devices = node_devices(NODE, slices, CFG)
    assert isinstance(devices, NodeDevices)
    assert [d.tainted for d in devices.devices] == [False, True]


def test_attributes_may_be_written_qualified() -> None:
    qualified = {
        "name": "gpu-0",
        "attributes": {
            "gpu.nvidia.com/type": {"string": "gpu"},
            "gpu.nvidia.com/productName": {"string": H100},
            "gpu.nvidia.com/index": {"int": 0},
        },
    }
    devices = node_devices(NODE, [pool(qualified)], CFG)
    assert isinstance(devices, NodeDevices)
    assert devices.devices == (SlicedDevice("gpu-0", "gpu", "h100", 0),)


def test_an_informer_keeps_a_fraction_of_a_drivers_slice() -> None:
    import json

    full = resourceslices.resource_slice(config.kube_node_name(0), config.gpu_gres(0))
    assert len(json.dumps(slim_slice(full))) < 0.6 * len(json.dumps(full))


def test_the_lab_shard_node_publishes_slurms_shards_of_each_gpu_as_shares() -> None:
    node = config.kube_node_name(config.SHARD_NODE)
    (shared,) = [s for s in resourceslices.resource_slices(8) if s["spec"]["nodeName"] == node]
    for published in (shared, slim_slice(shared)):
        devices = node_devices(node, [published], CFG)
        assert isinstance(devices, NodeDevices)
        assert {d.shares for d in devices.devices} == {config.SHARDS_PER_GPU}
    other = node_devices(config.kube_node_name(0), resourceslices.resource_slices(1), CFG)
    assert isinstance(other, NodeDevices) and {d.shares for d in other.devices} == {0}


@pytest.mark.parametrize(
    ("device", "says"),
    [
        ({"allowMultipleAllocations": True, "capacity": {"shares": {"value": "1.5"}}}, "not a whole number"),
        ({"allowMultipleAllocations": True, "capacity": {"shares": {"value": True}}}, "not a whole number"),
    ],
)
def test_bad_shares_refuse_the_node(device: dict[str, Any], says: str) -> None:
    published = pool({**gpu(0, index=0), **device})
    got = node_devices(NODE, [published], CFG)
    assert isinstance(got, str) and says in got


def test_shares_without_multiple_allocations_are_not_shares() -> None:
    got = node_devices(NODE, [pool({**gpu(0, index=0), "capacity": {"shares": {"value": "16"}}})], CFG)
    assert isinstance(got, NodeDevices) and got.devices[0].shares == 0


def _shared(*shares: int) -> list[dict[str, Any]]:
    return [
        pool(
            *(
                {
                    **gpu(i, index=i),
                    "allowMultipleAllocations": True,
                    "capacity": {"shares": {"value": str(n)}},
                }
                for i, n in enumerate(shares)
            )
        )
    ]


@pytest.mark.parametrize(
    ("slices", "gres", "used", "says"),
    [
        (_shared(16, 16), "gpu:h100:2,shard:h100:32", "shard:h100:0(0/16,0/16)", ""),
        (_shared(16, 16), "gpu:h100:2,shard:h100:32", "", ""),  # no per-GPU detail: the totals
        (_shared(16, 16), "gpu:h100:2", "", ""),  # Slurm shares none: whole GPUs agree
        (indexed(2), "gpu:h100:2,shard:h100:32", "", ""),  # the driver shares none: likewise
        (
            _shared(16, 8),
            "gpu:h100:2,shard:h100:32",
            "shard:h100:3(3/16,0/16)",
            "Slurm has 16 shards of GPU 1, the ResourceSlice's gpu-1 publishes 8 shares",
        ),
        (
            _shared(16, 16),
            "gpu:h100:2,shard:h100:16",
            "",
            "Slurm has 16 shards, the ResourceSlice publishes 32 shares",
        ),
    ],
)
def test_shares_agree_with_slurms_shards_gpu_by_gpu(
    slices: list[dict[str, Any]], gres: str, used: str, says: str
) -> None:
    got = agreement(node_devices(NODE, slices, CFG), parse_gres(gres), parse_gres(used))
    assert got.difference == says


def test_the_lab_mps_node_publishes_slurms_mps_of_each_gpu_and_agrees_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "MPS_NODE", 2)
    node = config.kube_node_name(2)
    (shared,) = [s for s in resourceslices.resource_slices(8) if s["spec"]["nodeName"] == node]
    for published in (shared, slim_slice(shared)):
        devices = node_devices(node, [published], CFG)
        assert isinstance(devices, NodeDevices)
        assert {(d.capacity, d.shares) for d in devices.devices} == {("mps", config.MPS_PER_GPU)}
    gres = parse_gres(config.gres_string(2))
    assert agreement(node_devices(node, [shared], CFG), gres).agree


def _mps(*counts: int) -> list[dict[str, Any]]:
    return [
        pool(
            *(
                {**gpu(i, index=i), "allowMultipleAllocations": True, "capacity": {"mps": {"value": str(n)}}}
                for i, n in enumerate(counts)
            )
        )
    ]


@pytest.mark.parametrize(
    ("slices", "gres", "used", "says"),
    [
        (_mps(100, 100), "gpu:h100:2,mps:h100:200", "mps:h100:30(30/100,0/100)", ""),
        (_mps(100, 100), "gpu:h100:2,mps:h100:200", "", ""),
        (
            _mps(100, 50),
            "gpu:h100:2,mps:h100:200",
            "mps:h100:0(0/100,0/100)",
            "Slurm has 100 MPS of GPU 1, the ResourceSlice's gpu-1 publishes 50 mps",
        ),
        (
            _mps(100, 100),
            "gpu:h100:2,mps:h100:100",
            "",
            "Slurm has 100 MPS, the ResourceSlice publishes 200 mps",
        ),
        # Slurm shards the GPUs the driver shares by MPS: nothing of one counts the other.
        (_mps(100, 100), "gpu:h100:2,shard:h100:32", "", ""),
        (
            _mps(100, 100),
            "gpu:h100:2,shard:h100:32,mps:h100:200",
            "",
            "Slurm shares the node's GPUs as both mps and shard, counting neither against the other",
        ),
    ],
)
def test_mps_agrees_with_slurms_mps_gpu_by_gpu(
    slices: list[dict[str, Any]], gres: str, used: str, says: str
) -> None:
    assert agree(slices, gres, used) == says


def test_a_gpu_publishing_both_shares_and_mps_refuses_the_node() -> None:
    both = {
        "allowMultipleAllocations": True,
        "capacity": {"shares": {"value": "16"}, "mps": {"value": "100"}},
    }
    got = node_devices(NODE, [pool({**gpu(0, index=0), **both})], CFG)
    assert isinstance(got, str)
    assert "publishes both shares and mps capacity: Slurm counts neither against the other" in got
