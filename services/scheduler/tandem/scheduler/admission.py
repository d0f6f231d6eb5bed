"""Whether a group may become a job, and which: validation of every member (the tenant policy,
members that disagree), GPU claims Tandem can map, the group's size against Slurm's nodes, which
Nodes would take each member (kube-scheduler's fit: the nodes a job excludes, the nodes a member
requires), one topology domain when asked; then the Submit action, one job (or one heterogeneous
job of components) with a node per member."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tandem import keys, reasons
from tandem.dra.claims import MPS_CAPACITY, PodGpus, Refusal
from tandem.kube import JSON
from tandem.scheduler import domains, groups, matching, podstate, validation
from tandem.scheduler.actions import (
    NO_GPUS,
    NOT_JUDGED,
    Action,
    Judge,
    NotJudged,
    Observed,
    Pend,
    Refuse,
    Reject,
    Submit,
    Warn,
)
from tandem.scheduler.eligibility import Eligibility
from tandem.slurm.hostlist import compress, expand


def invalid(
    group: groups.Group, live: tuple[JSON, ...], results: tuple[validation.Validation, ...]
) -> Action | None:
    """Reject members that cannot be a job; a bound member is only told: evicting running work
    because a rule changed would be worse than the rule being late."""
    disagree = () if group.alone else validation.disagreements(list(live))
    if not disagree and all(r.ok for r in results):
        return None
    problems = (*(p for r in results for p in r.errors), *disagree)
    if group.alone:
        message = results[0].message()
    else:
        message = "; ".join(
            [
                *(
                    f"{m['metadata']['name']}: {r.message()}"
                    for m, r in zip(live, results, strict=True)
                    if not r.ok
                ),
                *(f"invalid for Slurm: {p}" for p in disagree),
            ]
        )
    bound = tuple(m for m in live if podstate.bound(m))
    if bound:
        return Warn(bound, reasons.REASON_WOULD_BE_REFUSED, would_be_refused_message(group, message))
    if not group.alone:
        message = f"{group.title} cannot be one Slurm job: {message}"
    return Reject(live, message, problems)


def unclaimable(o: Observed, group: groups.Group, live: tuple[JSON, ...]) -> Action | None:
    """Reject members whose GPU claims Slurm cannot allocate as asked (tandem.dra.claims says
    which field); a bound member only hears of it, as for any rule."""
    unmappable = [
        (m, _with_share_room(o.gpu.gpus[podstate.uid(m)], o.gpu.most_shares, podstate.bound(m)))
        for m in live
        if podstate.uid(m) in o.gpu.gpus
    ]
    unmappable = [(m, g) for m, g in unmappable if g.refusals]
    if not unmappable:
        return None
    problems = tuple(validation.Problem(r.where, r.reason) for _, g in unmappable for r in g.refusals)
    if group.alone:
        message = "GPU claims not allocatable by Slurm: " + unmappable[0][1].message()
    else:
        message = "; ".join(f"{m['metadata']['name']}: {g.message()}" for m, g in unmappable)
        message = f"{group.title} cannot be one Slurm job: GPU claims not allocatable by Slurm: {message}"
    bound = tuple(m for m in live if podstate.bound(m))
    if bound:
        return Warn(bound, reasons.REASON_WOULD_BE_REFUSED, would_be_refused_message(group, message))
    return Reject(live, message, problems)


def _with_share_room(gpus: PodGpus, most_shares: Mapping[str, int] | None, bound: bool) -> PodGpus:
    """Shares of one GPU beyond what any GPU has would pend for ever, and Slurm's backfill would
    hold a node for them (lab fact, issue 54): refused before they become a job."""
    if most_shares is None or bound or not gpus.shares:
        return gpus
    most = most_shares.get(gpus.capacity, 0)
    if gpus.shares <= most:
        return gpus
    room = (
        f"the most any GPU publishes is {most}"
        if most
        else f"no Node publishes a GPU with {gpus.capacity!r} capacity"
    )
    why = Refusal("spec.resourceClaims", f"asks for {gpus.shares} {gpus.capacity} of one GPU; {room}")
    return replace(gpus, refusals=(*gpus.refusals, why))


def with_claimed_gpus(
    claimed: Mapping[str, PodGpus], pod: JSON, result: validation.Validation
) -> validation.Validation:
    """The job asks Slurm for the GPUs the member's claims ask for, as GRES of their type: whole
    devices as `gpu`, shares of one GPU as `shard` (or `mps`)."""
    gpus = claimed.get(podstate.uid(pod))
    if gpus is None or not gpus.requests:
        return result
    if gpus.shares:
        asked = {keys.GPU_MPS if gpus.capacity == MPS_CAPACITY else keys.GPU_SHARES: gpus.shares}
    else:
        asked = {keys.GPU_RESOURCE: gpus.count}
    return replace(result, requests={**result.requests, **asked}, gpu_type=gpus.gres_type)


def would_be_refused_message(group: groups.Group, message: str) -> str:
    if group.alone:
        return (
            f"this Pod would now be refused ({message}); it keeps running: "
            "a bound Pod is never evicted by a policy change"
        )
    return (
        f"{group.title} would now be refused ({message}); its bound members keep running: "
        "a bound Pod is never evicted by a policy change"
    )


def new_job(
    o: Observed,
    group: groups.Group,
    live: tuple[JSON, ...],
    results: tuple[validation.Validation, ...],
) -> Action:
    missing = _missing(group, live)
    if missing:
        return Pend(
            live,
            reasons.REASON_WAITING_FOR_MEMBERS,
            f"{group.title} needs {group.min_count} members before Slurm places it; {missing} still missing",
        )
    if o.slurm_nodes and group.min_count > o.slurm_nodes:
        return Refuse(
            live,
            reasons.REASON_CANNOT_FIT,
            f"{group.title} needs {group.min_count} nodes, one per member, and Slurm has "
            f"{o.slurm_nodes}: it can never be placed",
        )
    chosen = _chosen(group, live)
    members = tuple(live[i] for i in chosen)
    valid = tuple(results[i] for i in chosen)
    if o.fits is NOT_JUDGED:
        return Judge()
    fits = member_fits(o.fits, members)
    unfit = job_unfit(group.min_count, bool(group.components), fits)
    named = None if group.alone else group.title
    unschedulable = unschedulable_pend(named, group.min_count, members, fits, unfit) or required_unfit(
        members, valid[0], fits, unfit
    )
    if unschedulable is not None:
        return unschedulable
    typed = _typed_whole_gpus(
        o.gpu.gpus, "the Pod's" if group.alone else f"{group.title}'s", members, valid, fits
    )
    if isinstance(typed, Pend):
        return typed
    one_domain = _one_domain(o, group, members, valid[0], frozenset(unfit))
    if not isinstance(one_domain, tuple):
        return one_domain
    counts = tuple(c.min_count for c in group.components)
    return Submit(members, typed, unfit, counts, one_domain)


def _one_domain(
    o: Observed,
    group: groups.Group,
    members: tuple[JSON, ...],
    valid: validation.Validation,
    unfit: frozenset[str],
) -> tuple[str, ...] | Pend | Refuse:
    """The Slurm constraint keeping each component (the job) in one domain, when the group asks."""
    ask = domains.asked(group, valid.job_annotations)
    if not ask:
        return ()
    who = "the Pod" if group.alone else group.title
    user = valid.job_annotations.get(keys.CONSTRAINTS, "")
    if "[" in user:
        return Refuse(
            members,
            reasons.REASON_INVALID,
            f"{who} asks for one domain of {ask.shown}, which Slurm is given as a matching OR of"
            f" domains ([a|b]); its {keys.CONSTRAINTS} {user!r} has one of its own, and Slurm takes"
            " one per job: drop its brackets or the topology ask",
        )
    if isinstance(o.topology, str):
        return Pend(
            members,
            reasons.REASON_UNSCHEDULABLE,
            f"{who} asks for one domain of {ask.shown}, and Slurm's topology is not known: {o.topology}",
            event="FailedScheduling",
        )
    found = domains.constraints(o.topology, group, ask, unfit, user)
    if isinstance(found, str):
        return Pend(members, reasons.REASON_UNSCHEDULABLE, f"{who} {found}", event="FailedScheduling")
    return found


def pending_constraint(
    o: Observed, group: groups.Group, valid: validation.Validation, unfit: frozenset[str]
) -> str | None:
    """The constraint a pending job of the group carries now that Slurm's topology and the Nodes are
    what they are: the Pods' own and the domains that can hold the group (as at its submit, judged
    again). None when there is nothing to follow: no domain asked, a heterogeneous job (each
    component keeps the domain chosen at its submit), Slurm's topology not known, or no domain with
    room now (the job waits as it is, for one to come back)."""
    ask = domains.asked(group, valid.job_annotations)
    user = valid.job_annotations.get(keys.CONSTRAINTS, "")
    if not ask or group.components or "[" in user or isinstance(o.topology, str):
        return None
    found = domains.constraints(o.topology, group, ask, unfit, user)
    return None if isinstance(found, str) else domains.combined(user, found[0])


def _typed_whole_gpus(
    claimed: Mapping[str, PodGpus],
    whose: str,
    members: tuple[JSON, ...],
    valid: tuple[validation.Validation, ...],
    fits: list[Eligibility],
) -> tuple[validation.Validation, ...] | Pend:
    """Members whose claims ask whole GPUs of no product ask Slurm for the one whole-GPU type the
    Nodes that would take them publish. Untyped, `gpu:2` may be given as MIG slices on a node of
    both (its slices are `gpu` GRES too), which no whole-GPU claim can hold. Several types: one
    Slurm job names one, so the member waits (a product selector or a nodeSelector settles it)."""
    needing = [i for i, m in enumerate(members) if claimed.get(podstate.uid(m), NO_GPUS).needs_whole_type]
    judged = [f.whole_gpu_types for f in fits if f.whole_gpu_types is not None]
    if not needing or not judged:
        return valid
    types = sorted(frozenset().union(*judged))
    if len(types) == 1:
        return tuple(replace(v, gpu_type=types[0]) if i in needing else v for i, v in enumerate(valid))
    who = whose
    if not types:
        message = (
            f"{who} ResourceClaims ask for whole GPUs (DeviceClass gpu.nvidia.com), and no Node that"
            " would take it publishes any"
        )
    else:
        message = (
            f"{who} ResourceClaims ask for whole GPUs of any product, and the Nodes that would take it"
            f" have whole GPUs of Slurm types {', '.join(types)}; one Slurm job asks for one type: select"
            ' device.attributes["gpu.nvidia.com"].productName in the claim, or narrow the Nodes with a'
            " nodeSelector"
        )
    return Pend(members, reasons.REASON_UNSCHEDULABLE, message, event="FailedScheduling")


def _missing(group: groups.Group, live: tuple[JSON, ...]) -> str:
    """How many members the group still lacks before it can be one job ("" for none): a het job
    names what each component lacks."""
    if not group.components:
        missing = group.min_count - len(live)
        return str(missing) if missing > 0 else ""
    lacking = []
    for index, component in enumerate(group.components):
        have = sum(1 for m in live if group.component_of(m) == index)
        if have < component.min_count:
            lacking.append(f"{component.min_count - have} of {component.name}")
    return ", ".join(lacking)


def _chosen(group: groups.Group, live: tuple[JSON, ...]) -> list[int]:
    """Which live members (their indexes, in rank order) the job is made for: the first minCount,
    or each component's first, component by component."""
    if not group.components:
        return list(range(min(group.min_count, len(live))))
    chosen = []
    for index, component in enumerate(group.components):
        mine = [i for i, m in enumerate(live) if group.component_of(m) == index]
        chosen.extend(mine[: component.min_count])
    return chosen


