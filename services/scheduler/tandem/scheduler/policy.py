"""The tenant policy: what each namespace may ask of Slurm.

A platform team writes it in the ConfigMap `<release>-tandem-policy` (key `policy.yaml`, from the
chart's `scheduler.policy`); the scheduler watches it, so a change applies without a restart:

    default: {}            # namespaces not listed; {} = anything goes (SUNK-compatible)
    namespaces:
      team-a:
        userIds: ["1001", "2000-2999"]   # allowed user-id; the first is the default when absent
        groupIds: ["1001"]
        accounts: ["k8s"]
        partitions: ["infer"]
        qos: ["normal"]
        reservations: []                 # [] = none allowed; a key left out = anything goes
        maxPriority: 1000

A Pod that asks for more is refused like any invalid Pod, the Event naming the annotation and the
rule: `sunk.coreweave.com/user-id: 0 is not allowed in namespace team-a (allowed: 1001, 2000-2999)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tandem import keys

POLICY_KEY = "policy.yaml"


class PolicyError(ValueError):
    """The policy text is not a policy; the message says where."""


@dataclass(frozen=True)
class IdRanges:
    ranges: tuple[tuple[int, int], ...]
    text: tuple[str, ...]

    def allows(self, value: int) -> bool:
        return any(lo <= value <= hi for lo, hi in self.ranges)

    @property
    def first(self) -> int | None:
        return self.ranges[0][0] if self.ranges else None


@dataclass(frozen=True)
class Rules:
    """None: anything goes for that field."""

    user_ids: IdRanges | None = None
    group_ids: IdRanges | None = None
    accounts: tuple[str, ...] | None = None
    partitions: tuple[str, ...] | None = None
    qos: tuple[str, ...] | None = None
    reservations: tuple[str, ...] | None = None
    max_priority: int | None = None


@dataclass(frozen=True)
class Policy:
    default: Rules = field(default_factory=Rules)
    namespaces: Mapping[str, Rules] = field(default_factory=dict)

    def rules(self, namespace: str) -> Rules:
        return self.namespaces.get(namespace, self.default)


OPEN = Policy()

_NAMES = {
    "accounts": keys.ACCOUNT,
    "partitions": keys.PARTITION,
    "qos": keys.QOS,
    "reservations": keys.RESERVATION,
}
_FIELDS = {"userIds", "groupIds", "maxPriority", *_NAMES}


def parse(text: str) -> Policy:
    """The policy in `text` (YAML); empty text is the open policy."""
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise PolicyError(f"{POLICY_KEY} is not YAML: {e}") from e
    if not isinstance(raw, dict):
        raise PolicyError(f"{POLICY_KEY} must be a mapping with `default` and `namespaces`")
    unknown = set(raw) - {"default", "namespaces"}
    if unknown:
        raise PolicyError(
            f"{POLICY_KEY}: unknown key(s) {', '.join(sorted(unknown))} (expected default, namespaces)"
        )
    namespaces = raw.get("namespaces") or {}
    if not isinstance(namespaces, dict):
        raise PolicyError(f"{POLICY_KEY}: namespaces must map a namespace to its rules")
    return Policy(
        _rules(raw.get("default") or {}, "default"),
        {str(ns): _rules(r or {}, f"namespaces.{ns}") for ns, r in namespaces.items()},
    )


def _rules(raw: Any, where: str) -> Rules:
    if not isinstance(raw, dict):
        raise PolicyError(f"{POLICY_KEY}: {where} must be a mapping of rules")
    unknown = set(raw) - _FIELDS
    if unknown:
        known = ", ".join(sorted(_FIELDS))
        raise PolicyError(
            f"{POLICY_KEY}: {where}: unknown rule(s) {', '.join(sorted(unknown))} (known: {known})"
        )
    max_priority = raw.get("maxPriority")
    if max_priority is not None and (
        isinstance(max_priority, bool) or not isinstance(max_priority, int) or max_priority < 0
    ):
        raise PolicyError(
            f"{POLICY_KEY}: {where}.maxPriority must be a whole number >= 0, got {max_priority!r}"
        )
    return Rules(
        user_ids=_ids(raw.get("userIds"), f"{where}.userIds"),
        group_ids=_ids(raw.get("groupIds"), f"{where}.groupIds"),
        max_priority=max_priority,
        **{
            name: _names(raw.get(rule), f"{where}.{rule}")
            for rule, name in (
                ("accounts", "accounts"),
                ("partitions", "partitions"),
                ("qos", "qos"),
                ("reservations", "reservations"),
            )
        },
    )


def _names(raw: Any, where: str) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in raw
    ):
        raise PolicyError(f"{POLICY_KEY}: {where} must be a list of names")
    return tuple(str(v) for v in raw)


def _ids(raw: Any, where: str) -> IdRanges | None:
    names = _names(raw, where)
    if names is None:
        return None
    ranges = []
    for item in names:
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise PolicyError(f"{POLICY_KEY}: {where}: {item!r} is not an id or a range like 2000-2999")
        low, high = int(lo), int(hi) if sep else int(lo)
        if high < low:
            raise PolicyError(f"{POLICY_KEY}: {where}: range {item!r} runs backwards")
        ranges.append((low, high))
    return IdRanges(tuple(ranges), names)


@dataclass(frozen=True)
class Verdict:
    # (annotation key, what is wrong): refused.
    problems: tuple[tuple[str, str], ...] = ()
    # Annotations the policy fills in when the Pod leaves them out (the first allowed ids).
    defaults: Mapping[str, str] = field(default_factory=dict)


def check(policy: Policy, namespace: str, annotations: Mapping[str, str]) -> Verdict:
    """What the namespace's rules say of these annotations (already well-formed: validation ran)."""
    rules = policy.rules(namespace)
    problems: list[tuple[str, str]] = []
    defaults: dict[str, str] = {}
    where = f"in namespace {namespace}"
    for key, allowed in ((keys.USER_ID, rules.user_ids), (keys.GROUP_ID, rules.group_ids)):
        if allowed is None:
            continue
        value = annotations.get(key)
        if value is None:
            # The group defaults to the user's own id (SUNK's rule) when that is allowed.
            user = annotations.get(keys.USER_ID) or defaults.get(keys.USER_ID)
            if key == keys.GROUP_ID and user is not None and user.isdigit() and allowed.allows(int(user)):
                continue
            if allowed.first is None:
                problems.append((key, f"must not be used: no id is allowed {where}"))
            else:
                defaults[key] = str(allowed.first)
            continue
        if not value.lstrip("+").isdigit() or not allowed.allows(int(value)):
            problems.append((key, f"{value} is not allowed {where} (allowed: {_shown(allowed.text)})"))
    for rule, key in _NAMES.items():
        names: Sequence[str] | None = getattr(rules, rule)
        value = annotations.get(key)
        if names is None or value is None:
            continue
        if value not in names:
            problems.append((key, f"{value} is not allowed {where} (allowed: {_shown(names)})"))
    if rules.max_priority is not None and keys.PRIORITY in annotations:
        priority = annotations[keys.PRIORITY]
        if not priority.lstrip("+").isdigit() or int(priority) > rules.max_priority:
            problems.append((keys.PRIORITY, f"{priority} is above the maximum {rules.max_priority} {where}"))
    return Verdict(tuple(problems), defaults)


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"
