"""Slurm's GRES strings (a job's gres_detail, a node's gres and gres_used) as values, and the bounds
that refuse what no node prints."""

from __future__ import annotations

import pytest

from tandem.dra.gres import (
    MAX_INDEX,
    MAX_TEXT,
    Gres,
    GresError,
    Mismatch,
    NotSeen,
    Share,
    indices_of,
    job_gpu_shares,
    parse_gres,
    parse_job_gres_detail,
)
from tandem.slurm.models import Job


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        # A job's gres_detail entry for one node (`scontrol show job -d`: GRES=gpu:h100:2(IDX:0-1)).
        ("gpu:h100:2(IDX:0-1)", (Gres("gpu", "h100", 2, indices=(0, 1)),)),
        ("gpu:h100:3(IDX:0-1,4)", (Gres("gpu", "h100", 3, indices=(0, 1, 4)),)),
        ("gpu:h100:3(IDX:4,0-1)", (Gres("gpu", "h100", 3, indices=(0, 1, 4)),)),
        ("gpu:1g.10gb:1(IDX:3)", (Gres("gpu", "1g.10gb", 1, indices=(3,)),)),
        ("gpu:2(IDX:6-7)", (Gres("gpu", "", 2, indices=(6, 7)),)),
        # A GRES without a bitmap: the count follows the name.
        ("gpu:h100(CNT:2)", (Gres("gpu", "h100", 2),)),
        # Shared GRES: per GPU index, used/available.
        (
            "shard:2(2/4,0/4)",
            (Gres("shard", "", 2, shares=(Share(0, 2, 4), Share(1, 0, 4))),),
        ),
        (
            "gpu:h100:1(IDX:0),shard:2(0/4,2/4)",
            (
                Gres("gpu", "h100", 1, indices=(0,)),
                Gres("shard", "", 2, shares=(Share(0, 0, 4), Share(1, 2, 4))),
            ),
        ),
        # Issue 37: an untyped request on a node of several types gets a record of each type, a
        # type it holds none of with an empty index list (Slurm 24.11 on the lab's mixed node).
        ("gpu:h100:0(IDX:)", (Gres("gpu", "h100", 0, indices=()),)),
        (
            "gpu:1g.10gb:2(IDX:0-1),gpu:h100:0(IDX:)",
            (Gres("gpu", "1g.10gb", 2, indices=(0, 1)), Gres("gpu", "h100", 0, indices=())),
        ),
        (
            "gpu:1g.10gb:0(IDX:),gpu:h100:2(IDX:7-8)",
            (Gres("gpu", "1g.10gb", 0, indices=()), Gres("gpu", "h100", 2, indices=(7, 8))),
        ),
        (
            "gpu:h100:1(IDX:9),shard:h100:2(0/4,2/4)",
            (
                Gres("gpu", "h100", 1, indices=(9,)),
                Gres("shard", "h100", 2, shares=(Share(0, 0, 4), Share(1, 2, 4))),
            ),
        ),
        # A node's gres, with its sockets; several types; suffixed counts; no_consume.
        ("gpu:h100:8(S:0-1)", (Gres("gpu", "h100", 8, sockets=(0, 1)),)),
        (
            "gpu:1g.10gb:7(S:0),gpu:h100:7(S:0-1)",
            (Gres("gpu", "1g.10gb", 7, sockets=(0,)), Gres("gpu", "h100", 7, sockets=(0, 1))),
        ),
        ("gpu:h100:8,shard:1K", (Gres("gpu", "h100", 8), Gres("shard", "", 1024))),
        ("gpu:h100:no_consume:2", (Gres("gpu", "h100", 2, no_consume=True),)),
        ("gpu:no_consume:2", (Gres("gpu", "", 2, no_consume=True),)),
        # A node's gres_used.
        ("gpu:h100:0(IDX:N/A)", (Gres("gpu", "h100", 0, indices=()),)),
        ("shard:3(-/4,3/4)", (Gres("shard", "", 3, shares=(Share(0, -1, 4), Share(1, 3, 4))),)),
        # No GRES at all.
        ("", ()),
        ("(null)", ()),
        ("  gpu:h100:1(IDX:5)  ", (Gres("gpu", "h100", 1, indices=(5,)),)),
    ],
)
def test_parses_what_slurm_prints(text: str, parsed: tuple[Gres, ...]) -> None:
    assert parse_gres(text) == parsed


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # Slurm cuts long index lists short (a fixed buffer): the count gives it away.
        ("gpu:h100:2(IDX:0-1,4)", "2 counted but 3 indices listed"),
        ("gpu:h100:8(IDX:0-1,4,1", "unclosed"),
        ("gpu:h100:2(IDX:0-1))", "unbalanced"),
        ("gpu:h100:2((IDX:0-1))", "nested"),
        ("gpu:h100:2(IDX:1-0)", "backwards"),
        ("gpu:h100:2(IDX:0,0)", "listed twice"),
        ("gpu:h100:2(IDX:a-b)", "not an index or a range"),
        ("gpu:h100:1(IDX:99999999)", f"beyond the {MAX_INDEX}"),
        ("gpu:h100:1(IDX:0-99999999)", f"beyond the {MAX_INDEX}"),
        ("gpu:h100:2(IDX:N/A)", "in use but no index"),
        ("gpu:h100:2(IDX:)", "in use but no index"),
        ("gpu:h100:2(CNT:2)", "CNT follows the name"),
        ("gpu:h100(IDX:0)", "has no count"),
        ("gpu:h100", "has no count"),
        ("gpu:h100:99999999999999999999", "beyond any node"),
        ("gpu:h100:999999P", "beyond any node"),
        ("shard:2(3/2)", "3 of 2 shares"),
        ("shard:2(x/4)", "not a share"),
        ("gpu:h100:1(IDX:0),,gpu:a100:1", "empty GRES item"),
        ("gpu:h100:1,gpu:h100:2", "appears twice"),
        ("gpu h100 2", "is not a GRES"),
        ("gpu:h:1:2:3", "is not a GRES"),
        ("gpu:h100:1(IDX:0)\ngpu:a100:1", "is not a GRES"),
        ("gpu:h100:1;rm -rf /", "is not a GRES"),
        ("x" * (MAX_TEXT + 1), "more than the"),
        (",".join(f"g{i}:1" for i in range(100)), "more than the 64"),
    ],
)
def test_refuses_what_no_node_prints(text: str, says: str) -> None:
    with pytest.raises(GresError) as raised:
        parse_gres(text)
    assert says in str(raised.value)


