"""Issue 21: `syncer.healthConditions` reaches the syncer as --health-conditions, and the uninstall
cleanup too (a health drain stays while its condition holds); checked on `helm template` output (no
cluster). Needs the lab's helm (`make tools`); skipped without."""

from __future__ import annotations

import pytest

from tests.unit.lab.test_helm_chart import HELM, _helm_template, container, deployment, render
from tests.unit.lab.test_helm_uninstall import hook_job

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="no helm: `make tools` builds it")

FLAG = "--health-conditions"


def health_flags(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith(FLAG)]


def test_no_health_conditions_by_default() -> None:
    docs = render()
    assert health_flags(container(deployment(docs, "syncer"))["args"]) == []
    assert health_flags(container(hook_job(docs))["args"]) == []


def test_listed_conditions_reach_the_syncer_and_the_cleanup_comma_joined() -> None:
    docs = render("syncer.healthConditions={GpuUnhealthy,KernelDeadlock}")
    expected = [f"{FLAG}=GpuUnhealthy,KernelDeadlock"]
    assert health_flags(container(deployment(docs, "syncer"))["args"]) == expected
    assert health_flags(container(hook_job(docs))["args"]) == expected


@pytest.mark.parametrize(
    "value",
    [
        "{Ready}",  # True on every healthy Node
        "{SlurmCordon}",  # Tandem's own: a drain would drain the node again
        "{GpuUnhealthy,GpuUnhealthy}",
        "{Gpu Unhealthy}",
    ],
)
def test_conditions_that_cannot_drain_are_refused(value: str) -> None:
    res = _helm_template(f"syncer.healthConditions={value}")
    assert res.returncode != 0
    assert "healthConditions" in res.stderr, res.stderr
