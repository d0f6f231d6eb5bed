"""CI's second leg runs the fewest integration tests that run all the release-facing code
(devstack.next_leg_tests), quicker tests first; its list names tests that exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devstack import coverage_by_test
from devstack import next_leg_tests as nl

A, B, C = "tests/integration/t.py::a", "tests/integration/t.py::b", "tests/integration/t.py::c"
REST = "libs/tandem/slurm/rest.py"  # the Slurm client: every line of it faces the release
WIDE = "services/x.py"  # lines 1-9 are one function, 20 another


def _functions(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = {WIDE: ((1, 9), (20, 20)), REST: ((1, 50),)}
    monkeypatch.setattr(nl, "_functions", lambda path: spans.get(path, ()))


def test_the_fewest_tests_run_every_release_facing_line_and_the_rest_name_who_covers_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _functions(monkeypatch)
    # Line 3 of WIDE ran only on the first pair, line 5 only on the second: lines 1-9 face the
    # release; line 20 does not. A runs 2 and 5 there, B only 2, C only 20 and the Slurm client.
    first = {A: {(WIDE, 2), (WIDE, 3)}, B: {(WIDE, 2)}, C: {(WIDE, 20), (REST, 7)}}
    second = {A: {(WIDE, 2), (WIDE, 5)}, B: {(WIDE, 2)}, C: {(WIDE, 20), (REST, 7)}}
    choice = nl.choose(first, second, {A: 30.0, B: 1.0, C: 1.0})
    assert choice.specific == {(WIDE, 3), (WIDE, 5)}
    # B, quick, is picked first for line 2, then dropped: A, needed for 3 and 5, runs 2 too.
    assert choice.chosen == {A: {(WIDE, 2), (WIDE, 3), (WIDE, 5)}, C: {(REST, 7)}}
    assert choice.left_out == {B: [A]}


def test_of_two_tests_running_the_same_lines_the_quicker_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    _functions(monkeypatch)
    same = {(REST, 1), (REST, 2)}
    ran = {A: set(same), B: set(same)}
    choice = nl.choose(ran, ran, {A: 20.0, B: 2.0})
    assert list(choice.chosen) == [B] and choice.left_out == {A: [B]}


def test_lines_run_only_between_tests_choose_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _functions(monkeypatch)
    first = {A: {(WIDE, 20)}, nl.BETWEEN: {(WIDE, 4)}}
    second = {A: {(WIDE, 20)}}
    choice = nl.choose(first, second, {})
    assert choice.specific == {(WIDE, 4)} and choice.chosen == {} and choice.left_out == {A: []}


def test_the_list_reads_back_what_was_written_and_shows_where_the_releases_part(tmp_path: Path) -> None:
    specific = {("libs/rest.py", n) for n in (10, 11, 13, 40)}
    text = nl.render(nl.Choice({B: set(specific), A: {("libs/rest.py", 2)}}, {C: [A]}, specific))
    assert "#   libs/rest.py:10-13,40" in text
    assert "#   t.py::c <- t.py::a" in text
    path = tmp_path / "next_leg.txt"
    path.write_text(text)
    assert nl.listed(path) == {A, B}


def test_every_test_the_second_leg_lists_exists() -> None:
    listed = nl.listed()
    assert listed, f"{nl.LIST} lists no test: `make next-leg-tests` writes it"
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/integration",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=coverage_by_test.ROOT,
    ).stdout.split()
    assert listed <= set(collected), sorted(listed - set(collected))
