"""The image installs its dependencies from requirements.lock with hashes (pip --require-hashes):
the lock must name every dependency pyproject.toml declares, each pinned and hashed, or the
image build fails (or, worse, an unpinned package slips in)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _lock() -> dict[str, list[str]]:
    """Package -> its hash lines."""
    entries: dict[str, list[str]] = {}
    current = ""
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = _ENTRY.match(line)
        if m:
            current = m.group(1).lower().replace("_", "-")
            entries[current] = []
        elif line.strip().startswith("--hash=sha256:") and current:
            entries[current].append(line.strip())
        elif line and not line.startswith((" ", "#")):
            raise AssertionError(f"requirements.lock: {line!r} is not a pinned, hashed requirement")
    return entries


def test_the_lock_pins_every_dependency_with_a_hash() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    lock = _lock()
    missing = sorted({_name(r) for r in declared} - set(lock))
    assert not missing, f"requirements.lock lacks {missing}: make it again (see its header)"
    unhashed = sorted(name for name, hashes in lock.items() if not hashes)
    assert not unhashed, f"requirements.lock has no hash for {unhashed}"


def test_the_image_installs_from_the_lock_only() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes -r /tmp/requirements.lock" in dockerfile
    assert "pip wheel --no-cache-dir --no-deps" in dockerfile  # no unpinned dependency is built in
