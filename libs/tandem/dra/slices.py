"""A node's ResourceSlices against its Slurm GRES: the device behind each Slurm GPU index.

Slurm numbers a node's GPUs (and MIG slices) by their bit in the node's GRES bitmap, the `IDX:` of
`scontrol show job -d`; NVIDIA's DRA driver publishes each GPU as a device `gpu-<n>`. Tandem can
only give a claim the devices Slurm chose when both sides describe the same GPUs, so it checks
(count, GRES type, index) and refuses the node with a one-line difference otherwise.

Which device is Slurm's index i:
- the device's int attribute `index`: what NVIDIA's driver published up to v25.3 (the NVML index),
  and what the lab publishes from gres.conf;
- else, for whole GPUs, the device's rank by its `resource.kubernetes.io/pciBusID` attribute: the
  driver since v25.8 names devices after the minor number and publishes no index, and Slurm's
  AutoDetect=nvml orders GPUs by their NVML links, i.e. by PCI bus ID (src/plugins/gres/gpu/
  gres_gpu.c, _sort_gpu_by_links_order), which is also NVML's index order;
- a MIG slice without an `index` (the driver's partitionable devices: every placement a GPU could
  be split into) is left unnumbered: nothing it publishes says which of Slurm's slices it is. The
  node still agrees when Slurm counts that GPU whole (the whole device consumes all its counters,
  so no partition of it can be handed out beside it); it disagrees when Slurm has MIG types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tandem.dra.claims import DRIVER, MAX_SHARES, SHARED_GRES, DraConfig, shared_word
from tandem.dra.gres import MAX_INDEX, Gres
from tandem.dra.shape import at, items, obj
from tandem.dra.taints import DeviceTaint, TaintRule, device_taints, rule_taints

PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
# Kubernetes' bounds: ResourceSliceMaxDevices per slice; a driver splits a node's pool into a few.
MAX_SLICES = 64
MAX_DEVICES = 1024

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class SlicedDevice:
    """A GPU or MIG slice as the ResourceSlice publishes it, typed and numbered the Slurm way."""

    name: str
    kind: str  # "gpu" or "mig"
    gres_type: str
    index: int
    # Its taints, from the slice (and from DeviceTaintRules, where the reader adds them).
    taints: tuple[DeviceTaint, ...] = ()
    # A GPU several claims may share (allowMultipleAllocations): its `shares` capacity, which Slurm
    # counts as the GPU's shards, or its `mps` capacity, Slurm's MPS count of it (`capacity` says
    # which); 0 for a device allocated whole only.
    shares: int = 0
    capacity: str = ""

    @property
    def tainted(self) -> bool:
        """A taint keeps it from claims (NoSchedule or NoExecute; `None` is informational)."""
        return any(t.effective for t in self.taints)


@dataclass(frozen=True)
class NodeDevices:
    """The node's pool of NVIDIA devices that Slurm also knows, by (GRES type, Slurm index)."""

    node: str
    driver: str
    pool: str
    devices: tuple[SlicedDevice, ...]
    # MIG devices with no index: published, but not ones Tandem can match to Slurm's.
    unnumbered: tuple[str, ...] = ()

    def by_index(self) -> dict[int, SlicedDevice]:
        return {d.index: d for d in self.devices}


@dataclass(frozen=True)
class Agreement:
    """The node's devices when both sides agree; else `difference` says what differs, in one line."""

    devices: NodeDevices | None
    difference: str = ""

    @property
    def agree(self) -> bool:
        return not self.difference


