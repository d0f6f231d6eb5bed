"""Choose CI's second-leg tests from two measured runs (devstack.coverage_by_test).

A line of Tandem is release-specific when one release pair ran it and the other did not (the REST
data parser of each Slurm release, topology.conf against topology.yaml, where KillWait is read, the
PodGroup API of each Kubernetes release); a function holding such a line is release-facing, and so
is every function of the Slurm client, which speaks each release's own REST dialect even where its
lines are the same. The second leg must run, on the second pair, every line of that code any
candidate test ran there (and each line only the first pair runs, by a test that ran it there).

Almost every test reaches some of it (each decision reads KillWait, each Slurm call parses an
answer), so running every test that reaches it is the whole suite again. The leg instead runs the
fewest tests that together reach all of it: a greedy set cover, cheapest first by the measured
time of each test (issue 51). Each test left out is written with the chosen tests that run its
release-facing lines.

    python -m devstack.next_leg_tests FIRST_DIR SECOND_DIR [--write tests/integration/next_leg.txt]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from devstack import coverage_by_test

if TYPE_CHECKING:
    from coverage import CoverageData

LIST = coverage_by_test.ROOT / "tests" / "integration" / "next_leg.txt"
BETWEEN = coverage_by_test.BETWEEN
# The Slurm client: all of it speaks the release's REST dialect.
SLURM_CLIENT = "libs/tandem/slurm/"
Line = tuple[str, int]
Ran = dict[str, set[Line]]


def lines_by_test(where: Path) -> Ran:
    """Every (file, line) each test ran, in a service or in the test process, from `where`."""
    import coverage

    services = [str(f) for f in where.glob(".coverage.*")]
    with tempfile.TemporaryDirectory() as tmp:
        cov = coverage.Coverage(data_file=str(Path(tmp) / ".coverage"))
        cov.combine(services, keep=True)
        return _by_context(cov.get_data())


def _by_context(data: CoverageData) -> Ran:
    ran: Ran = defaultdict(set)
    for path in data.measured_files():
        relative = str(Path(path).resolve().relative_to(coverage_by_test.ROOT))
        for line, contexts in data.contexts_by_lineno(path).items():
            for context in contexts:
                ran[context].add((relative, line))
    return ran


def version_specific(first: Ran, second: Ran) -> set[Line]:
    """The lines that only one of the two runs reached, in any test or between tests."""
    return set().union(*first.values()) ^ set().union(*second.values())


@cache
def _functions(path: str) -> tuple[tuple[int, int], ...]:
    tree = ast.parse((coverage_by_test.ROOT / path).read_text())
    return tuple(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )


def _function_of(line: Line) -> tuple[str, int, int]:
    """The innermost function holding `line` (a module-level line is its own span)."""
    path, number = line
    spans = [span for span in _functions(path) if span[0] <= number <= span[1]]
    start, end = max(spans, default=(number, number))
    return path, start, end


def release_facing(line: Line, functions: set[tuple[str, int, int]]) -> bool:
    path, number = line
    return path.startswith(SLURM_CLIENT) or any(
        path == p and start <= number <= end for p, start, end in functions
    )


@dataclass(frozen=True)
class Choice:
    chosen: dict[str, set[Line]]  # each chosen test, with the release-facing lines it runs
    left_out: dict[str, list[str]]  # each other candidate, with the chosen tests that run its lines
    specific: set[Line]


def choose(first: Ran, second: Ran, seconds: dict[str, float]) -> Choice:
    specific = version_specific(first, second)
    functions = {_function_of(line) for line in specific}
    # Every test the second run ran, also one during which nothing of Tandem's ran at all.
    candidates = sorted((first.keys() | second.keys() | seconds.keys()) - {BETWEEN, ""})
    reach = {
        test: {line for line in second.get(test, set()) if release_facing(line, functions)}
        | (first.get(test, set()) & specific)
        for test in candidates
    }
    left = set().union(set(), *reach.values())
    picked: list[str] = []
    while left:
        best = max(
            (t for t in candidates if t not in picked),
            key=lambda t: (len(reach[t] & left) / (1.0 + seconds.get(t, 10.0)), t),
        )
        picked.append(best)
        left -= reach[best]
    # A cheap test picked early may be covered whole by those picked after it: drop it.
    for test in reversed(list(picked)):
        others = set().union(set(), *(reach[t] for t in picked if t != test))
        if reach[test] <= others:
            picked.remove(test)
    chosen = {test: reach[test] for test in picked}
    left_out = {test: _covering(reach[test], chosen) for test in candidates if test not in chosen}
    return Choice(chosen, left_out, specific)


def _covering(lines: set[Line], chosen: dict[str, set[Line]]) -> list[str]:
    """A few chosen tests that together run `lines` (greedy: the one running most of the rest)."""
    left, by = set(lines), []
    while left:
        best = max(chosen, key=lambda t: (len(chosen[t] & left), t))
        by.append(best)
        left -= chosen[best]
    return by


def _spans(lines: set[Line]) -> list[str]:
    """`file:12-15,40` per file: what a person reads to see where the releases part."""
    by_file: dict[str, list[int]] = defaultdict(list)
    for path, line in lines:
        by_file[path].append(line)
    out = []
    for path, numbers in sorted(by_file.items()):
        numbers.sort()
        runs: list[list[int]] = [[numbers[0], numbers[0]]]
        for n in numbers[1:]:
            if n <= runs[-1][1] + 3:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        out.append(f"{path}:" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    return out


def render(choice: Choice) -> str:
    short = {test: test.removeprefix("tests/integration/") for test in [*choice.chosen, *choice.left_out]}
    lines = [
        "# CI's second leg (make test-next-slurm), measured by `make next-leg-tests` (see",
        "# devstack/next_leg_tests.py): the fewest tests that run, on the second release pair, every",
        "# line of the release-facing code any candidate runs there. Regenerate it when code that",
        "# depends on the Slurm or Kubernetes release changes, and commit it.",
        "# The lines one release pair ran and the other did not:",
        *(f"#   {span}" for span in _spans(choice.specific)),
        "# Chosen, each after the count of release-facing lines it runs:",
    ]
    for test, covered in choice.chosen.items():
        lines += [f"# ({len(covered)} lines)", test]
    lines.append("# Left to the first leg, each with the chosen tests that run its release-facing lines:")
    for test, by in sorted(choice.left_out.items()):
        lines.append(f"#   {short[test]} <- {', '.join(short[t] for t in by) or 'none (it reaches none)'}")
    return "\n".join(lines) + "\n"


def listed(path: Path = LIST) -> set[str]:
    """The test ids the list names (tests/integration/conftest.py marks them `next_leg`)."""
    if not path.exists():
        return set()
    return {line.strip() for line in path.read_text().splitlines() if line.strip() and line[0] != "#"}


def durations(where: Path) -> dict[str, float]:
    """Each test's measured time in that run (conftest.py records it while measuring)."""
    path = where / coverage_by_test.DURATIONS_FILE
    if not path.exists():
        return {}
    out: dict[str, float] = defaultdict(float)
    for line in path.read_text().splitlines():
        test, seconds = json.loads(line)
        out[test] += seconds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--write", type=Path, help="the list to write (else print it)")
    args = parser.parse_args()
    choice = choose(lines_by_test(args.first), lines_by_test(args.second), durations(args.second))
    text = render(choice)
    spent = durations(args.second)
    print(
        f"{len(choice.chosen)} of {len(choice.chosen) + len(choice.left_out)} candidates chosen: "
        f"{sum(spent.get(t, 0) for t in choice.chosen):.0f} s of "
        f"{sum(spent.values()):.0f} s measured on the second pair",
        file=sys.stderr,
    )
    if args.write:
        args.write.write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
