"""Slurm's network topology from Node labels (issue 38): the syncer renders it, Slurm places by it.

The levels are Node label keys from the widest domain to the narrowest (a zone, a spine, a rack, an
NVLink clique). Each level's domains are the Nodes that agree on every label down to it: a rack
`r1` under zone `a` and a rack `r1` under zone `b` are two domains (a tree has one parent), which
is no looser than Kubernetes' "same value of this label". A Node without a level's label:
- labelled at a narrower level (racks labelled, zones not: most on-premises clusters), it is in
  that level's one *unlabelled* domain, shared by every Node so missing it under the same wider
  domains; racks-only labelling thus gives one implicit zone and the racks as labelled (issue 53);
- labelled at no narrower level, it is a domain of its own from that level down (a Node with no
  label at all is its own rack: nothing says which Nodes share one).
`unlabelled` lists the Nodes missing each level's label, for the person told about it.

Two of Slurm's plugins, as `TopologyPlugin=` (24.11's `topology.conf`) or `topology.yaml` (25.05 and
later) says them:
- **tree** (the default): every level a switch level, one root switch above the widest so that
  every node is reachable (Slurm only warns when none is, then cannot place a job across the
  parts). Racks of any size are fine; `--switches=1` keeps a job under one leaf switch.
- **block**: the narrowest level's domains as blocks, `BlockSizes` the smallest block's size:
  24.11 exits (`fatal: ... children count lower than bblock_node_cnt`) on a block smaller than
  the base block size, which uneven racks always have.

Label values are hostile input: Slurm reads switch and block lists as hostlists and exits with
`fatal: Invalid switches` on one it cannot parse (`rack-[a-d]`). Every name written here is
`<level>-<the value, lower case, [a-z0-9-] only>-<5 letters of a hash of the exact path>`: no
bracket, comma or range, never two domains under one name (values differing in case or in a '.'
or '_' differ in their hash), and always ending in a letter. Node names are Slurm's own.
Pure: tests/unit/libs/test_topology.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

TREE = "tree"
BLOCK = "block"
PLUGINS = (TREE, BLOCK)
ROOT = "tandem-root"
# A Kubernetes label value is at most 63 characters; a Slurm name has no documented bound, but
# `scontrol show topology` prints each on one line: keep them short.
_VALUE_CHARS = 40
_SAFE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,80}[a-z]$")
# What domain_name makes, and nothing an operator would name a feature by chance.
_DOMAIN_NAME = re.compile(r"^l[0-9]+-[a-z0-9][a-z0-9-]*-[a-z]{5}$")
_UNSAFE = re.compile(r"[^a-z0-9-]+")
# In a node's path, where a level's label is missing but a narrower one is there (no label value
# can hold it).
_UNLABELLED = "\x01"
# A label key (prefix/name) as Kubernetes allows it.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def parse_levels(text: str) -> tuple[str, ...]:
    """`key,key,...` (widest first) -> the label keys; ValueError naming a bad or repeated key."""
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    for key in keys:
        if len(key) > 317 or not _LABEL_KEY.match(key):
            raise ValueError(f"{key!r} is not a Kubernetes label key")
    if len(set(keys)) != len(keys):
        raise ValueError(f"a label key is listed twice in {text!r}")
    return keys


@dataclass(frozen=True)
class Domain:
    """One switch (tree) or block: `level` 0 is the widest; `nodes` every Slurm node under it."""

    name: str
    level: int
    key: str
    # The label's value ("" for Nodes without the label: the domain is that node's own, or the
    # level's unlabelled domain when `unlabelled`).
    value: str
    nodes: tuple[str, ...]
    children: tuple[str, ...] = ()
    parent: str = ""
    # The Nodes without this level's label that carry a narrower one, as one domain.
    unlabelled: bool = False


@dataclass(frozen=True)
class Topology:
    levels: tuple[str, ...]
    plugin: str
    domains: tuple[Domain, ...] = ()
    # Slurm nodes whose Node is not known (no slurmd Pod placed yet): in no domain but the root.
    unplaced: tuple[str, ...] = ()
    # Every Slurm node, in Slurm's own order (its node table's): domains and switches are listed
    # in it, so that where Slurm's tree plugin finds several switches equally good it takes them
    # in the order a flat cluster takes their nodes.
    order: tuple[str, ...] = ()
    by_name: Mapping[str, Domain] = field(default_factory=dict, compare=False, repr=False)

    def level_of(self, key: str) -> int | None:
        return self.levels.index(key) if key in self.levels else None

    def at_level(self, level: int) -> list[Domain]:
        return [d for d in self.domains if d.level == level]

    def domain_of(self, slurm_node: str, level: int) -> Domain | None:
        return next((d for d in self.at_level(level) if slurm_node in d.nodes), None)

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.order

    def rank(self, d: Domain) -> tuple[int, int, str]:
        """Where a domain is listed: by level, then by its first node in Slurm's order."""
        first = self._ranks.get(d.nodes[0], len(self._ranks)) if d.nodes else len(self._ranks)
        return (d.level, first, d.name)

    @property
    def _ranks(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.order)}


