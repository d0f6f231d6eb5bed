"""A gang's topology ask reaches its Slurm job (issue 38): read from a PodGroup (any version), a
CompositePodGroup and the members' annotation; mapped to the domains with room at the asked level;
refused with the key and the largest domain named when none has room; a matching OR Slurm never
relaxes, combined with the Pods' own constraint; and where the job landed, for a person."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from tandem import keys, reasons, topology
from tandem.scheduler import actions, domains, groups, jobspec, validation
from tandem.scheduler import decide as d
from tandem.scheduler.eligibility import Eligibility
from tandem.slurm.dialects import Dialect
from tests.unit.scheduler import test_decide_group as g

ZONE, RACK = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack"
# Zone z1: rack a (cpu-001..003), rack b (cpu-004, cpu-005); zone z2: rack a (cpu-006); cpu-007 unlabelled.
LABELS: dict[str, dict[str, str] | None] = {
    "cpu-001": {ZONE: "z1", RACK: "a"},
    "cpu-002": {ZONE: "z1", RACK: "a"},
    "cpu-003": {ZONE: "z1", RACK: "a"},
    "cpu-004": {ZONE: "z1", RACK: "b"},
    "cpu-005": {ZONE: "z1", RACK: "b"},
    "cpu-006": {ZONE: "z2", RACK: "a"},
    "cpu-007": {},
}
T = topology.build((ZONE, RACK), topology.TREE, LABELS)


def _rack(zone: str, rack: str) -> topology.Domain:
    return next(d for d in T.at_level(1) if d.value == rack and T.by_name[d.parent].value == zone)


def _podgroup(size: int, *keys_: str) -> dict[str, Any]:
    return {
        **g.PODGROUP,
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": size}},
            "schedulingConstraints": {"topology": [{"key": k} for k in keys_]},
        },
    }


def _group(size: int, *keys_: str) -> groups.Group:
    found = groups.resolve(groups.target(g.KEY), [], {"default/train": _podgroup(size, *keys_)}.get)
    assert found is not None
    return found


# --- the topology: domains as features, and the domains that can hold a job ---------------------


def test_each_node_carries_its_domain_at_every_level_and_keeps_its_own_features() -> None:
    assert topology.node_domains(T)["cpu-004"] == (_rack("z1", "b").parent, _rack("z1", "b").name)
    assert topology.node_features(("gpu", "l1-old-rack-abcde", "h100"), ("l0-z-abcde",)) == (
        "gpu",
        "h100",
        "l0-z-abcde",
    )
    assert all(topology.is_domain_name(d.name) for d in T.domains)
    assert not any(topology.is_domain_name(f) for f in ("gpu", "h100", "l1", "rack-a", "l1-A-abcde"))


def test_one_domain_lists_only_the_domains_with_room_at_the_narrowest_level_asked() -> None:
    found = topology.one_domain(T, (ZONE, RACK), 2)
    assert isinstance(found, topology.OneDomain)
    assert found.key == RACK and {d.name for d in found.domains} == {
        _rack("z1", "a").name,
        _rack("z1", "b").name,
    }
    assert found.constraint == f"[{_rack('z1', 'a').name}|{_rack('z1', 'b').name}]"
    zone = topology.one_domain(T, (ZONE,), 5)
    assert isinstance(zone, topology.OneDomain) and [d.value for d in zone.domains] == ["z1"]
    assert zone.constraint == zone.domains[0].name  # one domain: no brackets


def test_no_domain_with_room_names_the_key_and_the_largest() -> None:
    why = topology.one_domain(T, (RACK,), 4)
    assert why == (
        f"the largest {RACK} domain has 3 nodes ({RACK}=a, Slurm's {_rack('z1', 'a').name});"
        f" 1 node(s) have no {RACK} label, each a domain of its own"  # cpu-007
    )
    unknown = topology.one_domain(T, ("nvidia.com/gpu.clique",), 2)
    assert unknown == f"Slurm's topology has no level nvidia.com/gpu.clique (its levels: {ZONE}, {RACK})"


# --- reading the ask ---------------------------------------------------------------------------------


def test_the_ask_is_read_from_the_podgroup_the_composite_and_the_annotation() -> None:
    assert groups.topology_keys(_podgroup(2, RACK, RACK, ZONE)) == (RACK, ZONE)
    assert groups.topology_keys({"spec": {"schedulingConstraints": {"topology": "rack"}}}) == ()
    assert groups.topology_keys({"spec": {"schedulingConstraints": {"topology": [{"key": 3}, {}]}}}) == ()
    assert _group(2, RACK).topology == (RACK,)
    composite = {
        "metadata": {"namespace": "default", "name": "serve", "uid": "c"},
        "spec": {"schedulingPolicy": {"gang": {}}, "schedulingConstraints": {"topology": [{"key": ZONE}]}},
    }
    child = {
        "metadata": {"namespace": "default", "name": "decode"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    }
    group = groups.resolve_composite(groups.target("default/cpg:serve"), composite, [child], [])
    assert group.topology == (ZONE,) and group.components[0].topology == (RACK,)
    alone = groups.alone(groups.target("default/p"), None)
    assert domains.asked(alone, {keys.TOPOLOGY: f"{RACK}, {ZONE}"}) == domains.Asked((RACK, ZONE), ())


@pytest.mark.parametrize(
    ("value", "refused"),
    [(RACK, False), (f"{ZONE},{RACK}", False), ("", True), ("not a key!", True), ("a/b/c", True)],
)
def test_the_annotation_must_name_label_keys(value: str, refused: bool) -> None:
    pod = g.member(0, annotations={keys.TOPOLOGY: value})
    result = validation.validate(pod, 30, policy=g.POLICY)
    assert any(p.field == f"metadata.annotations[{keys.TOPOLOGY}]" for p in result.errors) == refused


# --- the decision ------------------------------------------------------------------------------------


def _submit(group: groups.Group, topo: topology.Topology | str = T, **kw: Any) -> actions.Action:
    members = [g.member(i, **kw) for i in range(group.min_count)]
    return d.decide(g.seen(members, group=group, fits=None, topology=topo))


def test_a_gang_asking_for_one_rack_is_submitted_with_the_racks_with_room_as_a_matching_or() -> None:
    action = _submit(_group(3, RACK))
    assert isinstance(action, actions.Submit)
    assert action.domains == (_rack("z1", "a").name,)  # the one rack of three


def test_a_gang_too_large_for_every_rack_waits_unschedulable_naming_the_key_and_the_largest() -> None:
    action = _submit(_group(4, RACK))
    assert isinstance(action, actions.Pend) and action.reason == reasons.REASON_UNSCHEDULABLE
    assert action.event == "FailedScheduling"
    assert action.message == (
        f"PodGroup default/train needs its 4 nodes in one domain of {RACK}, and the largest {RACK} "
        f"domain has 3 nodes ({RACK}=a, Slurm's {_rack('z1', 'a').name}); 1 node(s) have no {RACK} label,"
        " each a domain of its own"
    )


def test_without_a_published_topology_the_gang_waits_and_says_why() -> None:
    action = _submit(_group(2, RACK), "ConfigMap tandem/tandem-topology is not there")
    assert (
        isinstance(action, actions.Pend) and "ConfigMap tandem/tandem-topology is not there" in action.message
    )


def test_a_pods_own_matching_or_cannot_be_combined_and_is_refused() -> None:
    action = _submit(_group(2, RACK), annotations={keys.CONSTRAINTS: "[h100|a100]"})
    assert isinstance(action, actions.Refuse) and action.reason == reasons.REASON_INVALID
    assert "drop its brackets" in action.message


def test_a_gang_asking_nothing_is_submitted_with_no_domain() -> None:
    action = _submit(g.GROUP)  # type: ignore[arg-type]
    assert isinstance(action, actions.Submit) and action.domains == ()


def test_the_job_keeps_the_pods_own_constraint_and_the_domains() -> None:
    group = _group(2, RACK)
    members = [g.member(i, annotations={keys.CONSTRAINTS: "cpu|gpu"}) for i in range(2)]
    action = d.decide(g.seen(members, group=group, fits=None, topology=T))
    assert isinstance(action, actions.Submit)
    cfg = jobspec.PlaceholderConfig("#!/bin/sh\n", {}, {})
    spec = jobspec.build_group_job_spec(
        group.ref,
        action.members,
        cfg,
        [v.requests for v in action.validations],
        annotations=action.validations[0].job_annotations,
        domains=action.domains,
    )
    assert spec.constraints == f"(cpu|gpu)&[{_rack('z1', 'a').name}|{_rack('z1', 'b').name}]"
    body = Dialect("v0.0.41").submit_body(spec)
    assert body["job"]["constraints"] == spec.constraints


def test_a_composites_own_ask_names_the_roomiest_domain_and_each_components_stays_inside_it() -> None:
    group = groups.Group(
        g.GROUP.ref if g.GROUP else groups.alone(groups.target("x/y"), None).ref,
        4,
        components=(groups.Component("prefill", 2), groups.Component("decode", 2, (RACK,))),
        topology=(ZONE,),
    )
    ask = domains.Asked((ZONE,), ((), (RACK,)))
    found = domains.constraints(T, group, ask, frozenset())
    z1 = next(d for d in T.at_level(0) if d.value == "z1")
    assert found == (z1.name, f"[{_rack('z1', 'a').name}|{_rack('z1', 'b').name}]")
    # Too big for every zone: said, naming the largest.
    big = groups.Group(group.ref, 6, components=group.components, topology=(ZONE,))
    assert isinstance(domains.constraints(T, big, ask, frozenset()), str)


def test_past_slurms_length_limit_the_roomiest_domains_are_kept() -> None:
    many = topology.build(
        (RACK,), topology.TREE, {f"n{i:04d}": {RACK: f"rack-{i // 2:03d}"} for i in range(400)}
    )
    group = groups.Group(groups.alone(groups.target("x/y"), None).ref, 2, topology=(RACK,))
    busy = frozenset(f"n{i:04d}" for i in range(0, 400, 4))  # every other rack has a node taken
    constraints = domains.constraints(many, group, domains.Asked((RACK,), ()), busy, "cpu")
    assert isinstance(constraints, tuple)
    (found,) = constraints
    assert len(domains.combined("cpu", found)) <= domains.MAX_CONSTRAINT
    kept = found.strip("[]").split("|")
    by_name = {d.name: d for d in many.domains}
    assert all(not (set(by_name[n].nodes) & busy) for n in kept)  # the fully free racks first


def test_where_the_job_landed_is_said_by_label_value_and_slurm_name() -> None:
    ask = domains.Asked((RACK,), ())
    assert domains.landed(T, ask, ("cpu-004", "cpu-005")) == (
        f"in one {RACK} domain, {RACK}=b (Slurm feature {_rack('z1', 'b').name})"
    )
    assert domains.landed(T, ask, ("cpu-003", "cpu-004")).startswith(f"in 2 {RACK} domains")
    assert domains.landed(T, domains.Asked(), ("cpu-004",)) == ""
    assert domains.landed("no topology", ask, ("cpu-004",)) == ""


# --- a waiting gang follows its domains (issue 53) ------------------------------------------------


def _pending_job(features: str, size: int = 2) -> Any:
    pending = g.job(state="PENDING", reason="Resources", node_count=size)
    return replace(pending, job=replace(pending.job, features=features))


def _waiting(
    group: groups.Group, features: str, topo: topology.Topology | str = T, own: str = "", **kw: Any
) -> actions.Action:
    """The decision for the group's pending job 7 holding `features`, every node taking every
    member; `own`: the members' own constraint."""
    annotations = {keys.CONSTRAINTS: own} if own else {}
    members = [g.member(i, 7, annotations=annotations) for i in range(group.min_count)]
    fits = {f"uid-{i}": Eligibility(len(LABELS), (), Counter()) for i in range(group.min_count)}
    pending = _pending_job(features, group.min_count)
    return d.decide(g.seen(members, pending, group=group, fits=fits, topology=topo, **kw))