def member_fits(
    judged: Mapping[str, Eligibility] | NotJudged | None, members: tuple[JSON, ...]
) -> list[Eligibility]:
    if judged is None or judged is NOT_JUDGED:
        return []
    return [f for m in members if (f := judged.get(podstate.uid(m))) is not None]


def job_unfit(min_count: int, het: bool, fits: list[Eligibility]) -> tuple[str, ...]:
    """The Slurm nodes the job must not be given: every node some member would not take, so that
    Slurm chooses among the ones every member would. Members pinned apart, each to Nodes of its
    own (Kueue's TAS writes each Pod's Node into its nodeSelector), leave fewer such nodes than
    members: then the job may have only the nodes matched one to each member (`fits` in rank
    order), which Slurm takes whole or waits for; the bind matches the members to them again."""
    every = tuple(sorted({s for f in fits for s in f.excluded}))
    total = fits[0].total if fits else 0
    plain = not total or total - len(every) >= min_count
    if plain or het or len(fits) < min_count or not fits[0].nodes:
        return every
    takes = []
    for fit in fits[:min_count]:
        out = set(fit.excluded)
        takes.append([s for s in fit.nodes if s not in out])
    matched = matching.distinct(takes)
    if None in matched:
        return every  # no node of its own for each member: Unschedulable says so
    keep = set(matched)
    return tuple(sorted(s for s in fits[0].nodes if s not in keep))