def build(levels: Sequence[str], plugin: str, labels: Mapping[str, Mapping[str, str] | None]) -> Topology:
    """The topology of the Slurm nodes in `labels` (Slurm node -> its Node's labels; None: its Node
    is not known), in Slurm's order (the order of `labels`)."""
    if plugin not in PLUGINS:
        raise ValueError(f"topology plugin {plugin!r} is not one of {', '.join(PLUGINS)}")
    paths: dict[tuple[int, tuple[str, ...]], list[str]] = {}
    unplaced: list[str] = []
    for node in labels:
        found = labels[node]
        if found is None:
            unplaced.append(node)
            continue
        path: list[str] = []
        narrowest = max((i for i, key in enumerate(levels) if found.get(key)), default=-1)
        for level, key in enumerate(levels):
            own = path[-1:] == ["\0" + node]
            value = str(found.get(key) or "") if not own else ""
            # Missing: the level's unlabelled domain while a narrower label says where the node
            # is, else the node's own domain from here down (no marker can be a label value).
            path.append(value or (_UNLABELLED if level < narrowest and not own else "\0" + node))
            paths.setdefault((level, tuple(path)), []).append(node)
    domains: dict[tuple[int, tuple[str, ...]], Domain] = {}
    for (level, where), nodes in sorted(paths.items()):
        unlabelled = where[-1] == _UNLABELLED
        value = "" if unlabelled or where[-1].startswith("\0") else where[-1]
        parent = domains[(level - 1, where[:-1])].name if level else ""
        domains[(level, where)] = Domain(
            name=domain_name(level, where),
            level=level,
            key=levels[level],
            value=value,
            nodes=tuple(nodes),
            parent=parent,
            unlabelled=unlabelled,
        )
    return _linked(tuple(levels), plugin, list(domains.values()), tuple(unplaced), tuple(labels))


def _linked(
    levels: tuple[str, ...],
    plugin: str,
    domains: list[Domain],
    unplaced: tuple[str, ...],
    order: tuple[str, ...],
) -> Topology:
    """The topology of these domains, each with its children, every list in Slurm's node order."""
    bare = Topology(levels, plugin, (), unplaced, order)
    ordered = sorted(domains, key=bare.rank)
    children: dict[str, list[str]] = {}
    for d in ordered:
        if d.parent:
            children.setdefault(d.parent, []).append(d.name)
    linked = tuple(replace(d, children=tuple(children.get(d.name, ()))) for d in ordered)
    return Topology(levels, plugin, linked, unplaced, order, {d.name: d for d in linked})


def domain_name(level: int, path: Sequence[str]) -> str:
    """The Slurm name of a domain: its level, its value made safe, a hash of the exact path."""
    last = path[-1]
    own = last.startswith("\0")
    shown = "unlabelled" if last == _UNLABELLED else ("node-" + last[1:]) if own else last
    safe = _UNSAFE.sub("-", shown.lower()).strip("-")[:_VALUE_CHARS].strip("-") or "x"
    digest = hashlib.sha256("\x1f".join(path).encode()).digest()
    tag = "".join(chr(ord("a") + b % 26) for b in digest[:5])
    return f"l{level}-{safe}-{tag}"


def is_domain_name(name: str) -> bool:
    """A name domain_name makes: on a Slurm node, a feature tandem-syncer owns."""
    return _DOMAIN_NAME.match(name) is not None


def node_domains(t: Topology) -> dict[str, tuple[str, ...]]:
    """Every Slurm node -> the domains it is in, widest first (none for an unplaced one): the
    features tandem-syncer gives it, which a job names to stay in one domain (`one_domain`)."""
    found: dict[str, list[str]] = {n: [] for n in t.order}
    for d in sorted(t.domains, key=lambda d: d.level):
        for node in d.nodes:
            found.setdefault(node, []).append(d.name)
    return {n: tuple(names) for n, names in found.items()}


