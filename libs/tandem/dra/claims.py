"""A Pod's GPU ResourceClaims -> the GPUs its placeholder job asks Slurm for, or why Tandem cannot.

Slurm allocates a job's GPUs as GRES (`gpu:<type>:<count>` per node), so a claim becomes a job
only when it says no more than a GRES does: how many devices, of one DeviceClass of NVIDIA's DRA
driver (a whole GPU, or a MIG slice), of which product or MIG profile. Every other shape is
refused with a reason naming the field, never approximated: a claim that Slurm's allocation does
not satisfy would let Kubernetes and Slurm hand out the same GPU twice, which is what this feature
exists to prevent.

Selectors are read, not evaluated: only `&&`-joined equalities of the forms
    device.driver == "gpu.nvidia.com"
    device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"
    device.attributes["gpu.nvidia.com"].profile == "1g.10gb"        (mig.nvidia.com only)
    device.attributes["gpu.nvidia.com"].type == "gpu" | "mig"       (agreeing with the class)
each quoted with " or '. Anything else (memory comparisons, ||, other attributes) is refused.

A fraction of a GPU is a request of one gpu.nvidia.com device for part of its consumable capacity
(KEP-5075): `capacity.requests.shares: N`, N of the `shares` a sharable GPU publishes, becomes
Slurm's `gres/shard:N`; `capacity.requests.mps: N`, N of the `mps` it publishes, becomes
`gres/mps:N`. Slurm takes either from one GPU; the claim is then given the GPU of the index Slurm
chose, N of that capacity consumed (and, for MPS, the active thread percentage N makes of the
GPU's count, as the device configuration NVIDIA's driver reads).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tandem.dra import gres
from tandem.dra.shape import at, items, obj
from tandem.keys import GPU_RESOURCE

DRIVER = "gpu.nvidia.com"
# NVIDIA's DeviceClasses (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-*.yaml) ->
# the `type` attribute their selector requires.
DEVICE_CLASSES: Mapping[str, str] = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig"}

# Kubernetes' own bounds (k8s.io/api/resource/v1): CELSelectorExpressionMaxLength,
# DeviceSelectorsMaxSize, DeviceRequestsMaxSize and AllocationResultsMaxSize; a Pod lists at most
# 32 claims. A DeviceAttribute string is at most 64 characters.
MAX_CEL_LENGTH = 10 * 1024
MAX_SELECTORS = 32
MAX_REQUESTS = 32
MAX_DEVICES = 32
MAX_POD_CLAIMS = 32
MAX_ATTRIBUTE_VALUE = 64
# The consumable capacities of a sharable GPU device that count Slurm's shared GRES on it (the
# lab's DRA driver publishes them; gres.conf's `Name=shard Count=`, or `Name=mps Count=`, spread
# evenly over the GPUs) -> that GRES's name. Slurm counts neither against the other (lab fact,
# issue 54), so a device publishes one of them and a Pod asks for one.
SHARE_CAPACITY = "shares"
MPS_CAPACITY = "mps"
SHARED_GRES: Mapping[str, str] = {SHARE_CAPACITY: "shard", MPS_CAPACITY: "mps"}


def shared_word(gres_name: str) -> str:
    """How a message names a count of Slurm's shared GRES: "shards", "MPS"."""
    return {"shard": "shards", "mps": "MPS"}.get(gres_name, gres_name)


# Slurm counts shards per node in the thousands; one GPU's are far fewer.
MAX_SHARES = 1 << 20

_QUOTED = r"""(?P<{q}>["'])(?P<{v}>[^"'\\\x00-\x1f]{{0,{n}}})(?P={q})"""
_CLAUSE = re.compile(
    r"\s*(?:(?P<driver>device\.driver)"
    r"|device\.attributes\[" + _QUOTED.format(q="dq", v="domain", n=63) + r"\]"
    r"\.(?P<attr>[A-Za-z][A-Za-z0-9_]{0,31}))"
    r"\s*==\s*" + _QUOTED.format(q="vq", v="value", n=MAX_ATTRIBUTE_VALUE) + r"\s*"
)
_AND = re.compile(r"&&")
# Product names as NVML reports them ("NVIDIA H100 80GB HBM3"): printable, no separator of ours.
_PRODUCT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._()/+-]{0,63}")

