"""Slurm hostlists: `gpu-[000-002,007],cpu-1` <-> names."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand(hostlist: str) -> list[str]:
    names: list[str] = []
    for part in (p.strip() for p in split_items(hostlist.strip())):
        if "[" not in part:
            if part:
                names.append(part)
            continue
        prefix, rest = part.split("[", 1)
        body, suffix = rest.split("]", 1)
        for chunk in body.split(","):
            m = _RANGE.match(chunk)
            if not m:
                raise ValueError(f"bad hostlist range {chunk!r} in {hostlist!r}")
            lo, hi = m.group(1), m.group(2) or m.group(1)
            if int(hi) < int(lo):
                raise ValueError(f"descending hostlist range {chunk!r} in {hostlist!r}")
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                names.extend(expand(f"{prefix}{i:0{width}d}{suffix}"))
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


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


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
