"""Slurm's GRES strings as values: which GPU indices a job holds on a node, what a node has.

Shapes, as slurmctld prints them (src/stepmgr/gres_stepmgr.c, src/interfaces/gres.c):
- a job's `gres_detail`, one string per allocated node: `gpu:h100:2(IDX:0-1,4)`; a type of the
  node the job holds none of, `gpu:h100:0(IDX:)` (an untyped request on a node of several types:
  `gpu:1g.10gb:2(IDX:0-1),gpu:h100:0(IDX:)`); a shared GRES
  (shard, mps) per GPU index instead, `shard:2(2/4,0/4)` (allocated/available on GPU 0, 1, ...);
  a GRES without a bitmap `gpu:h100(CNT:2)`; several GRES comma-separated.
- a node's `gres`: `gpu:h100:8(S:0-1)` (S: the sockets), counts may carry a suffix (`shard:1K`),
  `no_consume` may follow the type; `(null)` when the node has none.
- a node's `gres_used`: `gpu:h100:2(IDX:0-1)`, `gpu:h100:0(IDX:N/A)`, shared `shard:3(2/4,1/4)`
  (`-/4`: that GPU is wholly taken, so none of its shards are available).

Everything is bounded before it is expanded: an index range is measured, never materialised over
the cap, and Slurm's own index list is cut short past 128 characters (bit_fmt into a fixed
buffer), so a list whose length disagrees with its count is refused rather than half-believed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from tandem.slurm.models import Job

# Far beyond what one node's GRES string holds (8 GPUs x 7 MIG slices plus shards is ~200).
MAX_TEXT = 4096
MAX_ITEMS = 64
# A GRES index is a bit in one node's bitmap: a node has a few dozen GPUs or MIG slices.
MAX_INDEX = 4095
# Shard and MPS counts run to the thousands per node; memory-like GRES use suffixes up to P.
MAX_COUNT = 2**53
_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}

# GRES names are plugin names (gpu, shard, mps, nic, or a site's own), lower case in practice.
_NAME = r"[A-Za-z][A-Za-z0-9_]{0,63}"
# A type is whatever gres.conf says (h100, 1g.10gb, nvidia_h100_80gb_hbm3); never ':' '(' ','.
_TYPE = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}"
_ITEM = re.compile(
    rf"(?P<name>{_NAME})(?::(?P<type>{_TYPE}))??(?P<no_consume>:no_consume)?"
    r"(?::(?P<count>[0-9]{1,20})(?P<suffix>[KMGTP]?))?"
    r"(?:\((?P<detail>[^()]{0,2048})\))?"
)
# A type Tandem writes into a job's GRES (h100, 1g.10gb): narrower than what it reads, no '+'
# (MIG's `1g.10gb+me` is a profile, and names a type only through configuration).
_ASKED_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_gres_type(text: str) -> bool:
    """A GRES type Tandem may ask Slurm for."""
    return _ASKED_TYPE.fullmatch(text) is not None


def parse_type_map(
    text: str, *, what: str, key: str, key_ok: Callable[[str], bool], key_is: str, example: str
) -> dict[str, str]:
    """`KEY=TYPE,KEY=TYPE` -> {key: Slurm GRES type}, each item checked: a ValueError names the
    item and says what was expected: `what` the item is ("GPU type"), the form of its `key`
    ("LABEL_VALUE"), what a key `key_ok` accepts `key_is` ("a Kubernetes label value"), an
    `example`. The key is what precedes the first '='."""
    mapping: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, gres_type = (part.strip() for part in item.partition("="))
        if not sep:
            raise ValueError(f"{what} {item!r} must be {key}=GRES_TYPE, e.g. {example}")
        if not key_ok(name):
            raise ValueError(f"{what} {item!r}: {name!r} is not {key_is}")
        if not is_gres_type(gres_type):
            raise ValueError(
                f"{what} {item!r}: {gres_type!r} is not a Slurm GRES type (letters, digits, '.', '_', '-')"
            )
        if mapping.get(name, gres_type) != gres_type:
            raise ValueError(f"{what} {name!r} is mapped twice: to {mapping[name]!r} and to {gres_type!r}")
        mapping[name] = gres_type
    return mapping


_RANGE = re.compile(r"([0-9]{1,10})(?:-([0-9]{1,10}))?")
_SHARE = re.compile(r"(-|[0-9]{1,20})/([0-9]{1,20})")


@dataclass(frozen=True)
class Share:
    """One GPU's part of a shared GRES: `used` of its `total` shards (-1: the GPU is wholly taken)."""

    index: int
    used: int
    total: int