def node_devices(
    node: str, slices: Sequence[Obj], cfg: DraConfig, rules: Sequence[TaintRule] = ()
) -> NodeDevices | str:
    """The NVIDIA devices of Kubernetes Node `node` from all ResourceSlices (of any driver, any
    node: the others are skipped), numbered as Slurm numbers them; else why they cannot be. Each
    carries its slice's taints and those of the DeviceTaintRules (`rules`) that select it."""
    mine = [s for s in slices if _spec(s).get("driver") == DRIVER and _spec(s).get("nodeName") == node]
    if not mine:
        return f"no ResourceSlice of {DRIVER} for Node {node}"
    if len(mine) > MAX_SLICES:
        return f"{len(mine)} ResourceSlices of {DRIVER} for Node {node}, more than {MAX_SLICES}"
    pools = {str(obj(_spec(s).get("pool")).get("name") or "") for s in mine}
    if len(pools) != 1:
        return f"the ResourceSlices of Node {node} name {len(pools)} pools: {', '.join(sorted(pools))}"
    # A pool being republished has slices of two generations: only the newest counts, once whole.
    generation = max(_pool_int(s, "generation") for s in mine)
    current = [s for s in mine if _pool_int(s, "generation") == generation]
    expected = _pool_int(current[0], "resourceSliceCount")
    if len(current) != expected:
        return (
            f"the pool of Node {node} has {len(current)} of its {expected} ResourceSlices"
            f" (generation {generation})"
        )
    raw = [d for s in current for d in items(_spec(s).get("devices"))]
    if len(raw) > MAX_DEVICES:
        return f"Node {node} publishes {len(raw)} devices, more than {MAX_DEVICES}"
    numbered = _numbered(raw, cfg)
    if isinstance(numbered, str):
        return numbered
    devices, unnumbered = numbered
    pool = pools.pop()
    if rules:
        devices = tuple(
            replace(d, taints=tuple(sorted({*d.taints, *rule_taints(rules, DRIVER, pool, d.name)})))
            for d in devices
        )
    return NodeDevices(node=node, driver=DRIVER, pool=pool, devices=devices, unnumbered=unnumbered)


def agreement(
    devices: NodeDevices | str, node_gres: Sequence[Gres], used_gres: Sequence[Gres] = ()
) -> Agreement:
    """Do the node's devices and Slurm's GPU GRES agree? `node_gres`: the node's `gres` parsed
    (types and counts); `used_gres`: its `gres_used` (the indices of each type in use), which is
    how a node of several types tells which index is which type."""
    if isinstance(devices, str):
        return Agreement(None, devices)
    gpus = [g for g in node_gres if g.name == "gpu"]
    untyped = [g for g in gpus if not g.type and g.count]
    if untyped:
        return Agreement(
            None, "Slurm's GPUs have no type (gres.conf Type=): Tandem cannot match them to devices"
        )
    slurm_counts = {g.type: g.count for g in gpus if g.count}
    dra_counts: dict[str, int] = {}
    for d in devices.devices:
        dra_counts[d.gres_type] = dra_counts.get(d.gres_type, 0) + 1
    for gres_type in sorted(set(slurm_counts) | set(dra_counts)):
        slurm, dra = slurm_counts.get(gres_type, 0), dra_counts.get(gres_type, 0)
        if slurm != dra:
            why = " (its MIG devices carry no index)" if devices.unnumbered and slurm > dra else ""
            return Agreement(
                None,
                f"Slurm has {slurm} gpu:{gres_type}, the ResourceSlice has {dra} devices of that type{why}",
            )
    total = sum(slurm_counts.values())
    by_index = devices.by_index()
    # One type: Slurm's indices 0..n-1 are all of it. Several: gres_used says which are which.
    known = {i: next(iter(slurm_counts)) for i in range(total)} if len(slurm_counts) == 1 else {}
    for g in used_gres:
        if g.name == "gpu":
            known.update({i: g.type for i in g.indices or ()})
    for index in range(total):
        known.setdefault(index, "")
    for index, gres_type in sorted(known.items()):
        device = by_index.get(index)
        named = f"gpu:{gres_type}" if gres_type else "a GPU"
        if device is None:
            return Agreement(
                None, f"Slurm has {named} index {index}, the ResourceSlice has no device with index {index}"
            )
        if gres_type and device.gres_type != gres_type:
            return Agreement(
                None,
                f"Slurm has {named} index {index}, the ResourceSlice's {device.name}"
                f" with index {index} is {device.gres_type}",
            )
    shares = _shares_differ(devices, node_gres, used_gres)
    return Agreement(None, shares) if shares else Agreement(devices)


