"""The tenant policy: what each namespace may ask of Slurm.

A platform team writes it in the ConfigMap `<release>-tandem-policy` (key `policy.yaml`, from the
chart's `scheduler.policy`); the scheduler watches it, so a change applies without a restart:

    default:                             # namespaces not listed
      defaultUser: 1001                  # the user-id of a Pod that sets none
      maxPriority: 10000
    namespaces:
      team-a:
        userIds: ["1001", "2000-2999"]   # allowed user-id; the first is the default when absent
        groupIds: ["1001"]
        accounts: ["k8s"]
        partitions: ["infer"]
        qos: ["normal"]
        reservations: []                 # [] = none allowed; a key left out = anything goes
        maxPriority: 1000
        nodes: "gpu-[000-015]"           # what required-nodes / excluded-nodes may name
        exclusive: ["user"]
        constraints: ["h100", "ib"]      # node features `constraints` may name
        maxTimeoutMinutes: 1440          # also the time limit of a Pod that sets no timeout
        workingDirs: ["/scratch/team-a"] # current-working-dir must be one of these or below one

It fails closed where a tenant could take what is not theirs: uid 0 and gid 0 only where a rule
lists 0, a priority above DEFAULT_MAX_PRIORITY only where `maxPriority` says so, and a Pod without
`user-id` only where the namespace has a default user. With no policy at all (BUILTIN) that is all
there is to it; SUNK, which lets any Pod run as root, is `default: {userIds: ["0-4294967294"],
maxPriority: 4294967294}`.

A Pod that asks for more is refused like any invalid Pod, the Event naming the annotation and the
rule: `sunk.coreweave.com/user-id: 0 is not allowed in namespace team-a (allowed: 1001, 2000-2999)`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tandem import keys
from tandem.slurm.hostlist import compress, expand

POLICY_KEY = "policy.yaml"
# The highest explicit priority a namespace may ask for when its rule does not say (the chart
# writes the same number): a Pod's priority is set by root on the tenant's behalf, so without a
# cap any tenant could jump every Slurm user's queue.
DEFAULT_MAX_PRIORITY = 10_000
# Slurm's 32-bit ids and priorities reserve 0xFFFFFFFF.
_MAX_UINT32 = 0xFFFFFFFE
# Names between a constraint expression's operators (`a&b`, `[a|b]`, `(a,b)`, `!a`, `a*2`).
_CONSTRAINT_OPERATORS = re.compile(r"[&|,()\[\]!]")
_COUNT = re.compile(r"\*[0-9]+$")


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
class NodeNames:
    """The nodes a hostlist rule names, and the rule as written (for messages)."""

    names: frozenset[str]
    text: str


@dataclass(frozen=True)
class Rules:
    """One namespace's rules. None: anything goes for that field, except root (uid or gid 0
    needs a rule that lists 0) and priority (DEFAULT_MAX_PRIORITY unless `maxPriority` says)."""

    default_user: int | None = None
    user_ids: IdRanges | None = None
    group_ids: IdRanges | None = None
    accounts: tuple[str, ...] | None = None
    partitions: tuple[str, ...] | None = None
    qos: tuple[str, ...] | None = None
    reservations: tuple[str, ...] | None = None
    max_priority: int = DEFAULT_MAX_PRIORITY
    nodes: NodeNames | None = None
    exclusive: tuple[str, ...] | None = None
    constraints: tuple[str, ...] | None = None
    max_timeout_minutes: int | None = None
    working_dirs: tuple[str, ...] | None = None

    @property
    def root_user_allowed(self) -> bool:
        return self.user_ids is not None and self.user_ids.allows(0)

    @property
    def root_group_allowed(self) -> bool:
        # Group 0 follows the user (a Pod allowed to run as root gets root's group) unless
        # groupIds says which groups.
        return self.group_ids.allows(0) if self.group_ids is not None else self.root_user_allowed


@dataclass(frozen=True)
class Policy:
    default: Rules = field(default_factory=Rules)
    namespaces: Mapping[str, Rules] = field(default_factory=dict)

    def rules(self, namespace: str) -> Rules:
        return self.namespaces.get(namespace, self.default)


# No policy written (no ConfigMap, or an empty one): no root, no default user, priority capped.
BUILTIN = Policy()

_NAMES = {
    "accounts": keys.ACCOUNT,
    "partitions": keys.PARTITION,
    "qos": keys.QOS,
    "reservations": keys.RESERVATION,
}
_FIELDS = {
    "defaultUser",
    "userIds",
    "groupIds",
    "maxPriority",
    "nodes",
    "exclusive",
    "constraints",
    "maxTimeoutMinutes",
    "workingDirs",
    *_NAMES,
}


def parse(text: str) -> Policy:
    """The policy in `text` (YAML); empty text is the built-in policy."""
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
    user_ids = _ids(raw.get("userIds"), f"{where}.userIds")
    default_user = _whole(raw.get("defaultUser"), f"{where}.defaultUser", 0)
    if default_user is not None:
        if default_user == 0 and not (user_ids is not None and user_ids.allows(0)):
            raise PolicyError(f"{POLICY_KEY}: {where}.defaultUser 0 is root: list 0 in userIds to allow it")
        if user_ids is not None and not user_ids.allows(default_user):
            raise PolicyError(
                f"{POLICY_KEY}: {where}.defaultUser {default_user} is not one of userIds "
                f"({_shown(user_ids.text)})"
            )
    exclusive = _names(raw.get("exclusive"), f"{where}.exclusive")
    for value in exclusive or ():
        if value not in keys.EXCLUSIVE_VALUES:
            raise PolicyError(
                f"{POLICY_KEY}: {where}.exclusive: {value!r} is not one of {', '.join(keys.EXCLUSIVE_VALUES)}"
            )
    working_dirs = _names(raw.get("workingDirs"), f"{where}.workingDirs")
    for directory in working_dirs or ():
        if not directory.startswith("/"):
            raise PolicyError(f"{POLICY_KEY}: {where}.workingDirs: {directory!r} is not an absolute path")
    max_priority = _whole(raw.get("maxPriority"), f"{where}.maxPriority", 0)
    return Rules(
        default_user=default_user,
        user_ids=user_ids,
        group_ids=_ids(raw.get("groupIds"), f"{where}.groupIds"),
        max_priority=DEFAULT_MAX_PRIORITY if max_priority is None else max_priority,
        nodes=_nodes(raw.get("nodes"), f"{where}.nodes"),
        exclusive=exclusive,
        constraints=_names(raw.get("constraints"), f"{where}.constraints"),
        max_timeout_minutes=_whole(raw.get("maxTimeoutMinutes"), f"{where}.maxTimeoutMinutes", 1),
        working_dirs=tuple(posixpath.normpath(d) for d in working_dirs) if working_dirs is not None else None,
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


def _whole(raw: Any, where: str, low: int) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= _MAX_UINT32:
        raise PolicyError(
            f"{POLICY_KEY}: {where} must be a whole number from {low} to {_MAX_UINT32}, got {raw!r}"
        )
    return raw


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


def _nodes(raw: Any, where: str) -> NodeNames | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise PolicyError(f'{POLICY_KEY}: {where} must be a Slurm hostlist such as "gpu-[000-015]"')
    try:
        return NodeNames(frozenset(expand(raw)) if raw.strip() else frozenset(), raw)
    except ValueError as e:
        raise PolicyError(f"{POLICY_KEY}: {where}: {e}") from e


@dataclass(frozen=True)
class Verdict:
    # (annotation key, what is wrong): refused.
    problems: tuple[tuple[str, str], ...] = ()
    # Annotations the policy fills in when the Pod leaves them out (default user, group, time limit).
    defaults: Mapping[str, str] = field(default_factory=dict)


def check(policy: Policy, namespace: str, annotations: Mapping[str, str]) -> Verdict:
    """What the namespace's rules say of these annotations (already well-formed: validation ran)."""
    rules = policy.rules(namespace)
    where = f"in namespace {namespace}"
    problems: list[tuple[str, str]] = []
    defaults: dict[str, str] = {}
    user = _user(rules, annotations, namespace, problems, defaults)
    _group(rules, annotations, user, where, problems, defaults)
    for rule, key in _NAMES.items():
        names: Sequence[str] | None = getattr(rules, rule)
        value = annotations.get(key)
        if names is None or value is None:
            continue
        if value not in names:
            problems.append((key, f"{value} is not allowed {where} (allowed: {_shown(names)})"))
    if keys.PRIORITY in annotations:
        priority = annotations[keys.PRIORITY]
        if _int(priority) is None or int(priority) > rules.max_priority:
            problems.append((keys.PRIORITY, f"{priority} is above the maximum {rules.max_priority} {where}"))
    for key in (keys.REQUIRED_NODES, keys.EXCLUDED_NODES):
        if rules.nodes is not None and annotations.get(key):
            problems.extend(_node_problems(rules.nodes, key, annotations[key], where))
    exclusive = annotations.get(keys.EXCLUSIVE)
    if rules.exclusive is not None and exclusive is not None:
        # Legacy `false` is Slurm's default sharing: nothing to allow.
        value = keys.LEGACY_EXCLUSIVE.get(exclusive.lower(), exclusive)
        if value and value not in rules.exclusive:
            problems.append(
                (keys.EXCLUSIVE, f"{exclusive} is not allowed {where} (allowed: {_shown(rules.exclusive)})")
            )
    constraints = annotations.get(keys.CONSTRAINTS)
    if rules.constraints is not None and constraints:
        unknown = [f for f in constraint_features(constraints) if f not in rules.constraints]
        if unknown:
            problems.append(
                (
                    keys.CONSTRAINTS,
                    f"{constraints} names feature(s) {', '.join(unknown)} not allowed {where} "
                    f"(allowed: {_shown(rules.constraints)})",
                )
            )
    _timeout(rules, annotations, where, problems, defaults)
    directory = annotations.get(keys.CURRENT_WORKING_DIR)
    if (
        rules.working_dirs is not None
        and directory is not None
        and not _within(directory, rules.working_dirs)
    ):
        problems.append(
            (
                keys.CURRENT_WORKING_DIR,
                f"{directory} is not allowed {where} (allowed: {_shown(rules.working_dirs)} and below)",
            )
        )
    return Verdict(tuple(problems), defaults)