@dataclass(frozen=True)
class Gres:
    """One GRES of a job on a node, or of a node: `gpu:h100:2(IDX:0-1)`."""

    name: str
    type: str = ""
    count: int = 0
    # The bitmap indices (IDX:) in ascending order; None when Slurm printed none (N/A, CNT, S).
    indices: tuple[int, ...] | None = None
    sockets: tuple[int, ...] = ()
    # Shared GRES (shard, mps): per GPU index, how many are used of how many.
    shares: tuple[Share, ...] = ()
    no_consume: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.type)

    def __str__(self) -> str:
        typed = f"{self.name}:{self.type}" if self.type else self.name
        return f"{typed}:{self.count}"


class GresError(ValueError):
    """A GRES string Tandem does not read; the message names the part and why."""


def parse_gres(text: str) -> tuple[Gres, ...]:
    """A comma-separated GRES string (a job's gres_detail entry, a node's gres or gres_used)."""
    if len(text) > MAX_TEXT:
        raise GresError(f"GRES string of {len(text)} characters, more than the {MAX_TEXT} Tandem reads")
    text = text.strip()
    if text in ("", "(null)"):
        return ()
    items = _split_items(text)
    if len(items) > MAX_ITEMS:
        raise GresError(f"{len(items)} GRES in one string, more than the {MAX_ITEMS} Tandem reads")
    parsed = tuple(_parse_item(item) for item in items)
    seen: set[tuple[str, str]] = set()
    for gres in parsed:
        if gres.key in seen:
            raise GresError(f"{_label(gres)} appears twice in {_quote(text)}")
        seen.add(gres.key)
    return parsed


def parse_job_gres_detail(details: list[str] | tuple[str, ...], node_position: int) -> tuple[Gres, ...]:
    """The GRES a job holds on its `node_position`-th node (gres_detail has one entry per node of
    the job's hostlist, in order)."""
    if not 0 <= node_position < len(details):
        raise GresError(f"the job's gres_detail has {len(details)} entries, none for node {node_position}")
    return parse_gres(details[node_position])


def gpu_indices(details: list[str] | tuple[str, ...], nodes: tuple[str, ...], node: str) -> tuple[int, ...]:
    """Every GPU index (whole GPUs and MIG slices: one bitmap) a job holds on `node`; () when it
    holds none there or Slurm printed none that Tandem reads."""
    if node not in nodes:
        return ()
    try:
        held = parse_job_gres_detail(details, nodes.index(node))
    except GresError:
        return ()
    return tuple(sorted(i for g in held if g.name == "gpu" for i in g.indices or ()))


def indices_of(gres: tuple[Gres, ...], name: str, gres_type: str) -> tuple[int, ...]:
    """The indices of `name:gres_type` among parsed GRES; () when it is absent or printed none."""
    for g in gres:
        if g.key == (name, gres_type):
            return g.indices or ()
    return ()


def _split_items(text: str) -> list[str]:
    # Index lists hold commas too (`gpu:h100:3(IDX:0-1,4)`): split only outside parentheses.
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
            if depth > 1:
                raise GresError(f"nested parentheses in {_quote(text)}")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise GresError(f"unbalanced ')' in {_quote(text)}")
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise GresError(f"unclosed '(' in {_quote(text)}")
    items.append(text[start:].strip())
    if any(not item for item in items):
        raise GresError(f"empty GRES item in {_quote(text)}")
    return items


def _parse_item(item: str) -> Gres:
    m = _ITEM.fullmatch(item)
    if m is None:
        raise GresError(
            f"{_quote(item)} is not a GRES (expected name[:type]:count[(IDX:...|S:...|CNT:n)],"
            " e.g. gpu:h100:2(IDX:0-1))"
        )
    name, gres_type = m["name"], m["type"] or ""
    if gres_type == "no_consume":  # `gpu:no_consume:2`: the flag, not a type
        gres_type = ""
    detail = m["detail"]
    count = _count(m["count"], m["suffix"], item) if m["count"] is not None else None
    gres = Gres(name=name, type=gres_type, count=count or 0, no_consume=bool(m["no_consume"]))
    if detail is None:
        if count is None:
            raise GresError(f"{_quote(item)} has no count")
        return gres
    if detail.startswith("CNT:"):
        if count is not None:
            raise GresError(f"{_quote(item)}: CNT follows the name, not a count")
        return replace(gres, count=_count(detail[4:], "", item))
    if count is None:
        raise GresError(f"{_quote(item)} has no count")
    if detail.startswith("IDX:"):
        listed = detail[4:]
        # `N/A`: a node's type none of whose GPUs is in use; empty: a type of the node a job holds
        # none of (an untyped request gets a record of every type, `gpu:h100:0(IDX:)`).
        if listed in ("N/A", ""):
            if count:
                raise GresError(f"{_quote(item)}: {count} in use but no index listed")
            return replace(gres, indices=())
        indices = _indices(listed, item)
        # Slurm cuts a long list short without a marker; a count that disagrees means exactly that.
        if len(indices) != count:
            raise GresError(
                f"{_quote(item)}: {count} counted but {len(indices)} indices listed"
                " (Slurm truncates long index lists)"
            )
        return replace(gres, indices=indices)
    if detail.startswith("S:"):
        return replace(gres, sockets=_indices(detail[2:], item))
    return replace(gres, shares=_shares(detail, item))


