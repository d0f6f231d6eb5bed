"""A slurmrestd listing decoded element by element as its text arrives (tandem.slurm.listing)."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.slurm.listing import Listing, ListingError, WholeListing

ANSWER = {
    "meta": {"plugin": {"type": "openapi/slurmctld"}, "slurm": {"release": "24.11.5"}},
    "jobs": [
        {"job_id": 1, "name": "a", "nodes": "n-[1-3]", "time": {"start": 1_700_000_000}},
        {"job_id": 22, "comment": 'x " ] } , [ {', "flags": ["A", "B"]},
        {"job_id": 4, "comment": "a line\n    }\nthat looks like an element's end", "nested": {"a": [{}]}},
        {"job_id": 333, "ratio": 1.5e3, "held": False, "array": None},
        12345,
    ],
    "last_update": {"set": True, "number": 1_700_000_001},
    "warnings": [{"description": "w"}],
    "errors": [],
}


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "pretty"])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100_000])
def test_every_element_and_every_other_member_come_out_whatever_the_chunks(
    indent: int | None, size: int
) -> None:
    listing = Listing(_chunks(json.dumps(ANSWER, indent=indent), size), "jobs")
    assert list(listing) == ANSWER["jobs"]
    assert listing.rest == {k: v for k, v in ANSWER.items() if k != "jobs"}
    assert not listing.empty


def test_a_number_cut_where_a_chunk_ends_is_read_whole() -> None:
    assert list(Listing(['{"jobs": [12', "345, 6", "7]}"], "jobs")) == [12345, 67]


@pytest.mark.parametrize(
    ("text", "elements"),
    [
        ('{"jobs": []}', []),
        ("{}", []),
        ('{"meta": {}}', []),
        ('{"jobs": null}', []),  # not a list: kept with the other members
        (' \n {"jobs" : [ {} , {} ] } \n', [{}, {}]),
    ],
)
def test_listings_with_nothing_or_little_in_them(text: str, elements: list[Any]) -> None:
    assert list(Listing([text], "jobs")) == elements


def test_an_empty_body_is_told_apart_from_an_empty_list() -> None:
    empty = Listing(["", ""], "jobs")
    assert list(empty) == [] and empty.empty
    none = Listing(['{"jobs": []}'], "jobs")
    assert list(none) == [] and not none.empty


@pytest.mark.parametrize(
    "text",
    [
        '{"jobs": [{"job_id": 1}, {"job_id": 2',  # cut off inside an element
        '{"jobs": [{"job_id": 1},',  # cut off between elements
        '{"jobs": [1] "meta": {}}',  # no comma between members
        '{"jobs": [1 2]}',  # no comma between elements
        '[{"job_id": 1}]',  # not an object
        "<html>502 Bad Gateway</html>",
        '{"jobs": [1]}trailing',
        '{1: "x"}',
    ],
)
def test_a_cut_off_or_garbled_answer_is_an_error(text: str) -> None:
    with pytest.raises(ListingError):
        list(Listing(_chunks(text, 5), "jobs"))


def _big_answer(jobs: int, job_bytes: int) -> Iterator[str]:
    yield '{"meta": {}, "jobs": ['
    for i in range(jobs):
        job = json.dumps({"job_id": i, "script": "x" * job_bytes}, indent=2)
        yield ("," if i else "") + job
    yield '], "warnings": [], "errors": []}'


def test_memory_holds_one_element_at_a_time_not_the_answer() -> None:
    # 1,000 jobs of 10 KB: 10 MB of text (a busy minute's GET /jobs is several times that).
    tracemalloc.start()
    try:
        seen = sum(1 for _ in Listing(_big_answer(1_000, 10_000), "jobs"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == 1_000
    assert peak < 1_000_000, f"peak {peak} bytes while decoding 10 MB"


def test_a_big_element_in_small_chunks_is_decoded_a_few_times_not_once_a_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slurmrestd job is tens of kB pretty-printed; the answer comes a few kB at a time. Each try
    # decodes the element from its start: one try a chunk made reading it quadratic (issue 40).
    job = {"job_id": 7, "fields": [{"name": f"field-{i}", "value": "x" * 40} for i in range(600)]}
    text = json.dumps({"jobs": [job], "meta": {}}, indent=2)
    assert len(text) > 40_000
    from tandem.slurm import listing as module

    tries = 0
    real = module._DECODER

    class Counting(json.JSONDecoder):
        def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
            nonlocal tries
            tries += 1
            return real.raw_decode(s, idx)

    monkeypatch.setattr(module, "_DECODER", Counting())
    assert list(Listing(_chunks(text, 256), "jobs")) == [job]
    assert tries < 30, f"{tries} decodes of a {len(text)}-character answer read 256 at a time"


class _CountingDecoder(json.JSONDecoder):
    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        self.tries += 1
        return super().raw_decode(s, idx)


@pytest.mark.parametrize("size", [997, 4096, 65_536])
def test_a_pretty_printed_answer_s_objects_are_decoded_whole_not_by_the_stdlib_decoder(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    # slurmrestd's layout: 300 jobs of a few kB, far past the buffer's compaction (64 kB), so the
    # line before most objects was dropped already. The stdlib decoder was 7 times orjson's CPU.
    jobs = [
        {"job_id": i, "fields": [{"name": f"f{j}", "value": "x" * 30} for j in range(40)]} for i in range(300)
    ]
    text = json.dumps({"jobs": jobs, "meta": {"plugin": {}}, "warnings": []}, indent=2)
    from tandem.slurm import listing as module

    counting = _CountingDecoder()
    monkeypatch.setattr(module, "_DECODER", counting)
    assert list(Listing(_chunks(text, size), "jobs")) == jobs
    assert counting.tries < 10, f"{counting.tries} stdlib decodes for 300 pretty-printed jobs"


@pytest.mark.parametrize(
    "text",
    [
        # A closing brace at an element's indentation inside it (no pretty-printer's layout): the
        # cut there does not decode, so the element is read as any value is.
        '{"jobs": [\n  {"a": {\n  },\n  "b": 1\n  },\n  {"c": 2\n  }\n]}',
        # Objects not on lines of their own, and elements that are not objects.
        '{"jobs": [{"a": 1}, {"b": {"c": [1, 2]}}, 3, "s", [4]]}',
        '{"jobs": [\n  {"a": 1}, {"b": 2\n  }, 7\n]}',
    ],
)
def test_an_unusual_layout_reads_as_the_stdlib_reads_it(text: str) -> None:
    for size in (1, 5, 1000):
        assert list(Listing(_chunks(text, size), "jobs")) == json.loads(text)["jobs"]


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(ANSWER),
        json.dumps({"jobs": [], "warnings": [{"description": "no changes since"}]}),
        json.dumps({"meta": {}, "jobs": "not a list"}),
        "",
        "  \n",
    ],
)
def test_a_small_answer_read_whole_reads_as_the_streamed_one(body: str) -> None:
    streamed = Listing(_chunks(body, 7), "jobs")
    whole = WholeListing(body.encode(), "jobs")
    assert list(whole) == list(streamed)
    assert (whole.rest, whole.empty) == (streamed.rest, streamed.empty)


@pytest.mark.parametrize("body", ['{"jobs": [1, 2', "[1, 2]", '{"jobs": [1]} tail'])
def test_a_bad_answer_read_whole_is_a_listing_error(body: str) -> None:
    with pytest.raises(ListingError):
        list(WholeListing(body.encode(), "jobs"))
