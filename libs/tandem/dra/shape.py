"""Reading API objects that may not have the shape their schema says (a cache of raw dicts, a
hand-written manifest, a fuzzer): a field of the wrong kind reads as absent, never as a crash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EMPTY: Mapping[str, Any] = {}


def obj(value: Any) -> Mapping[str, Any]:
    """`value` when it is an object, else an empty one."""
    return value if isinstance(value, Mapping) else EMPTY


def items(value: Any) -> list[Any]:
    """`value`'s elements when it is a list, else none."""
    return list(value) if isinstance(value, list | tuple) else []


def at(value: Any, *path: str) -> Any:
    """value[path[0]][path[1]]..., or None where a step is not an object."""
    for key in path:
        value = obj(value).get(key)
    return value
