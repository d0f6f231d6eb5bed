"""A group's topology ask (issue 38) as Slurm constraints, and where its job landed. Pure.

A group asks for all its nodes in one domain of a Node label (a zone, a rack, an NVLink clique):
its PodGroup's or CompositePodGroup's spec.schedulingConstraints.topology, or the members'
annotation `keys.TOPOLOGY` (LeaderWorkerSets, Pods alone). Slurm gets it as a matching OR of the
domains with room for the job, `[l1-rack-a-xxxxx|l1-rack-b-yyyyy]`: every node then has the same one
of those features (tandem-syncer gives each node its domains as features). Unlike `--switches`
(relaxed after `max_switch_wait`, leaf switches only) and `--segment` (capped at the base block
size), a constraint is never relaxed and holds at any level, before and after preemption.

A heterogeneous job (a CompositePodGroup, an LWS whose leader differs) keeps each component in one
domain by its own matching OR; Slurm has no way to keep several components under one, so for the
CompositePodGroup's own ask Tandem names the domain: of those with room for the whole job, the one
where the most nodes would take every member, first in Slurm's order on a tie.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tandem import keys, topology
from tandem.scheduler import groups

# Slurm refuses a job whose feature expression is longer (job_mgr's 1024-byte string limit).
MAX_CONSTRAINT = 1024


@dataclass(frozen=True)
class Asked:
    """The keys a group asks one domain of: for all its nodes, and per component."""

    whole: tuple[str, ...] = ()
    parts: tuple[tuple[str, ...], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.whole) or any(self.parts)

    @property
    def shown(self) -> str:
        return ", ".join(dict.fromkeys((*self.whole, *(k for p in self.parts for k in p))))


def asked(group: groups.Group, annotations: Mapping[str, str]) -> Asked:
    """What the group's object says, and the members' annotation (they agree: validation)."""
    try:
        annotated = topology.parse_levels(annotations.get(keys.TOPOLOGY, ""))
    except ValueError:
        annotated = ()  # validation refused the members already
    whole = tuple(dict.fromkeys((*group.topology, *annotated)))
    return Asked(whole, tuple(c.topology for c in group.components))


def constraints(
    t: topology.Topology,
    group: groups.Group,
    ask: Asked,
    unfit: frozenset[str],
    user_constraint: str = "",
) -> tuple[str, ...] | str:
    """One Slurm constraint per component (one for a homogeneous job; "" where a component asks
    nothing), or why no domain can hold the group. `unfit`: Slurm nodes whose Nodes would not take
    some member."""
    budget = MAX_CONSTRAINT - (len(user_constraint) + 3 if user_constraint else 0)
    if not group.components:
        found = topology.one_domain(t, ask.whole, group.min_count)
        if isinstance(found, str):
            return _too_big(ask.whole, group.min_count, found)
        return (_within(found.domains, budget, unfit),)
    chosen: topology.Domain | None = None
    if ask.whole:
        whole = topology.one_domain(t, ask.whole, group.min_count)
        if isinstance(whole, str):
            return _too_big(ask.whole, group.min_count, whole)
        rooms = [(_room(d, unfit), -i) for i, d in enumerate(whole.domains)]
        chosen = whole.domains[rooms.index(max(rooms))]
    out: list[str] = []
    for component, keys_ in zip(group.components, ask.parts, strict=True):
        if not keys_:
            out.append(chosen.name if chosen is not None else "")
            continue
        found = topology.one_domain(t, keys_, component.min_count)
        if isinstance(found, str):
            return f"{component.name}: {_too_big(keys_, component.min_count, found)}"
        domains = found.domains
        if chosen is not None:
            if found.level <= chosen.level:
                domains = (chosen,)  # a domain inside the chosen one's is inside this one
            else:
                domains = tuple(d for d in domains if set(d.nodes) <= set(chosen.nodes))
        if not domains:
            return (
                f"{component.name}: no {found.key} domain inside {_shown(chosen)} has room for its "
                f"{component.min_count} nodes"
            )
        out.append(_within(domains, budget, unfit))
    return tuple(out)


def _too_big(keys_: Sequence[str], size: int, why: str) -> str:
    return f"needs its {size} nodes in one domain of {', '.join(keys_)}, and {why}"


def _room(d: topology.Domain, unfit: frozenset[str]) -> int:
    return sum(1 for n in d.nodes if n not in unfit)


def _within(domains: Sequence[topology.Domain], budget: int, unfit: frozenset[str]) -> str:
    """`[a|b|...]` no longer than `budget`: past it, the domains where most nodes would take the
    members (a cluster of hundreds of racks; every one still holds the job in one)."""
    names = [d.name for d in domains]
    if len(names) == 1:
        return names[0]
    if sum(len(n) + 1 for n in names) + 1 <= budget:
        return f"[{'|'.join(names)}]"
    kept: list[str] = []
    for d in sorted(domains, key=lambda d: -_room(d, unfit)):
        if sum(len(n) + 1 for n in (*kept, d.name)) + 1 > budget:
            break
        kept.append(d.name)
    return kept[0] if len(kept) == 1 else f"[{'|'.join(kept)}]"


def combined(user_constraint: str, domain: str) -> str:
    """The job's constraint: the Pod's own and the domain's, both held."""
    if not domain:
        return user_constraint
    return f"({user_constraint})&{domain}" if user_constraint else domain


def landed(t: topology.Topology | str, ask: Asked, nodes: Sequence[str]) -> str:
    """Where a job's nodes are, at the narrowest level asked, for a person ("" for no ask)."""
    if not ask or isinstance(t, str):
        return ""
    return topology.where(t, ask.whole or tuple(k for p in ask.parts for k in p), nodes)


def core_domain(t: topology.Topology | str, ask: Asked, nodes: Sequence[str]) -> str:
    """The feature of the one domain a job's nodes share at the narrowest level of the group's ask
    (its whole-job keys), for the jobs that must join it there (an elastic gang's extras); "" for
    no ask, no such level, or nodes spread over several."""
    if not ask.whole or isinstance(t, str) or not nodes:
        return ""
    levels = [lvl for k in ask.whole if (lvl := t.level_of(k)) is not None]
    if not levels:
        return ""
    found = [t.domain_of(n, max(levels)) for n in nodes]
    names = {d.name for d in found if d is not None}
    return names.pop() if len(names) == 1 and None not in found else ""


def _shown(d: topology.Domain | None) -> str:
    return "none" if d is None else topology.shown(d)