Pod = Mapping[str, Any]
Obj = Mapping[str, Any]


@dataclass(frozen=True)
class DraConfig:
    # NVML product name (the `productName` attribute) -> Slurm GRES type.
    product_types: Mapping[str, str]
    # MIG profile (the `profile` attribute, "1g.10gb") -> Slurm GRES type; a profile not listed is
    # its own type when it is a valid one, as gres.conf names MIG types after their profile.
    mig_types: Mapping[str, str] = field(default_factory=dict)

    def mig_type(self, profile: str) -> str:
        if profile in self.mig_types:
            return self.mig_types[profile]
        return profile if gres.is_gres_type(profile) else ""


@dataclass(frozen=True)
class Refusal:
    """Why Tandem cannot ask Slurm for this: `where` names the object and field."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass(frozen=True)
class ClaimRequest:
    """One device request of one of the Pod's claims, as Slurm GRES."""

    pod_claim: str  # the entry's name in pod.spec.resourceClaims
    claim_name: str  # the ResourceClaim's name; "" while the controller has not made it yet
    request: str  # the request's name inside the claim (DeviceRequestAllocationResult.request)
    device_class: str
    kind: str  # "gpu" or "mig": the device type the class selects
    count: int
    gres_type: str  # "" when any GPU will do
    # Shares of one GPU (a Slurm shard or MPS count), when the request is for part of a GPU; count
    # is 1. `capacity` names which (SHARED_GRES's keys); "" for whole devices.
    shares: int = 0
    capacity: str = ""

    @property
    def share_gres(self) -> str:
        """The Slurm GRES its shares are ("shard", "mps"); "" for whole devices."""
        return SHARED_GRES.get(self.capacity, "")


