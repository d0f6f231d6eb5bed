"""Slurm hostlists: `gpu-[000-002,007],cpu-1` <-> names.

A hostlist is measured from its ranges before anything is expanded: a short string can name more
nodes than memory holds (`gpu-[0-99999999]` is 100 M names, several GiB as Python strings), so
`expand` refuses one that names more than MAX_NAMES, or a name longer than MAX_NAME_LENGTH, without
building a single name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Slurm itself refuses a range of more than 64k names ("Too many hosts in range": MAX_RANGE in its
# hostlist.c), and no cluster Tandem serves comes near that many nodes. At this cap an expansion
# costs 4 MiB (`gpu-[00000-65535]`) to 20 MiB (names of 253 characters), not the scheduler's whole
# memory limit.
MAX_NAMES = 64 * 1024
# A Slurm node here is a Kubernetes Node and a slurmd Pod: its name is a DNS subdomain, at most
# 253 characters. Bounding it bounds each expanded name (zero padding could make one huge).
MAX_NAME_LENGTH = 253

# Counts stop here: beyond it only "too many" matters, and products of huge ranges stay small ints.
_CEILING_EXPONENT = 18
COUNT_CEILING = 10**_CEILING_EXPONENT

# Far beyond any node number (and a name that long is refused anyway), well within what int()
# reads quickly (Python refuses more than 4300 digits).
_MAX_DIGITS = 1000

_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


class HostlistTooLarge(ValueError):
    """The hostlist names more nodes than MAX_NAMES, or a name longer than MAX_NAME_LENGTH."""


@dataclass(frozen=True)
class Size:
    """What expanding a hostlist would give, measured from its ranges alone."""

    names: int  # exact below COUNT_CEILING; any larger count is COUNT_CEILING
    longest: int  # the length of its longest name (0 when it names none)

    def problem(self, max_names: int = MAX_NAMES) -> str:
        """Why this hostlist is refused, in words a Pod's author can act on; "" when it is not."""
        if self.names > max_names:
            return f"names {shown_count(self.names)} nodes, more than the {max_names} one hostlist may name"
        if self.longest > MAX_NAME_LENGTH:
            return (
                f"names a node of {self.longest} characters, "
                f"longer than the {MAX_NAME_LENGTH} a node name may have"
            )
        return ""


@dataclass(frozen=True)
class _Range:
    lo: int
    hi: int
    width: int  # Slurm pads every number to the lower bound's width: [08-10] is 08, 09, 10

    @property
    def longest(self) -> int:
        return max(self.width, len(str(self.hi)))


# One item of a hostlist, in order: literal text, or the ranges of one [bracket] group.
_Part = str | tuple[_Range, ...]


def measure(hostlist: str) -> Size:
    """How many names `expand` gives and how long the longest is, from the ranges' sizes (a
    product for `r[1-2]n[01-04]`): time and memory grow with the string, not with what it names.
    Raises ValueError on a malformed range, as `expand` does."""
    names, longest = 0, 0
    for item in _items(hostlist):
        parts = _parse(item, hostlist)
        longest = max(
            longest, sum(len(p) if isinstance(p, str) else max(r.longest for r in p) for p in parts)
        )
        count = 1
        for part in parts:
            if not isinstance(part, str):
                count = min(count * sum(r.hi - r.lo + 1 for r in part), COUNT_CEILING)
        names = min(names + count, COUNT_CEILING)
    return Size(names, longest)


def expand(hostlist: str, max_names: int = MAX_NAMES) -> list[str]:
    """Every name, in order (duplicates kept). Raises HostlistTooLarge, before building any name,
    when the hostlist names more than `max_names` nodes or a name longer than MAX_NAME_LENGTH."""
    problem = measure(hostlist).problem(max_names)
    if problem:
        raise HostlistTooLarge(f"hostlist {_short(hostlist)!r} {problem}")
    names: list[str] = []
    for item in _items(hostlist):
        _expand_into(names, "", _parse(item, hostlist))
    return names


def split_items(hostlist: str) -> list[str]:
    """The items between the commas that are not inside [ranges], as written (empty ones too:
    validation reports them)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(hostlist):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(hostlist[start:i])
            start = i + 1
    items.append(hostlist[start:])
    return items


def shown_count(n: int) -> str:
    """A count from `measure` for a message."""
    return f"at least 10^{_CEILING_EXPONENT}" if n >= COUNT_CEILING else str(n)


def compress(names: list[str]) -> str:
    """Names -> the shortest plain hostlist: `gpu-000,gpu-001,gpu-002,gpu-007,cpu-1` ->
    `cpu-1,gpu-[000-002,007]` (ranges keep each number's width)."""
    plain: set[str] = set()
    numbered: dict[tuple[str, int], set[int]] = {}
    for name in names:
        m = _NUMBERED.match(name)
        if m is None or "[" in name:
            plain.add(name)
            continue
        numbered.setdefault((m.group(1), len(m.group(2))), set()).add(int(m.group(2)))
    items = sorted(plain)
    for (prefix, width), numbers in sorted(numbered.items()):
        ordered = sorted(numbers)
        if len(ordered) == 1:
            items.append(f"{prefix}{ordered[0]:0{width}d}")
            continue
        ranges, start, prev = [], ordered[0], ordered[0]
        for n in [*ordered[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        items.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(items)


def _items(hostlist: str) -> list[str]:
    """The non-empty items, stripped (slurmrestd's lists and hand-written ones alike)."""
    return [item for item in (p.strip() for p in split_items(hostlist.strip())) if item]


def _parse(item: str, hostlist: str) -> list[_Part]:
    """`r[1-2]n[01,07]-ib` -> ["r", (1-2), "n", (01, 07), "-ib"], in one pass over the item. A `]`
    with no `[` before it is literal text, as Slurm reads it."""
    parts: list[_Part] = []
    pos = 0
    while (opening := item.find("[", pos)) >= 0:
        closing = item.find("]", opening + 1)
        if closing < 0:
            raise ValueError(f"unclosed '[' in {_short(hostlist)!r}")
        parts.append(item[pos:opening])
        parts.append(tuple(_range(chunk, hostlist) for chunk in item[opening + 1 : closing].split(",")))
        pos = closing + 1
    parts.append(item[pos:])
    return parts


def _range(chunk: str, hostlist: str) -> _Range:
    m = _RANGE.match(chunk)
    if not m:
        raise ValueError(f"bad hostlist range {_short(chunk)!r} in {_short(hostlist)!r}")
    lo_text, hi_text = m.group(1), m.group(2) or m.group(1)
    if max(len(lo_text), len(hi_text)) > _MAX_DIGITS:
        raise HostlistTooLarge(
            f"hostlist {_short(hostlist)!r} has a node number of more than {_MAX_DIGITS} digits"
        )
    lo, hi = int(lo_text), int(hi_text)
    if hi < lo:
        raise ValueError(f"descending hostlist range {chunk!r} in {_short(hostlist)!r}")
    return _Range(lo, hi, len(lo_text))


def _expand_into(names: list[str], prefix: str, parts: list[_Part]) -> None:
    if not parts:
        names.append(prefix)
        return
    head, rest = parts[0], parts[1:]
    if isinstance(head, str):
        _expand_into(names, prefix + head, rest)
        return
    for r in head:
        for i in range(r.lo, r.hi + 1):
            _expand_into(names, f"{prefix}{i:0{r.width}d}", rest)


def _short(text: str) -> str:
    """A hostlist as an error message quotes it: enough to recognise, never the whole of a huge one."""
    return text if len(text) <= 64 else text[:61] + "..."
