"""Slurm hostlist expansion, as slurmrestd reports a job's or a reservation's nodes, and its bounds:
a hostlist is measured from its ranges and refused over the cap before any name is built."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest

from tandem.slurm.hostlist import (
    COUNT_CEILING,
    MAX_NAME_LENGTH,
    MAX_NAMES,
    HostlistTooLarge,
    Size,
    expand,
    measure,
)


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


# --- bounds --------------------------------------------------------------------------------------


def peak_bytes(call: Callable[[], object]) -> int:
    """The most memory Python allocated while `call` ran (raising or not)."""
    tracemalloc.start()
    try:
        call()
    except ValueError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    ("hostlist", "size"),
    [
        ("", Size(0, 0)),
        ("login", Size(1, 5)),
        ("gpu-[000-002,007],cpu-1", Size(5, 7)),
        ("r[1-2]n[01-04]-ib", Size(8, 8)),
        ("n[8-10]", Size(3, 3)),  # n10 is longer than the lower bound's width
        ("a,a", Size(2, 1)),  # duplicates count, as expand keeps them
        ("gpu-[0-99999999]", Size(100_000_000, 12)),
    ],
)
def test_measure_counts_the_names_and_the_longest_from_the_ranges(hostlist: str, size: Size) -> None:
    assert measure(hostlist) == size
    if size.names <= MAX_NAMES:
        names = expand(hostlist)
        assert len(names) == size.names and max(map(len, names), default=0) == size.longest


def test_a_hundred_million_names_are_refused_without_building_one() -> None:
    with pytest.raises(HostlistTooLarge) as refused:
        expand("gpu-[0-99999999]")
    assert str(refused.value) == (
        "hostlist 'gpu-[0-99999999]' names 100000000 nodes, more than the 65536 one hostlist may name"
    )
    # Before the cap this built 100 M strings: several GiB, a MemoryError under 1 GiB.
    assert peak_bytes(lambda: expand("gpu-[0-99999999]")) < 64 * 1024


def test_exactly_the_cap_is_expanded_and_one_more_is_refused() -> None:
    assert MAX_NAMES == 65536
    assert len(expand("gpu-[00000-65535]")) == MAX_NAMES
    with pytest.raises(HostlistTooLarge, match="names 65537 nodes, more than the 65536"):
        expand("gpu-[00000-65536]")


@pytest.mark.parametrize(
    "hostlist",
    [
        "a[1-65535],b,c",  # the cap is for the whole list, not per item
        "r[1-256]n[1-257]",  # two groups in one name multiply
        "a[1-40000],b[1-40000]",
    ],
)
def test_the_cap_counts_every_item_and_every_bracket_group(hostlist: str) -> None:
    assert measure(hostlist).names > MAX_NAMES
    with pytest.raises(HostlistTooLarge):
        expand(hostlist)


def test_a_caller_may_ask_for_a_smaller_cap() -> None:
    assert expand("n[1-3]", max_names=3) == ["n1", "n2", "n3"]
    with pytest.raises(HostlistTooLarge, match="names 4 nodes, more than the 3"):
        expand("n[1-4]", max_names=3)


def test_products_of_huge_ranges_stop_counting_at_the_ceiling() -> None:
    huge = ",".join(["r[0-999999999]n[0-999999999]m[0-999999999]"] * 3)
    assert measure(huge).names == COUNT_CEILING
    with pytest.raises(HostlistTooLarge, match=r"names at least 10\^18 nodes"):
        expand(huge)


@pytest.mark.parametrize(
    "hostlist",
    [
        "n" * (MAX_NAME_LENGTH + 1),
        "n" * MAX_NAME_LENGTH + "[1-2]",
        "n[" + "0" * MAX_NAME_LENGTH + "-1]",  # zero padding makes every name that long
    ],
)
def test_names_longer_than_a_node_name_may_be_are_refused(hostlist: str) -> None:
    with pytest.raises(HostlistTooLarge, match=f"longer than the {MAX_NAME_LENGTH}"):
        expand(hostlist)


def test_a_node_number_of_thousands_of_digits_is_refused_before_int_reads_it() -> None:
    # int() refuses more than 4300 digits with its own error; this one says what is wrong.
    with pytest.raises(HostlistTooLarge, match="node number of more than 1000 digits"):
        expand("gpu-[" + "0" * 5000 + "1-2]")


def test_a_megabyte_of_bracket_groups_is_measured_in_one_pass() -> None:
    # One item of 200,000 groups: measured without copying the rest of the item per group.
    with pytest.raises(HostlistTooLarge, match="longer than the 253"):
        expand("a[1]" * 200_000)
