"""One Slurm node's name, as a caller outside Tandem may give it: never a hostlist, a keyword or
a path (the name ends up in slurmrestd URL paths and scontrol arguments)."""

from __future__ import annotations

import pytest

from tandem.slurm.names import MAX_NODE_NAME, node_name_problem, valid_node_name


@pytest.mark.parametrize(
    "name", ["gpu-000", "cpu-007", "node1", "n", "7", "gpu_a.rack-2", "a" * MAX_NODE_NAME, "g1b7d2c"]
)
def test_node_names_are_accepted(name: str) -> None:
    assert valid_node_name(name), node_name_problem(name)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("gpu-[000-999]", "hostlist"),
        ("gpu-001,gpu-002", "hostlist"),
        ("gpu]", "hostlist"),
        ("ALL", "several nodes"),
        ("all", "several nodes"),
        ("DEFAULT", "several nodes"),
        ("../job/5", "not a Slurm node name"),
        ("gpu/../job", "not a Slurm node name"),
        ("a..b", "not a Slurm node name"),
        ("a b", "not a Slurm node name"),
        ("gpu-001\n", "not a Slurm node name"),
        ("gpu\x00", "not a Slurm node name"),
        ("-gpu", "not a Slurm node name"),
        (".hidden", "not a Slurm node name"),
        ("gpü", "not a Slurm node name"),
        ("gpu%2F..", "not a Slurm node name"),
        ("a" * (MAX_NODE_NAME + 1), "longer than 64"),
        ("a" * 300, "longer than 64"),
        ("", "required"),
        (None, "required"),
        (5, "required"),
    ],
)
def test_anything_but_one_node_is_refused_and_says_why(name: object, says: str) -> None:
    assert not valid_node_name(name)
    assert says in (node_name_problem(name) or "")


def test_a_long_name_is_not_echoed_in_full() -> None:
    problem = node_name_problem("x" * 100_000) or ""
    assert len(problem) < 200