def node_features(current: Sequence[str], domains: Sequence[str]) -> tuple[str, ...]:
    """A node's features with its domains as `domains` says: the others (slurm.conf's) kept, in
    their order."""
    return (*(f for f in current if not is_domain_name(f)), *domains)


@dataclass(frozen=True)
class OneDomain:
    """A job asking for all its nodes in one domain of `key`: any of `domains` (those with room
    for it), as a Slurm constraint `[a|b|...]` (a matching OR: every node has the same one)."""

    key: str
    level: int
    domains: tuple[Domain, ...]

    @property
    def constraint(self) -> str:
        names = [d.name for d in self.domains]
        return names[0] if len(names) == 1 else f"[{'|'.join(names)}]"


def one_domain(t: Topology, keys: Sequence[str], size: int) -> OneDomain | str:
    """The domains that can hold `size` nodes at the narrowest level of `keys` (each key holds when
    the narrowest does: a domain lies inside one of every wider level), or why none can."""
    unknown = [k for k in keys if t.level_of(k) is None]
    if unknown:
        levels = ", ".join(t.levels) or "none"
        return f"Slurm's topology has no level {', '.join(unknown)} (its levels: {levels})"
    level = max(t.level_of(k) or 0 for k in keys)
    at = sorted(t.at_level(level), key=t.rank)
    fitting = tuple(d for d in at if len(d.nodes) >= size)
    if fitting:
        return OneDomain(t.levels[level], level, fitting)
    largest = max(at, key=lambda d: len(d.nodes), default=None)
    if largest is None:
        return f"Slurm's topology has no {t.levels[level]} domain with a node in it"
    alone = sum(1 for d in at if _own(d))
    return (
        f"the largest {t.levels[level]} domain has {len(largest.nodes)} nodes "
        f"({_shown_value(largest)}, Slurm's {largest.name})"
    ) + (f"; {alone} node(s) have no {t.levels[level]} label, each a domain of its own" if alone else "")


def where(t: Topology, keys: Sequence[str], nodes: Sequence[str]) -> str:
    """Where a job's nodes are at the narrowest level of `keys`, for a person ("" when no key is
    a level): `in one <key> domain, <key>=<value> (Slurm feature <name>)`, or how many it spans."""
    levels = [lvl for k in keys if (lvl := t.level_of(k)) is not None]
    if not levels or not nodes:
        return ""
    level = max(levels)
    touched = {d.name: d for n in nodes if (d := t.domain_of(n, level)) is not None}
    if len(touched) == 1:
        d = next(iter(touched.values()))
        return f"in one {t.levels[level]} domain, {shown(d)}"
    return f"in {len(touched)} {t.levels[level]} domains ({', '.join(sorted(touched))})"


def shown(d: Domain) -> str:
    """A domain as a person reads it: its label and value, and its Slurm name."""
    return f"{_shown_value(d)} (Slurm feature {d.name})"


def _shown_value(d: Domain) -> str:
    if d.unlabelled:
        return f"the {len(d.nodes)} nodes without a {d.key} label"
    return f"{d.key}={d.value}" if d.value else f"node {d.nodes[0]}, without a {d.key} label"


def _own(d: Domain) -> bool:
    """A Node's own domain (no label at its level or below), not a label's nor the unlabelled."""
    return not d.value and not d.unlabelled


def unlabelled(t: Topology) -> dict[str, tuple[str, ...]]:
    """Each level's key -> the Slurm nodes whose Node misses its label (in one unlabelled domain
    or each in its own), in Slurm's order; a level every Node carries is left out."""
    missing: dict[str, tuple[str, ...]] = {}
    for level, key in enumerate(t.levels):
        found = {n for d in t.at_level(level) if not d.value for n in d.nodes}
        if found:
            missing[key] = tuple(n for n in t.order if n in found)
    return missing


def problems(t: Topology) -> list[str]:
    """What would make slurmctld refuse or die on this topology; [] when none (checked before
    anything is written, on top of the names' construction)."""
    found = [
        f"domain name {d.name!r} is not one Slurm parses" for d in t.domains if not _SAFE_NAME.match(d.name)
    ]
    names = [d.name for d in t.domains]
    if len(set(names)) != len(names):
        found.append("two domains have one name")
    if t.plugin == BLOCK and t.levels:
        sizes = [len(d.nodes) for d in t.at_level(len(t.levels) - 1)]
        base = block_size(t)
        if sizes and min(sizes) < base:
            found.append(f"a block of {min(sizes)} nodes is smaller than the base block size {base}")
    return found


