"""The soak's churn exercises every kind of action in a short run, whatever its random draws: each
once first, one refused while a daemon restarted once more later, then drawn by weight."""

from __future__ import annotations

import random
from collections import Counter

from bench import soak
from tandem.kube import KubeError
from tests.unit.bench.stops import Ticks

KINDS = (
    "single_pod",
    "gang",
    "elastic_gang",
    "het_gang",
    "scale_deployment",
    "scale_elastic_job",
    "plain_job",
    "delete_some",
    "scancel_some",
    "squat",
    "gpu_pod",
    "gpu_taint",
    "shard_pod",
    "shard_job",
)


def _world(seed: int, refuse_once: str = "") -> tuple[soak.Soak, list[str]]:
    world = soak.Soak.__new__(soak.Soak)
    world.rng = random.Random(seed)
    world.serves_composites = world.elastic_jobs = world.serves_rules = True
    world.shard_node = 2
    world.errors = Counter()
    calls: list[str] = []
    refused: set[str] = set()

    def recorder(kind: str) -> object:
        def act() -> None:
            calls.append(kind)
            if kind == refuse_once and kind not in refused:
                refused.add(kind)
                raise KubeError(503, "ServiceUnavailable", "the API server is restarting")

        act.__name__ = kind
        return act

    for kind in KINDS:
        setattr(world, kind, recorder(kind))
    return world, calls


def test_every_kind_acts_once_before_any_acts_twice() -> None:
    for seed in range(20):
        world, calls = _world(seed)
        world.churn(Ticks(len(KINDS)))  # type: ignore[arg-type]
        assert sorted(calls) == sorted(KINDS), seed


def test_a_kind_refused_in_the_first_round_is_tried_again_before_the_draws() -> None:
    world, calls = _world(3, refuse_once="het_gang")
    world.churn(Ticks(len(KINDS) + 1))  # type: ignore[arg-type]
    assert calls.count("het_gang") == 2 and set(calls) == set(KINDS)
    assert calls[-1] == "het_gang"
    assert world.errors == Counter({"het_gang: KubeError": 1})