@dataclass(frozen=True)
class PodGpus:
    """What the Pod's claims ask Slurm for; `refusals` says why Tandem cannot, `waiting` what it
    has not seen yet (a claim or template not in the cache; the decision waits, it is not refused)."""

    requests: tuple[ClaimRequest, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    waiting: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals and not self.waiting

    @property
    def count(self) -> int:
        """Whole devices (GPUs or MIG slices): what the job asks as `gpu` GRES."""
        return sum(r.count for r in self.requests if not r.shares)

    @property
    def shares(self) -> int:
        """Shares of one GPU: what the job asks as `shard` or `mps` GRES (Slurm takes them from one
        GPU)."""
        return sum(r.shares for r in self.requests)

    @property
    def capacity(self) -> str:
        """The capacity its shares are of (SHARED_GRES's keys): the one every request agrees on."""
        return next((r.capacity for r in self.requests if r.capacity), "")

    @property
    def gres_type(self) -> str:
        """The one GRES type every request agrees on ("" when none names one)."""
        return next((r.gres_type for r in self.requests if r.gres_type), "")

    @property
    def needs_whole_type(self) -> bool:
        """Whole GPUs of no product: the job must still name a GRES type, or Slurm may count MIG
        slices (a type of the same `gpu` GRES) as the GPUs it asked for; the type comes from the
        Nodes that would take the Pod (decide's)."""
        return bool(self.requests) and all(
            r.kind == "gpu" and not r.gres_type and not r.shares for r in self.requests
        )

    def message(self) -> str:
        """One line for a Warning Event; empty when nothing is refused."""
        return "; ".join(str(r) for r in self.refusals)


def parse_product_types(text: str) -> dict[str, str]:
    """`NVIDIA H100 80GB HBM3=h100,NVIDIA A100-SXM4-80GB=a100` -> {product name: GRES type}."""
    return gres.parse_type_map(
        text,
        what="GPU product",
        key="PRODUCT_NAME",
        key_ok=lambda name: _PRODUCT.fullmatch(name) is not None,
        key_is="an NVML product name",
        example="NVIDIA H100 80GB HBM3=h100",
    )


def dra_config(products: str) -> DraConfig:
    """The config from --gpu-products; ValueError naming the bad item."""
    return DraConfig(product_types=parse_product_types(products))


def pod_gpus(pod: Pod, claims: Mapping[str, Obj], templates: Mapping[str, Obj], cfg: DraConfig) -> PodGpus:
    """The GPUs a Pod's claims ask for. `claims` and `templates`: the Pod's namespace's
    ResourceClaims and ResourceClaimTemplates by name (what the informers hold)."""
    spec = obj(pod.get("spec"))
    entries = items(spec.get("resourceClaims"))
    if not entries:
        return PodGpus()
    if len(entries) > MAX_POD_CLAIMS:
        return PodGpus(
            refusals=(Refusal("spec.resourceClaims", f"{len(entries)} claims, more than {MAX_POD_CLAIMS}"),)
        )
    generated = _generated_claim_names(pod)
    uid = str(at(pod, "metadata", "uid") or "")
    requests: list[ClaimRequest] = []
    refusals: list[Refusal] = []
    waiting: list[str] = []
    for i, raw_entry in enumerate(entries):
        entry = obj(raw_entry)
        name = str(entry.get("name") or "")
        where = f"spec.resourceClaims[{name or i}]"
        direct = entry.get("resourceClaimName")
        template = entry.get("resourceClaimTemplateName")
        if bool(direct) == bool(template):
            refusals.append(Refusal(where, "names neither or both a ResourceClaim and a template"))
            continue
        if direct:
            claim = claims.get(str(direct))
            if not isinstance(claim, Mapping):
                waiting.append(f"ResourceClaim {direct}")
                continue
            owner = _shared_elsewhere(claim, uid)
            if owner:
                refusals.append(Refusal(f"ResourceClaim {direct}", owner))
                continue
            claim_spec, claim_name, label = obj(claim.get("spec")), str(direct), f"ResourceClaim {direct}"
        else:
            found = templates.get(str(template))
            if not isinstance(found, Mapping):
                waiting.append(f"ResourceClaimTemplate {template}")
                continue
            claim_spec = obj(at(found, "spec", "spec"))
            claim_name, label = generated.get(name, ""), f"ResourceClaimTemplate {template}"
        got = _claim_requests(claim_spec, label, name, claim_name, cfg)
        if isinstance(got, Refusal):
            refusals.append(got)
        else:
            requests.append(got)
    if requests and _asks_extended_gpus(spec):
        refusals.append(
            Refusal(
                "spec.containers[].resources",
                f"asks for {GPU_RESOURCE} and for GPUs by claim: one or the other",
            )
        )
    refusals.extend(_disagreeing(requests))
    return PodGpus(tuple(requests), tuple(refusals), tuple(waiting))


def _claim_requests(
    claim_spec: Obj, label: str, pod_claim: str, claim_name: str, cfg: DraConfig
) -> ClaimRequest | Refusal:
    devices = obj(claim_spec.get("devices"))
    requests = items(devices.get("requests"))
    if not requests:
        return Refusal(label, "asks for no device")
    if len(requests) > 1:
        return Refusal(
            f"{label} spec.devices.requests",
            f"{len(requests)} requests in one claim; Tandem translates one (use one claim per request)",
        )
    if devices.get("constraints"):
        return Refusal(f"{label} spec.devices.constraints", "constraints are not translated to Slurm")
    request = obj(requests[0])
    where = f"{label} spec.devices.requests[{request.get('name') or 0}]"
    if request.get("firstAvailable"):
        return Refusal(where, "firstAvailable (a prioritized list) is not translated to Slurm; use exactly")
    exactly = request.get("exactly")
    if not isinstance(exactly, Mapping):
        return Refusal(where, "has no exactly request")
    device_class = str(exactly.get("deviceClassName") or "")
    if device_class not in DEVICE_CLASSES:
        known = " or ".join(DEVICE_CLASSES)
        return Refusal(f"{where}.exactly.deviceClassName", f"{device_class!r} is not {known}")
    mode = exactly.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        return Refusal(f"{where}.exactly.allocationMode", f"{mode}: Slurm allocates an exact count")
    if exactly.get("adminAccess"):
        return Refusal(f"{where}.exactly.adminAccess", "admin access is not a Slurm allocation")
    count = exactly.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_DEVICES:
        return Refusal(f"{where}.exactly.count", f"{count!r} is not a count from 1 to {MAX_DEVICES}")
    kind = DEVICE_CLASSES[device_class]
    asked = _shares(exactly.get("capacity"), kind, count, f"{where}.exactly")
    if isinstance(asked, Refusal):
        return asked
    capacity, shares = asked
    gres_type = _selected_type(items(exactly.get("selectors")), kind, f"{where}.exactly.selectors", cfg)
    if isinstance(gres_type, Refusal):
        return gres_type
    return ClaimRequest(
        pod_claim=pod_claim,
        claim_name=claim_name,
        request=str(request.get("name") or ""),
        device_class=device_class,
        kind=kind,
        count=count,
        gres_type=gres_type,
        shares=shares,
        capacity=capacity,
    )


def _shares(capacity: Any, kind: str, count: int, where: str) -> tuple[str, int] | Refusal:
    """Which capacity a request's `capacity` asks for, and how much of one GPU's ("", 0: none asked,
    a whole device)."""
    if capacity is None:
        return "", 0
    asked = obj(obj(capacity).get("requests"))
    known = " or ".join(repr(c) for c in SHARED_GRES)
    if not asked:
        return Refusal(
            f"{where}.capacity", f"asks for no capacity (give requests {known}, or leave capacity out)"
        )
    other = sorted(str(k) for k in asked if k not in SHARED_GRES)
    if other:
        return Refusal(
            f"{where}.capacity.requests",
            f"{', '.join(repr(k) for k in other)}: only {SHARE_CAPACITY!r} (Slurm's shards of a GPU) and"
            f" {MPS_CAPACITY!r} (its MPS share) are translated to Slurm",
        )
    if len(asked) > 1:
        return Refusal(
            f"{where}.capacity.requests",
            f"asks for {known} of one GPU: Slurm counts neither against the other, ask for one",
        )
    (name,) = (str(k) for k in asked)
    if kind != "gpu":
        return Refusal(f"{where}.capacity", f"{name} are of a whole GPU (gpu.nvidia.com), not of a MIG slice")
    if count != 1:
        return Refusal(
            f"{where}.count",
            f"{count} GPUs' {name} in one request: Slurm gives a job's {SHARED_GRES[name]} from one GPU",
        )
    value = asked[name]
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    if not text.isdigit() or not 1 <= int(text) <= MAX_SHARES:
        return Refusal(
            f"{where}.capacity.requests.{name}",
            f"{value!r} is not a whole number of {name} from 1 to {MAX_SHARES}",
        )
    return name, int(text)


def _selected_type(selectors: Sequence[Any], kind: str, where: str, cfg: DraConfig) -> str | Refusal:
    if len(selectors) > MAX_SELECTORS:
        return Refusal(where, f"{len(selectors)} selectors, more than {MAX_SELECTORS}")
    equal: dict[str, str] = {}
    for i, selector in enumerate(selectors):
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expression, str):
            return Refusal(f"{where}[{i}]", "is not a CEL selector")
        clauses = parse_selector(expression)
        if isinstance(clauses, str):
            return Refusal(f"{where}[{i}].cel.expression", clauses)
        for attribute, value in clauses:
            if equal.setdefault(attribute, value) != value:
                return Refusal(where, f"{attribute} must equal both {equal[attribute]!r} and {value!r}")
    if equal.get("driver", DRIVER) != DRIVER:
        return Refusal(where, f"device.driver {equal['driver']!r} is not {DRIVER!r}")
    if equal.get("type", kind) != kind:
        return Refusal(where, f"selects type {equal['type']!r}, but its class selects {kind!r} devices")
    if kind == "mig":
        if "profile" not in equal:
            return Refusal(where, "a MIG request must select its profile (Slurm's GRES type is the profile)")
        gres_type = cfg.mig_type(equal["profile"])
        if not gres_type:
            return Refusal(where, f"MIG profile {equal['profile']!r} maps to no Slurm GRES type")
        return gres_type
    if "profile" in equal:
        return Refusal(where, "selects a MIG profile, but its class is gpu.nvidia.com (use mig.nvidia.com)")
    if "productName" in equal:
        product = equal["productName"]
        if product not in cfg.product_types:
            known = ", ".join(sorted(cfg.product_types)) or "none configured"
            return Refusal(where, f"product {product!r} maps to no Slurm GRES type (known: {known})")
        return cfg.product_types[product]
    return ""


