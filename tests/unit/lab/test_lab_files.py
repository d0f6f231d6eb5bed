"""The lab writes its secrets (root's Slurm JWT in the env file, admin kubeconfigs, keys) with their
mode from the first byte (issue 50): no moment in which another user could open them."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from devstack import files, pki


def test_a_secret_is_created_private_and_never_exists_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    real_open = os.open

    def spying_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kw: Any) -> int:
        if flags & os.O_CREAT:
            modes.append(mode)
        return real_open(path, flags, mode, *args, **kw)

    monkeypatch.setattr(os, "open", spying_open)
    target = tmp_path / "admin.kubeconfig"
    target.write_text("old")
    target.chmod(0o644)
    pki.write_kubeconfig(target, "https://127.0.0.1:1", tmp_path / "ca.crt", "admin", "s3cret")
    assert modes == [0o600]  # created so: before its first byte, not chmod-ed after
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert "s3cret" in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["admin.kubeconfig"]  # no temporary left


def test_a_public_file_keeps_the_mode_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        files.write_whole(tmp_path / "hooks.env", "x=1\n", 0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "hooks.env").stat().st_mode) == 0o644


def test_a_leftover_temporary_is_not_trusted(tmp_path: Path) -> None:
    """A file someone left at the temporary's name (perhaps open for reading) is replaced, not
    written into."""
    target = tmp_path / "job.key"
    stale = tmp_path / f".job.key.{os.getpid()}.tmp"
    stale.write_text("planted")
    stale.chmod(0o666)
    files.write_whole(target, "key")
    assert target.read_text() == "key" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not stale.exists()