def _user(
    rules: Rules,
    annotations: Mapping[str, str],
    namespace: str,
    problems: list[tuple[str, str]],
    defaults: dict[str, str],
) -> int | None:
    """The uid the job will run as (None when refused), adding the default user when it is absent."""
    where = f"in namespace {namespace}"
    value = annotations.get(keys.USER_ID)
    if value is None:
        default = rules.default_user
        if default is None and rules.user_ids is not None:
            default = rules.user_ids.first
        if default is None:
            problems.append(
                (
                    keys.USER_ID,
                    f"not set, and namespace {namespace} has no default user: "
                    "set the annotation, or a defaultUser for the namespace in the tenant policy",
                )
            )
            return None
        defaults[keys.USER_ID] = str(default)
        return default
    uid = _int(value)
    if uid is None:
        problems.append((keys.USER_ID, f"{value} is not allowed {where}"))
        return None
    if rules.user_ids is not None and not rules.user_ids.allows(uid):
        problems.append(
            (keys.USER_ID, f"{value} is not allowed {where} (allowed: {_shown(rules.user_ids.text)})")
        )
        return None
    if uid == 0 and not rules.root_user_allowed:
        problems.append(
            (keys.USER_ID, f"{value} (root) is not allowed {where} (a rule must list 0 in userIds)")
        )
        return None
    return uid


