"""Issue 5: with an OTLP endpoint configured, one Pod's scheduling is one trace holding spans of
all three services: the scheduler's submit, the prolog's lock call through the gateway to the
syncer, the placeholder's started call, and the scheduler's bind as its child.

The three services export over real OTLP/gRPC to an in-memory collector in this process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from bench import otlp
from bench.otlp import ExportedSpan, InMemoryCollector
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]


@pytest.fixture(scope="module")
def collector(stack_cfg: StackConfig) -> Iterator[InMemoryCollector]:
    with otlp.tracing_to_memory(stack_cfg) as sink:
        yield sink


def test_one_pods_scheduling_is_one_trace_across_all_three_services(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, collector: InMemoryCollector
) -> None:
    name = h.unique("traced")
    h.create(core, h.tandem_pod(stack_cfg, name))
    h.wait_bound(stack_cfg, core, name)

    def submit_span() -> ExportedSpan | None:
        return next(
            (
                s
                for s in collector.spans
                if s.name == "submit placeholder job" and s.attributes.get("k8s.pod") == f"default/{name}"
            ),
            None,
        )

    root = h.wait_until("the submit span exported", submit_span, 15)

    def trace() -> list[ExportedSpan]:
        return [s for s in collector.spans if s.trace_id == root.trace_id]

    # Each service exports in its own batches: wait for every span asserted on below.
    expected = {
        "bind pod",
        "POST /v1/lock",
        "POST /v1/started",
        "AcquireNodeLock",
        "JobStarted",
        "PlaceholderSubmitted",
    }

    def complete() -> list[ExportedSpan] | None:
        spans = trace()
        return spans if expected <= {s.name for s in spans} else None

    spans = h.wait_until("every hop's span in the submit's trace", complete, 15)
    by_id = {s.span_id: s for s in spans}
    by_name = {s.name: s for s in spans}
    assert {s.service for s in spans} == {"tandem-scheduler", "tandem-hooks", "tandem-syncer"}
    assert root.parent_id == ""
    # prolog -> gateway -> syncer, under the submit (the prolog read the context from the comment)
    lock = by_name["AcquireNodeLock"]
    assert by_id[lock.parent_id].name == "POST /v1/lock"
    assert by_id[lock.parent_id].service == "tandem-hooks"
    assert by_name["POST /v1/lock"].parent_id == root.span_id
    # placeholder -> gateway -> syncer -> (WatchSlurm) -> scheduler's bind
    bind = by_name["bind pod"]
    assert bind.service == "tandem-scheduler"
    assert by_id[bind.parent_id].name == "JobStarted"
    assert by_id[by_id[bind.parent_id].parent_id].name == "POST /v1/started"
    # scheduler -> Slurm: the submit itself, and the syncer hears of the job inside the trace
    assert "sbatch" in by_name or any(s.name.startswith("slurmrestd POST") for s in spans)
    assert by_name["PlaceholderSubmitted"].parent_id == root.span_id
