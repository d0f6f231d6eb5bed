"""Slurm hostlist expansion, as slurmrestd reports a job's or a reservation's nodes."""

from __future__ import annotations

import pytest

from tandem.slurm.hostlist import expand


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("cpu-001", ["cpu-001"]),
        ("cpu-001,cpu-007", ["cpu-001", "cpu-007"]),
        (" cpu-001 , cpu-007 ", ["cpu-001", "cpu-007"]),
        ("cpu-001,,cpu-002,", ["cpu-001", "cpu-002"]),
        ("", []),
        ("   ", []),
    ],
)
def test_plain_names_and_comma_lists(hostlist: str, names: list[str]) -> None:
    assert expand(hostlist) == names


def test_bracket_range_keeps_zero_padding_and_single_values() -> None:
    assert expand("gpu-[000-002,007]") == ["gpu-000", "gpu-001", "gpu-002", "gpu-007"]


def test_padding_follows_the_width_of_the_lower_bound() -> None:
    # Slurm pads to the lower bound's width: [8-10] is n8..n10, [08-10] is n08..n10.
    assert expand("n[8-10]") == ["n8", "n9", "n10"]
    assert expand("n[08-10]") == ["n08", "n09", "n10"]
    assert expand("n[098-101]") == ["n098", "n099", "n100", "n101"]


def test_single_element_bracket() -> None:
    assert expand("gpu-[007]") == ["gpu-007"]


def test_several_bracket_groups_in_one_list() -> None:
    assert expand("a[1-2],b[01-02]") == ["a1", "a2", "b01", "b02"]


def test_commas_inside_brackets_do_not_split_the_list() -> None:
    assert expand("gpu-[1,3],cpu-[2,4],login") == ["gpu-1", "gpu-3", "cpu-2", "cpu-4", "login"]


def test_suffix_after_brackets() -> None:
    assert expand("node[1-2]-ib") == ["node1-ib", "node2-ib"]
    assert expand("rack[01-02].example.org") == ["rack01.example.org", "rack02.example.org"]


def test_two_bracket_groups_in_one_name_expand_as_a_product() -> None:
    assert expand("r[1-2]n[01-02]") == ["r1n01", "r1n02", "r2n01", "r2n02"]


def test_mixed_plain_and_bracketed_entries_keep_their_order() -> None:
    assert expand("login,gpu-[2-3],cpu-9") == ["login", "gpu-2", "gpu-3", "cpu-9"]


@pytest.mark.parametrize(
    "hostlist",
    [
        "gpu-[a-b]",  # not numbers
        "gpu-[1-b]",
        "gpu-[]",  # empty range
        "gpu-[1,,2]",  # empty element
        "gpu-[-2]",  # no lower bound
        "gpu-[1-2-3]",
        "gpu-[1--2]",  # negative numbers are not ranges
        "gpu-[1-2",  # bracket never closed
        "gpu-[1-2,cpu-3",
    ],
)
def test_bad_input_raises_value_error(hostlist: str) -> None:
    with pytest.raises(ValueError):
        expand(hostlist)


def test_error_names_the_bad_range() -> None:
    with pytest.raises(ValueError, match="x-y"):
        expand("gpu-[x-y]")


def test_descending_range_is_refused() -> None:
    with pytest.raises(ValueError):
        expand("gpu-[3-1]")