def _shares_differ(devices: NodeDevices, node_gres: Sequence[Gres], used_gres: Sequence[Gres]) -> str:
    """Slurm's shards (or MPS) of each GPU against the shares (or mps) its device publishes ("" when
    they agree, or one side shares none): a device publishing more than Slurm counts would
    over-commit it."""
    shared = sorted({g.name for g in node_gres if g.name in SHARED_GRES.values() and g.count})
    if len(shared) > 1:
        # Slurm gives a GPU's shards and its MPS out independently (lab fact, issue 54).
        return (
            f"Slurm shares the node's GPUs as both {' and '.join(shared)}, counting neither against the other"
        )
    for capacity, name in SHARED_GRES.items():
        differ = _capacity_differs(devices, capacity, name, node_gres, used_gres)
        if differ:
            return differ
    return ""


def _capacity_differs(
    devices: NodeDevices, capacity: str, name: str, node_gres: Sequence[Gres], used_gres: Sequence[Gres]
) -> str:
    slurm_total = sum(g.count for g in node_gres if g.name == name)
    published = {d.index: d for d in devices.devices if d.shares and d.capacity == capacity}
    if not slurm_total or not published:
        # One side does not share: Slurm places no shard job where it has none, and a share claim
        # on a GPU not published as sharable is refused at its bind; whole GPUs still agree.
        return ""
    # gres_used says each GPU's total (`shard:h100:3(3/16,0/16,...)`); else only the node's.
    per_gpu = {s.index: s.total for g in used_gres if g.name == name for s in g.shares}
    if not per_gpu:
        dra_total = sum(d.shares for d in published.values())
        if dra_total != slurm_total:
            word = shared_word(name)
            return f"Slurm has {slurm_total} {word}, the ResourceSlice publishes {dra_total} {capacity}"
        return ""
    for index in sorted(set(per_gpu) | set(published)):
        slurm, device = per_gpu.get(index, 0), published.get(index)
        if slurm != (device.shares if device else 0):
            has = (
                f"{device.name} publishes {device.shares}" if device else "device of that index publishes no"
            )
            return (
                f"Slurm has {slurm} {shared_word(name)} of GPU {index}, the ResourceSlice's {has} {capacity}"
            )
    return ""


def _numbered(raw: Sequence[Any], cfg: DraConfig) -> tuple[tuple[SlicedDevice, ...], tuple[str, ...]] | str:
    typed: list[tuple[str, str, str, int | None, str, tuple[DeviceTaint, ...]]] = []
    by_name: dict[str, tuple[str, int]] = {}
    for d in raw:
        if not isinstance(d, Mapping):
            return "a ResourceSlice device is not an object"
        name = str(d.get("name") or "")
        attrs = obj(d.get("attributes"))
        kind = _string(attrs, "type")
        if kind not in ("gpu", "mig"):
            continue  # vfio passthrough and whatever comes next: not GPUs Slurm shares
        if kind == "gpu":
            product = _string(attrs, "productName")
            gres_type = cfg.product_types.get(product, "")
            if not gres_type:
                return f"device {name} has productName {product!r}, which maps to no Slurm GRES type"
        else:
            profile = _string(attrs, "profile")
            gres_type = cfg.mig_type(profile)
            if not gres_type:
                return f"device {name} has MIG profile {profile!r}, which maps to no Slurm GRES type"
        index = _index(attrs)
        if isinstance(index, str):
            return f"device {name} {index}"
        shared = _shares(d, kind)
        if isinstance(shared, str):
            return f"device {name} {shared}"
        by_name[name] = shared
        typed.append((name, kind, gres_type, index, _string(attrs, PCI_BUS_ID), device_taints(d)))
    ranked = _pci_ranks(typed)
    if isinstance(ranked, str):
        return ranked
    devices: list[SlicedDevice] = []
    unnumbered: list[str] = []
    seen: dict[int, str] = {}
    for name, kind, gres_type, index, _, taints in typed:
        if index is None:
            if kind == "mig":
                unnumbered.append(name)
                continue
            index = ranked[name]
        if index in seen:
            return f"devices {seen[index]} and {name} both have index {index}"
        seen[index] = name
        capacity, shares = by_name[name]
        devices.append(
            SlicedDevice(
                name=name,
                kind=kind,
                gres_type=gres_type,
                index=index,
                taints=taints,
                shares=shares,
                capacity=capacity,
            )
        )
    return tuple(sorted(devices, key=lambda d: d.index)), tuple(unnumbered)


