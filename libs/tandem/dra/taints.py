"""DRA device taints (KEP-5055, GA in Kubernetes 1.37): a taint a driver puts on one device of its
ResourceSlice, or a DeviceTaintRule an admin or a health controller writes for the devices its
selector names. Read here as plain values; a taint with an effect Tandem does not know is read as
`None` (informational), as the API asks consumers to.

What Tandem does with them is the syncer's (tandem.syncer.gputaints): a GPU tainted NoSchedule or
NoExecute is one Slurm must not give out either. Everything from the API is bounded and checked:
a field of the wrong kind reads as absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem.dra.shape import at, items, obj

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
# The effects that keep a device from new claims (NoExecute also evicts what uses it).
EFFECTIVE = (NO_SCHEDULE, NO_EXECUTE)
# Kubernetes allows 16 taints a device (DeviceTaintsMaxLength); more is not a slice it wrote.
MAX_TAINTS = 16
# A label name is at most 317 characters (prefix 253 + '/' + name 63); a label value 63.
MAX_KEY = 317
MAX_VALUE = 63

Obj = Mapping[str, Any]


@dataclass(frozen=True, order=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = "None"

    @property
    def effective(self) -> bool:
        """Whether it keeps the device from claims (NoSchedule or NoExecute)."""
        return self.effect in EFFECTIVE

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def taint_of(raw: Any) -> DeviceTaint | None:
    """One taint as the API writes it ({key, value, effect, timeAdded}); None when it has no key."""
    t = obj(raw)
    key, value, effect = t.get("key"), t.get("value") or "", t.get("effect")
    if not isinstance(key, str) or not key or len(key) > MAX_KEY or not isinstance(value, str):
        return None
    known = effect if effect in (*EFFECTIVE, "None") else "None"
    return DeviceTaint(key, value[:MAX_VALUE], known)


def device_taints(device: Obj) -> tuple[DeviceTaint, ...]:
    """The taints a ResourceSlice puts on one of its devices (`spec.devices[].taints`)."""
    found = (taint_of(t) for t in items(device.get("taints"))[:MAX_TAINTS])
    return tuple(sorted({t for t in found if t is not None}))


@dataclass(frozen=True)
class TaintRule:
    """A DeviceTaintRule: its taint on every device its selector names (an empty field matches
    any; no selector at all matches none)."""

    name: str
    taint: DeviceTaint
    driver: str | None
    pool: str | None
    device: str | None
    selects: bool = True

    def applies(self, driver: str, pool: str, device: str) -> bool:
        return (
            self.selects
            and self.driver in (None, driver)
            and self.pool in (None, pool)
            and self.device in (None, device)
        )


def taint_rule(rule: Obj) -> TaintRule | None:
    """A DeviceTaintRule read; None when it has no taint Tandem can read. A selector with a CEL
    `selectors` list (1.33's alpha) cannot be evaluated here: read as selecting nothing."""
    taint = taint_of(at(rule, "spec", "taint"))
    if taint is None:
        return None
    spec = obj(rule.get("spec"))
    selector = spec.get("deviceSelector")
    name = str(at(rule, "metadata", "name") or "")
    if not isinstance(selector, Mapping) or selector.get("selectors") or selector.get("deviceClassName"):
        return TaintRule(name, taint, None, None, None, selects=False)
    return TaintRule(
        name, taint, _field(selector, "driver"), _field(selector, "pool"), _field(selector, "device")
    )


def rule_taints(rules: Iterable[TaintRule], driver: str, pool: str, device: str) -> tuple[DeviceTaint, ...]:
    """The taints the rules put on one device."""
    return tuple(sorted({r.taint for r in rules if r.applies(driver, pool, device)}))


def slim_rule(rule: Obj) -> dict[str, Any]:
    """What an informer keeps of a DeviceTaintRule."""
    meta, spec = obj(rule.get("metadata")), obj(rule.get("spec"))
    return {
        "apiVersion": rule.get("apiVersion"),
        "kind": rule.get("kind"),
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": dict(obj(meta.get("labels"))),
        },
        "spec": {"deviceSelector": spec.get("deviceSelector"), "taint": spec.get("taint")},
    }


def _field(selector: Obj, name: str) -> str | None:
    value = selector.get(name)
    return value if isinstance(value, str) and value else None