def parse_selector(expression: str) -> list[tuple[str, str]] | str:
    """The (attribute, value) equalities of a selector Tandem translates; else why not (a str).
    `attribute` is `driver`, or an attribute of NVIDIA's driver: productName, profile, type."""
    if len(expression) > MAX_CEL_LENGTH:
        return f"{len(expression)} characters, more than the {MAX_CEL_LENGTH} Kubernetes allows"
    clauses: list[tuple[str, str]] = []
    pos = 0
    while True:
        m = _CLAUSE.match(expression, pos)
        if m is None:
            return _unsupported(expression)
        if m["driver"]:
            clauses.append(("driver", m["value"]))
        else:
            if m["domain"] != DRIVER:
                return f"attributes of {m['domain']!r} are not translated to Slurm (only {DRIVER!r})"
            if m["attr"] not in ("productName", "profile", "type"):
                return (
                    f"selecting on {m['attr']!r} is not translated to Slurm"
                    " (only productName, profile and type are)"
                )
            clauses.append((m["attr"], m["value"]))
        pos = m.end()
        if pos == len(expression):
            return clauses
        joined = _AND.match(expression, pos)
        if joined is None:
            return _unsupported(expression)
        pos = joined.end()


def _unsupported(expression: str) -> str:
    if "capacity" in expression:
        return (
            "capacity (memory) selectors are not translated to Slurm: its GRES type fixes the memory;"
            " select productName (or a MIG profile) instead"
        )
    return (
        "not a selector Tandem translates (only &&-joined equalities on device.driver and"
        ' device.attributes["gpu.nvidia.com"].productName, .profile or .type)'
    )


