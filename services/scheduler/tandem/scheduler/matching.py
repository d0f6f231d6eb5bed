"""Each member of a group on a node of its own that it would take: a maximum bipartite matching.

A gang's Slurm job has one node per member, and its members usually would each take any node the
job may have: then member i simply gets the i-th node (the first on the batch host). Members pinned
apart, each to other Nodes (Kueue's topology-aware scheduling names each Pod's Node in its
nodeSelector), need a node each out of their own: the matching finds one whenever one exists,
keeping that simple order wherever it can (each member first takes its first node nobody holds;
only a member left without one moves others along an augmenting path).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


def distinct(candidates: Sequence[Sequence[str]]) -> list[str | None]:
    """For each member (its candidate nodes, in order of preference), a node no other member got,
    or None where there are not enough: as many members placed as can be."""
    chosen: list[str | None] = [None] * len(candidates)
    owner: dict[str, int] = {}
    for member, nodes in enumerate(candidates):
        free = next((n for n in nodes if n not in owner), None)
        if free is not None:
            owner[free], chosen[member] = member, free
        else:
            _augment(member, candidates, owner, chosen)
    return chosen


def _augment(
    start: int, candidates: Sequence[Sequence[str]], owner: dict[str, int], chosen: list[str | None]
) -> None:
    """Give `start` a node by moving members along the shortest path to a node nobody holds (a
    breadth-first search, without recursion: a gang may have a thousand members)."""
    reached_by: dict[str, int] = {}  # node -> the member whose move would take it
    queue = deque([start])
    while queue:
        member = queue.popleft()
        for node in candidates[member]:
            if node in reached_by:
                continue
            reached_by[node] = member
            holder = owner.get(node)
            if holder is not None:
                queue.append(holder)
                continue
            # A free node: each member on the path takes the node it reached, the one it held
            # going to the member before it.
            while True:
                taker = reached_by[node]
                held = chosen[taker]
                owner[node], chosen[taker] = taker, node
                if held is None:
                    return
                node = held
