"""The stack starts each service under coverage only while a session measures which tests reach
release-specific code (TANDEM_COVERAGE_DIR); otherwise exactly as before."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from devstack import coverage_by_test, next_leg_tests


def test_without_the_variable_a_service_starts_as_it_always_did(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(coverage_by_test.ENV, raising=False)
    argv = ["/venv/bin/tandem-syncer", "--kubeconfig=k"]
    assert coverage_by_test.wrapped(argv) == argv
    coverage_by_test.took("tests/integration/t.py::a", 1.0)  # records nothing, anywhere


def test_while_measuring_a_service_starts_under_coverage_and_each_phase_is_timed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(coverage_by_test.ENV, str(tmp_path / "first"))
    argv = ["/venv/bin/tandem-syncer", "--kubeconfig=k"]
    assert coverage_by_test.wrapped(argv) == [
        sys.executable,
        "-m",
        "devstack.coverage_by_test",
        str(tmp_path / "first"),
        *argv,
    ]
    for phase in (0.5, 2.0, 0.25):
        coverage_by_test.took("tests/integration/t.py::a", phase)
    lines = (tmp_path / "first" / coverage_by_test.DURATIONS_FILE).read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0]) == ["tests/integration/t.py::a", 0.5]
    assert next_leg_tests.durations(tmp_path / "first") == {"tests/integration/t.py::a": 2.75}