def _generated_claim_names(pod: Pod) -> dict[str, str]:
    # The ResourceClaim controller records the claim it made from a template on the Pod's status.
    statuses = [obj(s) for s in items(at(pod, "status", "resourceClaimStatuses"))]
    return {
        str(s.get("name")): str(s.get("resourceClaimName"))
        for s in statuses[:MAX_POD_CLAIMS]
        if s.get("name") and s.get("resourceClaimName")
    }


def _shared_elsewhere(claim: Obj, pod_uid: str) -> str:
    # Slurm allocates devices to one job; a claim other Pods hold (or may hold next) has no job.
    status = obj(claim.get("status"))
    reserved = [obj(r) for r in items(status.get("reservedFor"))]
    others = [r for r in reserved if str(r.get("uid") or "") != pod_uid]
    if others:
        return "is reserved for other consumers; a claim shared between Pods has no one Slurm job"
    if status.get("allocation") and not reserved:
        return "is allocated already, not by Tandem for this Pod"
    return ""


def _asks_extended_gpus(spec: Obj) -> bool:
    for container in [*items(spec.get("containers")), *items(spec.get("initContainers"))]:
        resources = obj(obj(container).get("resources"))
        for kind in ("requests", "limits"):
            if GPU_RESOURCE in obj(resources.get(kind)):
                return True
    return False


def _disagreeing(requests: Sequence[ClaimRequest]) -> list[Refusal]:
    # The placeholder job asks for one GRES type; a whole GPU and a MIG slice are different GRES.
    if any(r.shares for r in requests) and not all(r.shares for r in requests):
        return [
            Refusal(
                "spec.resourceClaims",
                "asks for whole devices and for shares of a GPU: one Slurm job asks for GPUs or for"
                " shards of one, not both",
            )
        ]
    capacities = sorted({r.capacity for r in requests if r.capacity})
    if len(capacities) > 1:
        return [
            Refusal(
                "spec.resourceClaims",
                f"asks for {' and '.join(capacities)} of a GPU: one Slurm job asks for one shared GRES",
            )
        ]
    kinds = {r.kind for r in requests}
    if len(kinds) > 1:
        return [
            Refusal("spec.resourceClaims", "asks for whole GPUs and MIG slices: one Slurm job asks for one")
        ]
    types = sorted({r.gres_type for r in requests if r.gres_type})
    if len(types) > 1:
        return [
            Refusal(
                "spec.resourceClaims",
                f"asks for GPUs of types {', '.join(types)}: one Slurm job asks for one",
            )
        ]
    if sum(r.count for r in requests if not r.shares) > MAX_DEVICES:
        return [Refusal("spec.resourceClaims", f"asks for more than {MAX_DEVICES} devices on one node")]
    return []
