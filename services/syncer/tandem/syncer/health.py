"""Health drains: Node conditions named in the syncer's configuration (`--health-conditions`, e.g. a
device plugin's `GpuUnhealthy` or Node Problem Detector's `KernelDeadlock`) drain the Slurm node
while one of them is True, with the reason `k8s: Node <name> has <Type>: <message>`.

The reason starts with `k8s: Node `, one of the node sync's own prefixes, so the rules of a cordon
drain hold: the drain is resumed when the condition clears (False, Unknown, gone, or its type no
longer configured) and only if Slurm says the syncer's own user set it; an admin's drain is never
touched. Pure: tandem.syncer.cluster.slim_node keeps the listed conditions of each Node
(`kept`), tandem.syncer.nodesync.cause asks `cause` after its own causes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from tandem.kube import JSON

# Slurm stores a longer reason, but `sinfo -R` and `scontrol show node` print it on one line, and
# it is also the Node's drain annotation and SlurmCordon message: a device's message can be a
# whole log line.
REASON_MAX = 200
_CUT = "..."

# Types that must not be listed: True is Ready's healthy state (every healthy Node would drain),
# and SlurmCordon is the syncer's own (nodesync.CONDITION): a drain shown on the Node would drain
# the node again, for good.
REFUSED = frozenset({"Ready", "SlurmCordon"})


def refused(types: Iterable[str]) -> list[str]:
    """The configured types that cannot be health conditions (see REFUSED)."""
    return [t for t in types if t in REFUSED]


def kept(node: JSON, types: Collection[str]) -> dict[str, dict[str, str]]:
    """What the Node cache keeps of a Node's conditions: the listed types only (it holds every
    Node), type -> status and message, the message no longer than a reason can show."""
    found: dict[str, dict[str, str]] = {}
    for c in (node.get("status") or {}).get("conditions") or []:
        type_ = c.get("type")
        if type_ in types:
            found[str(type_)] = {
                "status": str(c.get("status")),
                "message": str(c.get("message") or "")[:REASON_MAX],
            }
    return found


def cause(node: str, conditions: Mapping[str, Mapping[str, str]], types: Sequence[str]) -> str:
    """The drain reason of the first listed condition that is True ("" when none is): the order
    of the configuration decides which one the reason names when several hold."""
    for type_ in types:
        c = conditions.get(type_)
        if c is not None and c.get("status") == "True":
            return reason(node, type_, c.get("message", ""))
    return ""


def reason(node: str, type_: str, message: str) -> str:
    """`k8s: Node <name> has <Type>: <message>`, on one line and at most REASON_MAX characters."""
    head = f"k8s: Node {node} has {type_}"
    text = one_line(message)
    return capped(f"{head}: {text}" if text else head)


def same_condition(drained: str, why: str, node: str) -> bool:
    """Whether Slurm's reason already names the condition `why` names, with whatever message it
    had then. A message can carry a timestamp or a counter that changes on every report; the
    drain keeps the words it was made with instead of rewriting Slurm's reason (and the Node's
    annotation) each time. Another condition, or another cause, is still said at once."""
    if drained == why:
        return True
    named = condition_of(drained, node)
    return named is not None and named == condition_of(why, node)


def condition_of(text: str, node: str) -> str | None:
    """The condition type a health reason of this Node names; None for any other reason."""
    head = f"k8s: Node {node} has "
    if not text.startswith(head):
        return None
    return text[len(head) :].split(": ", 1)[0]


def one_line(text: str) -> str:
    """Control characters and runs of white space (new lines too) as one space, trimmed."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def capped(text: str, limit: int = REASON_MAX) -> str:
    return text if len(text) <= limit else text[: limit - len(_CUT)].rstrip() + _CUT
