"""Each service and the CLI import only `libs/` and themselves: what two of them share lives in
`libs/tandem`, so a service never loads another's code (issue 52)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("scheduler", "syncer", "hooks")
FOLDERS = {
    **{name: ROOT / "services" / name / "tandem" / name for name in SERVICES},
    "cli": ROOT / "cli" / "tandem" / "cli",
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("owner", sorted(FOLDERS))
def test_a_service_or_the_cli_imports_only_libs_and_itself(owner: str) -> None:
    others = [f"tandem.{name}" for name in (*SERVICES, "cli") if name != owner]
    crossing = sorted(
        f"{path.relative_to(ROOT)}: {module}"
        for path in FOLDERS[owner].rglob("*.py")
        for module in _imports(path)
        if any(module == other or module.startswith(other + ".") for other in others)
    )
    assert not crossing, crossing


def _package_graph(owner: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (type-checking imports too)."""
    package = f"tandem.{owner}"
    modules = {p.stem: p for p in FOLDERS[owner].glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for module in _imports(path):
            if module.startswith(package + "."):
                found.add(module[len(package) + 1 :].split(".")[0])
        graph[name] = found & modules.keys() - {name}
    return graph


@pytest.mark.parametrize("owner", sorted(FOLDERS))
def test_no_module_imports_one_that_imports_it_back(owner: str) -> None:
    graph = _package_graph(owner)
    circles = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                circles.append(" -> ".join([*path, start]))
            elif nxt not in path:
                walk(start, nxt, [*path, nxt])

    for name in sorted(graph):
        walk(name, name, [name])
    assert not circles, circles[:5]
