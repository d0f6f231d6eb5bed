"""Tables, JSON and YAML, as kubectl prints them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

FORMATS = ("table", "wide", "json", "yaml")
# Printed as a table: `wide` adds columns where a command has more to show (`nodes`).
TABLES = ("table", "wide")


def table(columns: Sequence[str], rows: Sequence[dict[str, Any]], rule: bool = False) -> str:
    """Columns padded to their widest cell, three spaces apart; an empty cell prints as <none>.
    `rule`: a line of dashes under each heading, as `kubectl describe` prints its tables."""
    cells = [list(columns), *([str(row.get(c) or "<none>") for c in columns] for row in rows)]
    if rule:
        cells.insert(1, ["-" * len(c) for c in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join("   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def structured(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2)
    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False)).rstrip()


def story(data: dict[str, Any]) -> str:
    """`describe`: a heading per section, nested values indented; a list of records (each a dict)
    as a table under its count, `Pods:  (28 in total)`, as `kubectl describe node` shows them."""
    lines: list[str] = []

    def emit(key: str, value: Any, indent: int) -> None:
        pad = "  " * indent
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            for k, v in value.items():
                emit(k, v, indent + 1)
        elif isinstance(value, list) and not value:
            lines.append(f"{pad}{key + ':':<16}(none)")
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
            lines.append(f"{pad}{key + ':':<16}({len(value)} in total)")
            lines.extend(f"{pad}  {line}" for line in table(list(value[0]), value, rule=True).splitlines())
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:")
            lines.extend(f"{pad}  {item}" for item in value)
        else:
            lines.append(f"{pad}{key + ':':<16}{value}")

    for key, value in data.items():
        emit(key, value, 0)
    return "\n".join(lines)