def unschedulable_pend(
    title: str | None,
    min_count: int,
    members: tuple[JSON, ...],
    fits: list[Eligibility],
    unfit: tuple[str, ...],
) -> Pend | None:
    """Fewer Slurm nodes whose Nodes would take every member than members: kube-scheduler's reason.
    `title`: the group's, None for a Pod alone (the fit's own words then)."""
    total = fits[0].total if fits else 0
    if not total or total - len(unfit) >= min_count:
        return None
    if title is None:
        message = fits[0].message()
    else:
        worst = min(fits, key=lambda f: f.available)
        message = (
            f"{title} needs {min_count} nodes, one per member, and "
            f"{total - len(unfit)}/{total} would take every member; {worst.message()}"
        )
        if len({f.excluded for f in fits}) > 1 and all(f.available for f in fits):
            # Each would take some node, not one of its own each: pinned apart (_job_unfit) badly.
            message = (
                f"{title} needs {min_count} nodes, one per member, and the nodes its members"
                " would take leave no node of its own for each (two members pinned to one Node, as"
                f" Kueue's TAS may pin them, cannot share it); {worst.message()}"
            )
    return Pend(members, reasons.REASON_UNSCHEDULABLE, message, event="FailedScheduling")


def required_nodes(result: validation.Validation) -> frozenset[str]:
    named = result.job_annotations.get(keys.REQUIRED_NODES, "")
    return frozenset(expand(named) if named else ())


def required_unfit(
    members: tuple[JSON, ...], result: validation.Validation, fits: list[Eligibility], unfit: tuple[str, ...]
) -> Pend | None:
    """The annotation requires nodes whose Nodes would not take the Pod: it waits for them, as
    kube-scheduler's Pod pinned to a Node that does not fit (Slurm would refuse the job outright)."""
    missing = sorted(required_nodes(result) & set(unfit))
    if not missing:
        return None
    why = fits[0].message() if fits else ""
    message = f"required node(s) {compress(missing)} ({keys.REQUIRED_NODES}) would not take the Pod"
    return Pend(
        members,
        reasons.REASON_UNSCHEDULABLE,
        f"{message}; {why}" if why else message,
        event="FailedScheduling",
    )


def excluded_nodes(result: validation.Validation, unfit: tuple[str, ...]) -> frozenset[str]:
    """What the job must exclude: the nodes that do not fit and the ones the annotation names."""
    named = result.job_annotations.get(keys.EXCLUDED_NODES, "")
    return frozenset(unfit) | frozenset(expand(named) if named else ())