def block_size(t: Topology) -> int:
    """The base block size written: the smallest block's (24.11 dies on a block smaller)."""
    sizes = [len(d.nodes) for d in t.at_level(len(t.levels) - 1)] if t.levels else []
    return min(sizes) if sizes else 1


def switches(t: Topology) -> list[tuple[str, str, tuple[str, ...]]]:
    """The tree's switches, leaves first, each defined before a switch names it: (name, "nodes" or
    "switches", what it links). A Node's own domains below its first are one switch, not a chain
    (Slurm counts a switch's level from its leaves); the root reaches every node."""
    chained = {d.name for d in t.domains if _own(d) and d.parent and _own(t.by_name[d.parent])}
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for d in sorted(t.domains, key=lambda d: (-d.level, *t.rank(d)[1:])):
        if d.name in chained:
            continue
        below = tuple(c for c in d.children if c not in chained)
        found.append((d.name, "switches", below) if below else (d.name, "nodes", d.nodes))
    tops = [d.name for d in t.at_level(0)]
    if t.unplaced:
        found.append(("l0-unplaced-nodes", "nodes", t.unplaced))
        tops.append("l0-unplaced-nodes")
    if tops:
        found.append((ROOT, "switches", tuple(tops)))
    return found


def render_conf(t: Topology) -> str:
    """`topology.conf` (Slurm 24.11; `TopologyPlugin=topology/<plugin>` in slurm.conf)."""
    head = f"# Written by tandem-syncer from Node labels {', '.join(t.levels)}; do not edit.\n"
    if t.plugin == TREE:
        lines = [
            f"SwitchName={name} {kind.capitalize()}={','.join(linked)}" for name, kind, linked in switches(t)
        ]
    else:
        lines = [f"BlockName={d.name} Nodes={','.join(d.nodes)}" for d in t.at_level(len(t.levels) - 1)]
        lines.append(f"BlockSizes={block_size(t)}")
    return head + "\n".join(lines) + "\n"


def render_yaml(t: Topology) -> str:
    """`topology.yaml` (Slurm 25.05 and later): one topology, `tandem`, the cluster's default."""
    entry: dict[str, Any] = {"topology": "tandem", "cluster_default": True}
    if t.plugin == TREE:
        entry["tree"] = {
            "switches": [
                {"switch": name, ("children" if kind == "switches" else "nodes"): ",".join(linked)}
                for name, kind, linked in switches(t)
            ]
        }
    else:
        blocks = [{"block": d.name, "nodes": ",".join(d.nodes)} for d in t.at_level(len(t.levels) - 1)]
        entry["block"] = {"block_sizes": [block_size(t)], "blocks": blocks}
    # JSON is YAML: no YAML writer's quoting rules to trust (every name here is safe anyway).
    return json.dumps([entry], indent=2) + "\n"


def to_json(t: Topology) -> str:
    """What `kubectl tandem topology` and the scheduler read: the levels and every domain."""
    return json.dumps(
        {
            "levels": list(t.levels),
            "plugin": t.plugin,
            "unplaced": list(t.unplaced),
            "order": list(t.order),
            "domains": [
                {
                    "name": d.name,
                    "level": d.level,
                    "key": d.key,
                    "value": d.value,
                    "nodes": list(d.nodes),
                    "parent": d.parent,
                    "unlabelled": d.unlabelled,
                }
                for d in t.domains
            ],
        },
        sort_keys=True,
    )


def from_json(text: str) -> Topology:
    """The inverse of to_json; ValueError when it is not one."""
    try:
        raw = json.loads(text)
        domains = [
            Domain(
                str(d["name"]),
                int(d["level"]),
                str(d["key"]),
                str(d["value"]),
                tuple(map(str, d["nodes"])),
                (),
                str(d["parent"]),
                bool(d.get("unlabelled", False)),
            )
            for d in raw["domains"]
        ]
        levels, plugin, unplaced, order = (
            tuple(map(str, raw["levels"])),
            str(raw["plugin"]),
            tuple(map(str, raw["unplaced"])),
            tuple(map(str, raw["order"])),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a topology Tandem wrote: {e}") from e
    return _linked(levels, plugin, domains, unplaced, order)
