"""Slurm's topology from Node labels (issue 38): domains, names Slurm parses whatever the label
values, and what each plugin's file says, as tables."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem import topology as topo
from tandem.slurm.hostlist import expand

ZONE, RACK = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack"
LEVELS = (ZONE, RACK)
LABELS = {
    "gpu-000": {ZONE: "a", RACK: "r1"},
    "cpu-001": {ZONE: "a", RACK: "r1"},
    "gpu-002": {ZONE: "a", RACK: "r2"},
    "cpu-003": {ZONE: "b", RACK: "r1"},  # another r1: under another zone, another domain
    "gpu-004": {ZONE: "b"},  # no rack: a rack of its own
    "cpu-005": {},  # no labels at all: its own zone and rack
    "gpu-006": None,  # its Node not known yet
}


def test_domains_follow_the_labels_widest_first() -> None:
    t = topo.build(LEVELS, topo.TREE, LABELS)
    zones = {d.value or f"own:{d.nodes[0]}": d.nodes for d in t.at_level(0)}
    assert zones == {
        "a": ("gpu-000", "cpu-001", "gpu-002"),
        "b": ("cpu-003", "gpu-004"),
        "own:cpu-005": ("cpu-005",),
    }
    racks = sorted((t.by_name[d.parent].value, d.value, d.nodes) for d in t.at_level(1))
    assert racks == [
        ("", "", ("cpu-005",)),
        ("a", "r1", ("gpu-000", "cpu-001")),
        ("a", "r2", ("gpu-002",)),
        ("b", "", ("gpu-004",)),
        ("b", "r1", ("cpu-003",)),
    ]
    assert t.unplaced == ("gpu-006",)
    assert t.domain_of("cpu-003", 1) != t.domain_of("gpu-000", 1)  # r1 twice: two domains


def test_the_tree_file_reaches_every_node_from_one_root() -> None:
    t = topo.build(LEVELS, topo.TREE, LABELS)
    conf = topo.render_conf(t)
    lines = [line for line in conf.splitlines() if not line.startswith("#")]
    switches = dict(re.findall(r"^SwitchName=(\S+) (.*)$", "\n".join(lines), re.MULTILINE))
    assert switches[topo.ROOT].startswith("Switches=")
    reached: set[str] = set()

    def walk(name: str) -> None:
        kind, _, listed = switches[name].partition("=")
        for item in listed.split(","):
            if kind == "Switches":
                walk(item)
            else:
                reached.add(item)

    walk(topo.ROOT)
    assert reached == set(LABELS)
    # Every switch is defined before a switch names it, as slurmctld reads them.
    seen: set[str] = set()
    for line in lines:
        name, rest = re.match(r"SwitchName=(\S+) (.*)", line).groups()  # type: ignore[union-attr]
        if rest.startswith("Switches="):
            assert set(rest.removeprefix("Switches=").split(",")) <= seen
        seen.add(name)


def test_the_yaml_file_says_the_same_tree() -> None:
    t = topo.build(LEVELS, topo.TREE, LABELS)
    (entry,) = json.loads(topo.render_yaml(t))
    assert entry["topology"] == "tandem" and entry["cluster_default"] is True
    conf = {m[0]: m[2] for m in re.findall(r"SwitchName=(\S+) (Switches|Nodes)=(\S+)", topo.render_conf(t))}
    assert {s["switch"]: s.get("children") or s.get("nodes") for s in entry["tree"]["switches"]} == conf


def test_blocks_are_the_narrowest_domains_and_never_smaller_than_the_base_size() -> None:
    t = topo.build(
        (RACK,),
        topo.BLOCK,
        {"n1": {RACK: "a"}, "n2": {RACK: "a"}, "n3": {RACK: "a"}, "n4": {RACK: "b"}, "n5": {RACK: "b"}},
    )
    conf = topo.render_conf(t)
    assert "BlockSizes=2" in conf and conf.count("BlockName=") == 2
    assert topo.problems(t) == []
    (entry,) = json.loads(topo.render_yaml(t))
    assert entry["block"]["block_sizes"] == [2] and len(entry["block"]["blocks"]) == 2


EDGE_VALUES = [
    "a" * 63,  # the longest label value
    "rack.1_A",  # dots and underscores
    "1rack1",  # digits at both ends
    "Rack-A",
    "rack-a",  # differs from the one above only in case
    "rack-[a-d]",  # not a label value, but what killed slurmctld: never written as such
    "x,y",
]


@pytest.mark.parametrize("value", EDGE_VALUES)
def test_a_label_value_at_the_edge_becomes_a_name_slurm_parses(value: str) -> None:
    t = topo.build((RACK,), topo.TREE, {"n1": {RACK: value}})
    (domain,) = t.at_level(0)
    assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z]", domain.name), domain.name
    assert expand(domain.name) == [domain.name]  # one name, no range
    assert topo.problems(t) == []


def test_values_that_differ_only_in_case_or_punctuation_are_two_domains() -> None:
    t = topo.build(
        (RACK,), topo.TREE, {"n1": {RACK: "Rack-A"}, "n2": {RACK: "rack-a"}, "n3": {RACK: "rack_a"}}
    )
    assert len({d.name for d in t.at_level(0)}) == 3


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"(gpu|cpu)-[0-9]{3}", fullmatch=True),
        st.dictionaries(
            st.sampled_from(LEVELS),
            st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True),
        ),
        max_size=20,
    )
)
def test_any_labels_give_a_tree_slurm_can_read(labels: dict[str, dict[str, str]]) -> None:
    t = topo.build(LEVELS, topo.TREE, dict(labels))
    assert topo.problems(t) == []
    assert set(t.nodes) == set(labels)
    for level in range(len(LEVELS)):
        covered = [n for d in t.at_level(level) for n in d.nodes]
        assert sorted(covered) == sorted(labels)  # each node in exactly one domain a level
    assert topo.from_json(topo.to_json(t)) == t


def test_levels_are_label_keys() -> None:
    assert topo.parse_levels(f" {ZONE}, {RACK} ") == LEVELS
    for bad in ("has space", "a/b/c", f"{ZONE},{ZONE}"):
        with pytest.raises(ValueError):
            topo.parse_levels(bad)


def test_a_node_without_labels_is_one_switch_of_its_own_under_the_root() -> None:
    t = topo.build(LEVELS, topo.TREE, {"cpu-005": {}, "cpu-006": {}})
    listed = topo.switches(t)
    assert [kind for _, kind, _ in listed] == ["nodes", "nodes", "switches"]
    (root,) = [s for s in listed if s[0] == topo.ROOT]
    assert root[2] == tuple(name for name, _, _ in listed[:2])
    # The node order a flat cluster takes them in.
    assert [linked for _, kind, linked in listed if kind == "nodes"] == [("cpu-005",), ("cpu-006",)]


def test_switches_are_listed_in_slurms_node_order_not_by_name() -> None:
    """slurm.conf lists the lab's GPU nodes before its CPU nodes; where several switches are equally
    good the tree plugin takes the first listed, so the tree keeps Slurm's order."""
    t = topo.build(LEVELS, topo.TREE, {"gpu-000": {}, "gpu-002": {}, "cpu-001": {}})
    assert [linked for _, kind, linked in topo.switches(t) if kind == "nodes"] == [
        ("gpu-000",),
        ("gpu-002",),
        ("cpu-001",),
    ]
    assert t.nodes == ("gpu-000", "gpu-002", "cpu-001")