def _group(
    rules: Rules,
    annotations: Mapping[str, str],
    user: int | None,
    where: str,
    problems: list[tuple[str, str]],
    defaults: dict[str, str],
) -> None:
    value = annotations.get(keys.GROUP_ID)
    if value is None:
        # The group defaults to the user's own id (SUNK's rule) when that is allowed.
        if user is None or rules.group_ids is None or rules.group_ids.allows(user):
            return
        if rules.group_ids.first is None:
            problems.append((keys.GROUP_ID, f"must not be used: no id is allowed {where}"))
        else:
            defaults[keys.GROUP_ID] = str(rules.group_ids.first)
        return
    gid = _int(value)
    if gid is None or (rules.group_ids is not None and not rules.group_ids.allows(gid)):
        allowed = f" (allowed: {_shown(rules.group_ids.text)})" if rules.group_ids is not None else ""
        problems.append((keys.GROUP_ID, f"{value} is not allowed {where}{allowed}"))
    elif gid == 0 and not rules.root_group_allowed:
        problems.append(
            (keys.GROUP_ID, f"{value} (root) is not allowed {where} (a rule must list 0 in groupIds)")
        )


def _timeout(
    rules: Rules,
    annotations: Mapping[str, str],
    where: str,
    problems: list[tuple[str, str]],
    defaults: dict[str, str],
) -> None:
    limit = rules.max_timeout_minutes
    if limit is None:
        return
    value = annotations.get(keys.TIMEOUT)
    if value is None:
        # Otherwise the partition's default applies, which may be no limit at all.
        defaults[keys.TIMEOUT] = str(limit)
        return
    minutes = _int(value)
    if minutes is None or minutes > limit:
        problems.append((keys.TIMEOUT, f"{value} minutes is above the maximum {limit} {where}"))


def _node_problems(allowed: NodeNames, key: str, value: str, where: str) -> list[tuple[str, str]]:
    try:
        named = expand(value)
    except ValueError as e:
        return [(key, f"{value} cannot be checked against the nodes allowed {where}: {e}")]
    outside = sorted(set(named) - allowed.names)
    if not outside:
        return []
    shown = allowed.text if allowed.names else "none"
    return [(key, f"{value} names {compress(outside)}, not allowed {where} (allowed: {shown})")]


def constraint_features(expression: str) -> list[str]:
    """The node features a Slurm constraint expression names, in order, each once:
    `[h100*2&ib]|a100` -> h100, ib, a100."""
    features: list[str] = []
    for token in _CONSTRAINT_OPERATORS.split(expression):
        name = _COUNT.sub("", token.strip())
        if name and name not in features:
            features.append(name)
    return features


def _within(directory: str, allowed: Sequence[str]) -> bool:
    """`directory` is one of `allowed` or below one, once `..` and `.` are resolved (Slurm's
    chdir would resolve them the same way; symbolic links are the file system's business)."""
    path = posixpath.normpath(directory)
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in allowed)


def _int(value: str) -> int | None:
    digits = value.removeprefix("+")
    return int(digits) if digits.isdigit() and len(digits) <= 20 else None


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"
