"""A short seeded chaos soak (bench/soak.py): churn while every Tandem process is killed and
Slurm's and Kubernetes' daemons restart, then nothing lost, duplicated or left locked."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from bench import soak
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.soak]

NAMESPACE = "soak"
MINUTES = 2.0
SETTLE_S = 90


@pytest.fixture
def soak_namespace(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[str]:
    yield NAMESPACE
    soak.cleanup(stack_cfg, NAMESPACE)
    h.wait_until("the soak's Pods gone", lambda: not core.list_namespaced_pod(NAMESPACE).items, 60)
    h.wait_until("no Slurm jobs left by the soak", lambda: not h.squeue_ids(stack_cfg), 120)
    # A failed test may leave a node drained: the tests after this one need every node back.
    for node, (drained, reason) in soak.slurm_nodes(stack_cfg).items():
        if drained:
            print(f"[soak] {node} drained: {reason}; resuming it")
            h.resume_if_drained(stack_cfg, node)
    h.wait_until("every Slurm node idle again", lambda: _all_idle(stack_cfg), 60, every=1)


def _all_idle(cfg: StackConfig) -> bool:
    states = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"], env=h.slurm_env(cfg), capture_output=True, text=True, check=True
    ).stdout.split()[1::2]
    return bool(states) and all(s == "idle" for s in states)


def test_a_short_soak_keeps_every_invariant(stack_cfg: StackConfig, soak_namespace: str) -> None:
    result = soak.run(stack_cfg, seed=7, minutes=MINUTES, settle=SETTLE_S, namespace=soak_namespace)
    soak.report(result, seed=7)
    assert result.done["pods created"] > 0 and result.done["gangs created"] > 0
    assert result.done["elastic gangs created"] > 0, result.done  # a core and extras (issue 53)
    if h.podgroups()[1] == "v1beta1":  # Kubernetes 1.37: CompositePodGroups too, as het jobs
        assert result.done["het gangs created"] > 0, result.done
        # and a Job's own gang below its parallelism: an elastic Indexed Job scaled up and down
        assert result.done["elastic job scaled"] > 0, result.done
    if h.podgroups()[1] == "v1beta1":  # and DeviceTaintRules (GA): GPU Pods on the mixed node, taints
        assert result.done["gpu taints made"] > 0, result.done
        assert sum(n for what, n in result.done.items() if what.startswith("gpu pods")) > 0, result.done
        # Shares of the shard node's GPUs from both sides (issue 54).
        assert result.done["gpu pods (shares) created"] > 0 and result.done["shard jobs"] > 0, result.done
    assert sum(n for what, n in result.done.items() if what.startswith("kill -9")) >= 3
    assert all(result.done[f"restart {name}"] == 1 for name in soak.RESTARTED_ONCE), result.done
    assert result.counts == dict.fromkeys(result.counts, 0), result.counts
