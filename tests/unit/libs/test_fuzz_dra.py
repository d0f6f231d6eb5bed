"""Fuzzed DRA inputs (hypothesis): GRES strings, CEL selectors, claims and slices of any shape. Each
either parses or is refused with a reason; nothing escapes as a KeyError or TypeError from inside a
parser. `FUZZ_EXAMPLES` sets the size."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.dra.claims import DraConfig, PodGpus, parse_selector, pod_gpus
from tandem.dra.gres import Gres, GresError, parse_gres
from tandem.dra.slices import NodeDevices, node_devices

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CFG = DraConfig(product_types={"NVIDIA H100 80GB HBM3": "h100"})

# Text built from the pieces real strings are made of, so the parsers get past their first check.
GRES_PIECES = st.sampled_from(
    [
        "gpu",
        "shard",
        ":",
        "h100",
        "1g.10gb",
        "(",
        ")",
        "IDX:",
        "S:",
        "CNT:",
        "N/A",
        ",",
        "-",
        "/",
        "0",
        "7",
        "99",
        "K",
    ]
)
CEL_PIECES = st.sampled_from(
    [
        "device.driver",
        'device.attributes["gpu.nvidia.com"]',
        ".productName",
        ".profile",
        " == ",
        "&&",
        "||",
        '"NVIDIA H100 80GB HBM3"',
        "'1g.10gb'",
        "'",
        '"',
        " ",
        "(",
        ")",
    ]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.lists(GRES_PIECES, max_size=40).map("".join)))
def test_gres_strings_parse_or_are_refused(text: str) -> None:
    try:
        parsed = parse_gres(text)
    except GresError:
        return
    assert all(isinstance(g, Gres) for g in parsed)


def _ranges(indices: list[int]) -> str:
    """Slurm's bit_fmt: ascending runs as `a-b`, single bits as `a`."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


@st.composite
def job_gres_detail(draw: st.DrawFn) -> tuple[str, dict[tuple[str, str], tuple[int, ...]]]:
    """A gres_detail entry as slurmctld prints it for a job on a node of one or more GPU types
    (whole GPUs and MIG slices numbered in one bitmap), the types it holds none of as `:0(IDX:)`,
    and maybe a shared GRES: the text and the indices each type holds."""
    types = draw(st.lists(st.sampled_from(["h100", "1g.10gb", "2g.20gb", "a100"]), min_size=1, unique=True))
    sizes = [draw(st.integers(1, 8)) for _ in types]
    items: list[str] = []
    held: dict[tuple[str, str], tuple[int, ...]] = {}
    first = 0
    for gres_type, size in zip(types, sizes, strict=True):
        chosen = draw(st.lists(st.integers(first, first + size - 1), unique=True, max_size=size))
        first += size
        held[("gpu", gres_type)] = tuple(sorted(chosen))
        items.append(f"gpu:{gres_type}:{len(chosen)}(IDX:{_ranges(chosen)})")
    if draw(st.booleans()):
        shares = draw(st.lists(st.tuples(st.integers(0, 4), st.just(4)), min_size=1, max_size=4))
        used = sum(u for u, _ in shares)
        items.append(f"shard:{used}(" + ",".join(f"{u}/{t}" for u, t in shares) + ")")
    return ",".join(draw(st.permutations(items))), held


@FUZZ
@given(job_gres_detail())
def test_every_gres_detail_slurm_prints_parses_to_the_indices_it_holds(
    detail: tuple[str, dict[tuple[str, str], tuple[int, ...]]],
) -> None:
    """Issue 37: `gpu:h100:0(IDX:)` beside MIG slices was refused, and the job cancelled."""
    text, held = detail
    parsed = {g.key: g for g in parse_gres(text)}
    for key, indices in held.items():
        assert parsed[key].indices == indices
        assert parsed[key].count == len(indices)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.lists(CEL_PIECES, max_size=30).map("".join)))
def test_selectors_parse_or_are_refused(expression: str) -> None:
    got = parse_selector(expression)
    assert isinstance(got, str | list)


def _claims_pod(entries: Any) -> dict[str, Any]:
    return {"metadata": {"uid": "u"}, "spec": {"resourceClaims": entries, "containers": []}}


@FUZZ
@given(
    st.lists(
        st.fixed_dictionaries(
            {"name": st.text(max_size=4)},
            optional={"resourceClaimName": st.just("c"), "resourceClaimTemplateName": st.just("t")},
        ),
        max_size=3,
    ),
    JSON,
)
def test_claims_of_any_shape_are_translated_or_refused(entries: list[dict[str, Any]], spec: Any) -> None:
    claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [{"name": "r", "exactly": spec}]}}}
    template = {"spec": {"spec": {"devices": spec}}}
    assert isinstance(pod_gpus(_claims_pod(entries), {"c": claim}, {"t": template}, CFG), PodGpus)
    assert isinstance(pod_gpus(_claims_pod(spec), {"c": spec}, {"t": spec}, CFG), PodGpus)


@FUZZ
@given(st.lists(st.one_of(JSON, st.fixed_dictionaries({"name": JSON, "attributes": JSON})), max_size=3), JSON)
def test_slices_of_any_shape_are_numbered_or_refused(devices: list[Any], pool: Any) -> None:
    s = {"spec": {"driver": "gpu.nvidia.com", "nodeName": "n", "pool": pool, "devices": devices}}
    assert isinstance(node_devices("n", [s], CFG), NodeDevices | str)
    assert isinstance(node_devices("n", [{"spec": pool}, pool], CFG), NodeDevices | str)