BOTH_RACKS = f"[{_rack('z1', 'a').name}|{_rack('z1', 'b').name}]"
WITHOUT_B = topology.build((ZONE, RACK), topology.TREE, {**LABELS, "cpu-004": {}, "cpu-005": {}})


def test_a_pending_gang_keeps_its_job_while_its_domains_are_the_same() -> None:
    action = _waiting(_group(2, RACK), BOTH_RACKS)
    assert isinstance(action, actions.Pend) and action.reason == reasons.REASON_PENDING


def test_a_rack_labelled_while_the_gang_waits_is_added_to_its_pending_job() -> None:
    """Before: the job kept the domains of its submit; a rack labelled later was never tried."""
    labels = {**LABELS, "cpu-007": {ZONE: "z1", RACK: "c"}, "cpu-008": {ZONE: "z1", RACK: "c"}}
    grown = topology.build((ZONE, RACK), topology.TREE, labels)
    action = _waiting(_group(2, RACK), BOTH_RACKS, grown)
    assert isinstance(action, actions.Constrain) and action.job_id == 7
    assert {d.value for d in grown.at_level(1) if d.name in action.constraints} == {"a", "b", "c"}
    # Told once: until the job shows it, what this process set stands for it.
    again = _waiting(_group(2, RACK), BOTH_RACKS, grown, job_constraint=action.constraints)
    assert not isinstance(again, actions.Constrain)


def test_a_rack_emptied_of_its_labels_is_taken_out_of_the_pending_job() -> None:
    action = _waiting(_group(2, RACK), BOTH_RACKS, WITHOUT_B)
    assert action == actions.Constrain(7, _rack("z1", "a").name)


def test_a_pending_job_is_left_as_it_is_when_no_domain_has_room_or_the_topology_is_unknown() -> None:
    bare = topology.build((ZONE, RACK), topology.TREE, {n: {} for n in LABELS})
    assert not isinstance(_waiting(_group(2, RACK), BOTH_RACKS, bare), actions.Constrain)
    unknown = _waiting(_group(2, RACK), BOTH_RACKS, "ConfigMap tandem/tandem-topology is not there")
    assert not isinstance(unknown, actions.Constrain)


def test_the_pods_own_constraint_stays_in_the_updated_one() -> None:
    held = f"(cpu)&{BOTH_RACKS}"
    assert not isinstance(_waiting(_group(2, RACK), held, own="cpu"), actions.Constrain)
    action = _waiting(_group(2, RACK), held, WITHOUT_B, own="cpu")
    assert action == actions.Constrain(7, f"(cpu)&{_rack('z1', 'a').name}")
