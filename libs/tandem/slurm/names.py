"""What may name ONE Slurm node when a caller outside Tandem hands us the name.

A node name travels into slurmrestd URL paths (`/node/<name>`) and scontrol arguments, where
Slurm reads more into it than one node: `gpu-[000-999]` and `a,b` are hostlists, `ALL` is every
node, `DEFAULT` is slurm.conf's template, and `../job/5` walks to another endpoint. Slurm's node
names are host names in practice, so one is accepted only as letters, digits, `-`, `_` and `.`,
starting with a letter or digit, with no `..`, at most HOST_NAME_MAX (64) characters long.
"""

from __future__ import annotations

import re

MAX_NODE_NAME = 64
_ONE_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Slurm's words for more than one node (scontrol's `nodename=ALL`, slurm.conf's `NodeName=DEFAULT`);
# Slurm compares them without case.
_RESERVED = frozenset({"all", "default"})


def node_name_problem(name: object) -> str | None:
    """Why `name` is not one Slurm node's name, or None when it is."""
    if not isinstance(name, str) or not name:
        return "a Slurm node name is required"
    shown = repr(name[:MAX_NODE_NAME]) + ("..." if len(name) > MAX_NODE_NAME else "")
    if len(name) > MAX_NODE_NAME:
        return f"node name {shown} is longer than {MAX_NODE_NAME} characters"
    if any(c in name for c in "[],"):
        return f"node name {shown} is a hostlist; give one node"
    if name.lower() in _RESERVED:
        return f"node name {shown} is Slurm's word for several nodes; give one node"
    if not _ONE_NODE.fullmatch(name) or ".." in name:
        return (
            f"node name {shown} is not a Slurm node name "
            "(letters, digits, '-', '_' and '.', starting with a letter or digit, no '..')"
        )
    return None


def valid_node_name(name: object) -> bool:
    return node_name_problem(name) is None