# --- racks labelled without their zone (issue 53) --------------------------------------------------

RACKS_ONLY = {
    "cpu-001": {RACK: "r1"},
    "cpu-002": {RACK: "r1"},
    "cpu-003": {RACK: "r2"},
    "cpu-004": {RACK: "r2"},
    "cpu-005": {},  # no label at all
}


def test_racks_labelled_without_a_zone_are_racks_in_slurm() -> None:
    """Before: every Node its own zone and so its own rack; a gang asking for a rack was refused
    with "the largest rack domain has 1 node"."""
    t = topo.build(LEVELS, topo.TREE, RACKS_ONLY)
    racks = {d.value: d.nodes for d in t.at_level(1) if d.value}
    assert racks == {"r1": ("cpu-001", "cpu-002"), "r2": ("cpu-003", "cpu-004")}
    (shared,) = [d for d in t.at_level(0) if d.unlabelled]
    assert shared.nodes == ("cpu-001", "cpu-002", "cpu-003", "cpu-004") and shared.value == ""
    assert {t.by_name[d.parent].name for d in t.at_level(1) if d.value} == {shared.name}
    assert t.domain_of("cpu-005", 1) is not None and t.domain_of("cpu-005", 1).nodes == ("cpu-005",)  # type: ignore[union-attr]
    found = topo.one_domain(t, (RACK,), 2)
    assert isinstance(found, topo.OneDomain) and {d.value for d in found.domains} == {"r1", "r2"}
    assert not topo.problems(t)


def test_the_unlabelled_zone_is_one_switch_above_its_racks_in_slurms_file() -> None:
    t = topo.build(LEVELS, topo.TREE, RACKS_ONLY)
    conf = dict(re.findall(r"^SwitchName=(\S+) (.*)$", topo.render_conf(t), re.MULTILINE))
    (shared,) = [d for d in t.at_level(0) if d.unlabelled]
    assert shared.name.startswith("l0-unlabelled-")
    racks = {d.name for d in t.at_level(1) if d.value}
    assert set(conf[shared.name].removeprefix("Switches=").split(",")) == racks


def test_the_nodes_missing_each_levels_label_are_named_and_say_so_in_a_refusal() -> None:
    t = topo.build(LEVELS, topo.TREE, RACKS_ONLY)
    assert topo.unlabelled(t) == {
        ZONE: ("cpu-001", "cpu-002", "cpu-003", "cpu-004", "cpu-005"),
        RACK: ("cpu-005",),
    }
    assert topo.unlabelled(topo.build(LEVELS, topo.TREE, {"a": {ZONE: "z", RACK: "r"}})) == {}
    flat = topo.build(LEVELS, topo.TREE, {f"cpu-00{i}": {} for i in range(3)})
    why = topo.one_domain(flat, (RACK,), 2)
    assert isinstance(why, str) and "3 node(s) have no topology.kubernetes.io/rack label" in why, why


def test_the_published_topology_keeps_its_unlabelled_domain() -> None:
    t = topo.build(LEVELS, topo.TREE, RACKS_ONLY)
    again = topo.from_json(topo.to_json(t))
    assert again == t and any(d.unlabelled for d in again.domains)