def test_a_refusal_quotes_a_long_string_short() -> None:
    with pytest.raises(GresError) as raised:
        parse_gres("gpu:h100:1(IDX:0)," + "y" * 3000 + "(")
    assert len(str(raised.value)) < 200


def test_job_gres_detail_has_one_entry_per_node_in_hostlist_order() -> None:
    details = ["gpu:h100:2(IDX:0-1)", "gpu:h100:2(IDX:6-7)"]
    assert indices_of(parse_job_gres_detail(details, 1), "gpu", "h100") == (6, 7)
    with pytest.raises(GresError, match="none for node 2"):
        parse_job_gres_detail(details, 2)


@pytest.mark.parametrize(
    ("name", "gres_type", "indices"),
    [("gpu", "h100", (0, 1)), ("gpu", "a100", ()), ("shard", "", ())],
)
def test_indices_of_one_type(name: str, gres_type: str, indices: tuple[int, ...]) -> None:
    parsed = parse_gres("gpu:h100:2(IDX:0-1),shard:2(0/4,2/4)")
    assert indices_of(parsed, name, gres_type) == indices


def test_gres_reads_like_slurm() -> None:
    assert str(Gres("gpu", "h100", 2)) == "gpu:h100:2"
    assert str(Gres("shard", "", 4)) == "shard:4"


def test_the_gpu_whose_shards_a_job_holds() -> None:
    job = Job(
        7, "j", "RUNNING", nodes=("a", "b"), gres_detail=("gpu:h100:1(IDX:0)", "shard:h100:4(0/16,4/16)")
    )
    assert job_gpu_shares(job, "b") == (Share(1, 4, 16),)
    assert isinstance(job_gpu_shares(job, "a"), Mismatch)  # no shards there
    assert isinstance(job_gpu_shares(job, "c"), Mismatch)
    assert isinstance(job_gpu_shares(Job(8, "j", "RUNNING", nodes=("a",)), "a"), NotSeen)
