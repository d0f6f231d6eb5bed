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