def _shares(device: Obj, kind: str) -> tuple[str, int] | str:
    """Which shared capacity a sharable GPU publishes and how much ("", 0: not sharable); else what
    is wrong with them."""
    if device.get("allowMultipleAllocations") is not True:
        return "", 0
    published = obj(device.get("capacity"))
    found = [c for c in SHARED_GRES if obj(published.get(c))]
    if not found:
        return "", 0  # shared some other way (time-slicing, memory): not by Slurm's shards
    if len(found) > 1:
        return f"publishes both {' and '.join(found)} capacity: Slurm counts neither against the other"
    (capacity,) = found
    value = obj(published[capacity]).get("value")
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    if not text.isdigit() or not 1 <= int(text) <= MAX_SHARES:
        return f"has {capacity} capacity {value!r}, not a whole number from 1 to {MAX_SHARES}"
    if kind != "gpu":
        return f"is a MIG slice with {capacity}: Slurm shares whole GPUs only"
    return capacity, int(text)


def _pci_ranks(
    typed: Sequence[tuple[str, str, str, int | None, str, tuple[DeviceTaint, ...]]],
) -> dict[str, int] | str:
    unindexed = [(bus, name) for name, kind, _, index, bus, _ in typed if kind == "gpu" and index is None]
    if not unindexed:
        return {}
    if len(unindexed) != len([t for t in typed if t[1] == "gpu"]):
        return "some GPUs have an index attribute and some do not: Tandem numbers a node's GPUs one way"
    missing = [name for bus, name in unindexed if not bus]
    if missing:
        return f"device {missing[0]} has neither an index nor a {PCI_BUS_ID} attribute"
    # The standard attribute is lower-case hex of fixed width: text order is bus order.
    return {
        name: rank for rank, (_, name) in enumerate(sorted((bus.lower(), name) for bus, name in unindexed))
    }


# The device attributes node_devices reads, as the driver may write them (unqualified or not).
_READ_ATTRIBUTES = frozenset(
    name for a in ("type", "productName", "profile", "index") for name in (a, f"{DRIVER}/{a}")
) | {PCI_BUS_ID}


def slim_slice(resource_slice: Obj) -> dict[str, Any]:
    """What node_devices reads of a ResourceSlice, for an informer to keep (every GPU Node has
    one; a driver's slice carries a dozen attributes and capacities per device, most never read)."""
    meta, spec = obj(resource_slice.get("metadata")), _spec(resource_slice)
    devices: list[Any] = []
    for raw in items(spec.get("devices")):
        if not isinstance(raw, Mapping):
            devices.append(raw)  # node_devices refuses it, as it would the whole slice
            continue
        d = raw
        attrs = obj(d.get("attributes"))
        device: dict[str, Any] = {
            "name": d.get("name"),
            "attributes": {k: v for k, v in attrs.items() if k in _READ_ATTRIBUTES},
        }
        if d.get("taints"):
            device["taints"] = d["taints"]
        if d.get("allowMultipleAllocations") is True:
            device["allowMultipleAllocations"] = True
            published = obj(d.get("capacity"))
            shared = {c: published[c] for c in SHARED_GRES if published.get(c) is not None}
            if shared:
                device["capacity"] = shared
        devices.append(device)
    return {
        "apiVersion": resource_slice.get("apiVersion"),
        "kind": resource_slice.get("kind"),
        "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
        "spec": {
            "driver": spec.get("driver"),
            "nodeName": spec.get("nodeName"),
            "pool": spec.get("pool"),
            "devices": devices,
        },
    }


def _spec(s: Any) -> Obj:
    return obj(at(s, "spec"))


def _pool_int(s: Obj, key: str) -> int:
    value = obj(_spec(s).get("pool")).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _attribute(attrs: Obj, name: str) -> Any:
    # Unqualified names are in the driver's own domain; the same name may be written qualified.
    found = attrs.get(name)
    if found is None and "/" not in name:
        found = attrs.get(f"{DRIVER}/{name}")
    return obj(found)


def _string(attrs: Obj, name: str) -> str:
    value = _attribute(attrs, name).get("string")
    return value if isinstance(value, str) else ""


def _index(attrs: Obj) -> int | str | None:
    found = _attribute(attrs, "index")
    if not found:
        return None
    value = found.get("int")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INDEX:
        return f"has index {value!r}, not an int from 0 to {MAX_INDEX}"
    return value