def _count(digits: str, suffix: str, item: str) -> int:
    if not digits.isdigit():
        raise GresError(f"{_quote(item)}: {digits!r} is not a count")
    value = int(digits) * _SUFFIX[suffix]
    if value > MAX_COUNT:
        raise GresError(f"{_quote(item)}: count {value} is beyond any node's")
    return value


def _indices(listed: str, item: str) -> tuple[int, ...]:
    ranges: list[tuple[int, int]] = []
    total = 0
    for part in listed.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise GresError(f"{_quote(item)}: {part!r} is not an index or a range (0-3)")
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        if hi < lo:
            raise GresError(f"{_quote(item)}: range {part!r} runs backwards")
        if hi > MAX_INDEX:
            raise GresError(f"{_quote(item)}: index {hi} is beyond the {MAX_INDEX} a node's GRES reach")
        total += hi - lo + 1
        ranges.append((lo, hi))
    # Measured before expanding; MAX_INDEX alone bounds it, the count keeps the message exact.
    if total > MAX_INDEX + 1:
        raise GresError(f"{_quote(item)}: {total} indices, more than a node has")
    indices = sorted(i for lo, hi in ranges for i in range(lo, hi + 1))
    if len(set(indices)) != len(indices):
        raise GresError(f"{_quote(item)}: an index is listed twice")
    return tuple(indices)


def _shares(detail: str, item: str) -> tuple[Share, ...]:
    parts = detail.split(",")
    if len(parts) > MAX_INDEX + 1:
        raise GresError(f"{_quote(item)}: shares for {len(parts)} GPUs, more than a node has")
    shares = []
    for index, part in enumerate(parts):
        m = _SHARE.fullmatch(part)
        if m is None:
            raise GresError(
                f"{_quote(item)}: {part!r} is not a share (used/total per GPU, e.g. 2/4),"
                " nor IDX:, S: or CNT:"
            )
        total = _count(m[2], "", item)
        used = -1 if m[1] == "-" else _count(m[1], "", item)
        if used > total:
            raise GresError(f"{_quote(item)}: GPU {index} has {used} of {total} shares in use")
        shares.append(Share(index=index, used=used, total=total))
    return tuple(shares)


def _label(gres: Gres) -> str:
    return f"{gres.name}:{gres.type}" if gres.type else gres.name


def _quote(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


@dataclass(frozen=True)
class NotSeen:
    """Something the allocation needs is not in the caches yet (Slurm's indices, a claim made from a
    template): it comes with an event or a retry."""

    why: str


@dataclass(frozen=True)
class Mismatch:
    """What Slurm chose cannot be given to the claims: never will, on this job."""

    why: str


def job_gpu_indices(job: Job, slurm_node: str) -> tuple[int, ...] | NotSeen | Mismatch:
    """The GPU indices (whole GPUs and MIG slices alike: Slurm numbers both in one bitmap) the
    job holds on `slurm_node`, from its gres_detail."""
    held = _held_on(job, slurm_node, "GPUs")
    if not isinstance(held, tuple):
        return held
    indices: list[int] = []
    for g in held:
        if g.name != "gpu":
            continue
        if g.indices is None:
            return Mismatch(f"Slurm printed no GPU indices for job {job.job_id} on {slurm_node} ({g})")
        indices.extend(g.indices)
    return tuple(sorted(indices))


def job_gpu_shares(job: Job, slurm_node: str, name: str = "shard") -> tuple[Share, ...] | NotSeen | Mismatch:
    """The GPUs whose shared GRES `name` (shard, mps) the job holds on `slurm_node`, each with how
    many, from its gres_detail: `shard:h100:4(4/16,0/16,...)` is 4 on GPU 0."""
    held = _held_on(job, slurm_node, f"GPU's {name}")
    if not isinstance(held, tuple):
        return held
    found = [s for g in held if g.name == name for s in g.shares if s.used > 0]
    if not found:
        return Mismatch(f"Slurm printed no GPU {name} for job {job.job_id} on {slurm_node}")
    return tuple(found)


def _held_on(job: Job, slurm_node: str, what: str) -> tuple[Gres, ...] | NotSeen | Mismatch:
    """The GRES the job holds on `slurm_node` as its gres_detail says; `what` names them."""
    if slurm_node not in job.nodes:
        return Mismatch(f"Slurm job {job.job_id} does not hold {slurm_node}")
    if not job.gres_detail:
        return NotSeen(f"Slurm has not said yet which {what} job {job.job_id} holds on {slurm_node}")
    try:
        return parse_job_gres_detail(job.gres_detail, job.nodes.index(slurm_node))
    except GresError as e:
        return Mismatch(f"Slurm job {job.job_id}'s {what} on {slurm_node}: {e}")
