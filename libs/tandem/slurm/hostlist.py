"""Slurm hostlists: `gpu-[000-002,007],cpu-1` <-> names."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand(hostlist: str) -> list[str]:
    names: list[str] = []
    for part in _split_top_level(hostlist):
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


def _split_top_level(hostlist: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in hostlist.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]
