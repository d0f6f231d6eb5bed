"""Which code a process runs (tandem_build_info): git's word in a checkout, the wheel's record
elsewhere, "unknown" when neither says."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tandem import buildinfo
from tandem.metrics import REGISTRY


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _repo(tmp_path: Path, *tracked: str) -> str:
    _git(tmp_path, "init", "-q")
    for name in tracked:
        (tmp_path / name).write_text("x = 1\n")
        _git(tmp_path, "add", name)
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    return _git(tmp_path, "rev-parse", "HEAD")


def test_a_checkout_says_its_head_and_whether_a_tracked_file_changed(tmp_path: Path) -> None:
    head = _repo(tmp_path, "buildinfo.py", "code.py")
    (tmp_path / "untracked.txt").write_text("not code\n")
    assert buildinfo.from_git(tmp_path) == buildinfo.BuildInfo(head, "false")
    (tmp_path / "code.py").write_text("x = 2\n")
    assert buildinfo.from_git(tmp_path) == buildinfo.BuildInfo(head, "true")


def test_a_wheel_installed_inside_another_projects_checkout_does_not_take_its_commit(tmp_path: Path) -> None:
    _repo(tmp_path, "their_code.py")
    site = tmp_path / ".venv" / "lib" / "tandem"
    site.mkdir(parents=True)
    (site / "buildinfo.py").write_text("# installed, not tracked\n")
    assert buildinfo.from_git(site) is None


def test_outside_a_checkout_git_has_no_word(tmp_path: Path) -> None:
    assert buildinfo.from_git(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"commit": "abc", "dirty": "false"}', buildinfo.BuildInfo("abc", "false")),
        ('{"commit": "abc"}', buildinfo.BuildInfo("abc", "unknown")),
        ("not json", None),
        ('["abc"]', None),
        ('{"dirty": "true"}', None),
    ],
)
def test_a_wheels_record_is_read_and_a_bad_one_is_none(tmp_path: Path, text: str, expected: object) -> None:
    path = tmp_path / "_build.json"
    path.write_text(text)
    assert buildinfo.from_file(path) == expected
    assert buildinfo.from_file(tmp_path / "missing.json") is None


def test_a_build_told_its_commit_records_it_and_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TANDEM_COMMIT", "feedface")
    monkeypatch.setenv("TANDEM_DIRTY", "true")
    path = tmp_path / "_build.json"
    buildinfo.write(path, buildinfo.for_build(tmp_path))
    assert json.loads(path.read_text()) == {"commit": "feedface", "dirty": "true"}
    assert buildinfo.from_file(path) == buildinfo.BuildInfo("feedface", "true")
    monkeypatch.delenv("TANDEM_COMMIT")
    assert buildinfo.for_build(tmp_path) == buildinfo.BuildInfo("unknown", "unknown")


def test_metrics_name_the_commit_of_this_checkout() -> None:
    head = _git(Path(__file__).parent, "rev-parse", "HEAD")
    rendered = REGISTRY.render()
    line = next(x for x in rendered.splitlines() if x.startswith("tandem_build_info{"))
    assert f'commit="{head}"' in line and line.endswith(" 1.0")
