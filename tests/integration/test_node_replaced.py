"""A NodeSet replaces a broken Node: the slurmd Pod of a Slurm node comes back on another Node.
Tandem must follow it, not what it learnt before: the lock taints the new Node and the Pod of the
next job is bound there. The node's credential was bound to the old Pod and dies with it; the new
Pod's is the one its prolog presents (kubelet projects it; the lab mints it)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from kubernetes import client as k8s

from devstack import config, nodetokens
from devstack import kube as devkube
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

SLURM_NODE = "cpu-005"
OLD_NODE = h.kube_node_of(SLURM_NODE)
NEW_NODE = h.kube_node_of("cpu-003")


def _move_slurmd(cfg: StackConfig, core: k8s.CoreV1Api, kube_node: str) -> None:
    old_uid = core.read_namespaced_pod(SLURM_NODE, config.SLURM_NAMESPACE).metadata.uid
    core.delete_namespaced_pod(SLURM_NODE, config.SLURM_NAMESPACE, grace_period_seconds=0)

    def replaced() -> bool:
        try:
            return bool(core.read_namespaced_pod(SLURM_NODE, config.SLURM_NAMESPACE).metadata.uid != old_uid)
        except k8s.ApiException as e:
            if e.status != 404:
                raise
        core.create_namespaced_pod(
            config.SLURM_NAMESPACE, devkube.slurmd_pod_manifest(int(SLURM_NODE.split("-")[1]), kube_node)
        )
        return True

    h.wait_until(f"slurmd {SLURM_NODE} on {kube_node}", replaced, 30)
    h.wait_until(
        f"slurmd {SLURM_NODE} running",
        lambda: core.read_namespaced_pod(SLURM_NODE, config.SLURM_NAMESPACE).status.phase == "Running",
        30,
    )
    nodetokens.refresh(cfg)  # the new Pod's own credential, as kubelet would project it


@pytest.fixture
def slurmd_moves(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[None]:
    yield
    # Runs before `clean`: the other tests need cpu-005 back on its own Node, unlocked.
    if core.read_namespaced_pod(SLURM_NODE, config.SLURM_NAMESPACE).spec.node_name != OLD_NODE:
        for pod in core.list_namespaced_pod("default").items:
            h.delete_pod(core, pod.metadata.name, grace=0)
        h.wait_until("no lock on the moved node", lambda: h.lock_annotation(core, SLURM_NODE) == "false", 60)
        _move_slurmd(stack_cfg, core, OLD_NODE)


def _bound_node(core: k8s.CoreV1Api, name: str) -> str | None:
    pod = h.get_pod(core, name)
    return pod.spec.node_name if pod is not None else None


def test_after_its_slurmd_pod_moves_a_slurm_node_locks_and_binds_on_the_new_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, slurmd_moves: None
) -> None:
    # Both services learn where cpu-005 lives.
    first = h.unique("before-move")
    h.create(core, h.tandem_pod(stack_cfg, first, {h.PREFIX + "required-nodes": SLURM_NODE}))
    assert h.wait_until("first Pod bound", lambda: _bound_node(core, first), 30) == OLD_NODE
    h.delete_pod(core, first, grace=0)
    h.wait_until("lock released", lambda: h.lock_annotation(core, SLURM_NODE) == "false", 60)
    h.wait_until("old Node untainted", lambda: not h.node_has_lock_taint(core, OLD_NODE), 30)

    old_credential = nodetokens.read(stack_cfg, SLURM_NODE)
    _move_slurmd(stack_cfg, core, NEW_NODE)
    # Issue 39: the credential of the deleted Pod speaks for nothing now (its job is long gone, so
    # an unlock would otherwise pass).
    refused = httpx.post(
        f"{stack_cfg.hooks_url}/v1/unlock",
        json={"node": SLURM_NODE, "job": 4_000_000_003},
        headers={"Authorization": f"Bearer {old_credential}"},
        timeout=15,
    )
    # 403 when the syncer still holds the API server's review of it (its Pod's uid no longer
    # matches), 401 once it asks again (the API server refuses a token of a deleted Pod).
    assert refused.status_code in (401, 403), refused.text

    second = h.unique("after-move")
    h.create(core, h.tandem_pod(stack_cfg, second, {h.PREFIX + "required-nodes": SLURM_NODE}))
    assert h.wait_until("second Pod bound", lambda: _bound_node(core, second), 30) == NEW_NODE
    assert h.lock_annotation(core, SLURM_NODE) == "locked_strict"
    assert h.node_has_lock_taint(core, NEW_NODE)
    assert not h.node_has_lock_taint(core, OLD_NODE)
    h.delete_pod(core, second, grace=0)
    h.wait_until("lock released", lambda: h.lock_annotation(core, SLURM_NODE) == "false", 60)
    h.wait_until("new Node untainted", lambda: not h.node_has_lock_taint(core, NEW_NODE), 30)
