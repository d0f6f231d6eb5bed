"""Issue 3: the prolog locks a job's Node through the hooks API; Pods that must not share it leave
first; the lock goes back to false when the Slurm node runs no job; a failed lock drains the node."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config, services
from devstack import kube as devkube
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.chart, pytest.mark.slurm, pytest.mark.usefixtures("clean")]
LOCK_TOLERATION = {"key": h.PREFIX + "lock", "operator": "Exists", "effect": "NoExecute"}
# Only a namespace the administrator lets share held Nodes may tolerate the lock (issue 50).
OPS = config.OPS_NAMESPACE


def _plain_pod(
    name: str,
    node: str,
    tolerations: list[dict[str, str]] | None = None,
    delete_delay_ms: int | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A Pod placed by someone else (no Tandem), already on `node`."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": {}}
    if delete_delay_ms:
        meta["annotations"].update(devkube.delete_delay(delete_delay_ms / 1000))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "tolerations": tolerations or [],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


class LockRecorder:
    """Every value the lock annotation of one slurmd Pod takes, in order."""

    def __init__(self, core: k8s.CoreV1Api, slurm_node: str) -> None:
        self.core, self.slurm_node = core, slurm_node
        self.values: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            value = h.lock_annotation(self.core, self.slurm_node)
            if not self.values or self.values[-1] != value:
                self.values.append(value)
            time.sleep(0.02)

    def __enter__(self) -> LockRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        value = h.lock_annotation(self.core, self.slurm_node)
        if self.values[-1] != value:
            self.values.append(value)


@pytest.fixture
def daemonset(core: k8s.CoreV1Api, stack_cfg: StackConfig) -> Iterator[str]:
    """A real DaemonSet (the controller makes its Pods); yields its label selector."""
    apps = k8s.AppsV1Api(devkube.api(stack_cfg))
    ds = apps.create_namespaced_daemon_set(
        OPS,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "log-agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "log-agent"}},
                "template": {
                    "metadata": {"labels": {"app": "log-agent"}},
                    # Like a logging agent: it tolerates the lock and stays.
                    "spec": {
                        "containers": [{"name": "c", "image": "busybox"}],
                        "tolerations": [LOCK_TOLERATION],
                    },
                },
            },
        },
    )
    assert ds.metadata.uid
    yield "app=log-agent"
    apps.delete_namespaced_daemon_set("log-agent", OPS)


def _daemon_pod_on(core: k8s.CoreV1Api, selector: str, node: str) -> str | None:
    """The name of the DaemonSet controller's Pod on `node`, once it runs."""
    for pod in core.list_namespaced_pod(OPS, label_selector=selector).items:
        if pod.spec.node_name == node and pod.status.phase == "Running":
            return str(pod.metadata.name)
    return None


def _running(core: k8s.CoreV1Api, name: str, namespace: str = "default") -> bool:
    pod = h.get_pod(core, name, namespace)
    return pod is not None and pod.status.phase == "Running" and not pod.metadata.deletion_timestamp


def test_strict_lock_evicts_what_must_not_share_the_node_before_the_pod_starts(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, daemonset: str
) -> None:
    slurm_node, node = "cpu-001", h.kube_node_of("cpu-001")
    plain, tolerant = h.unique("web"), h.unique("tolerant")
    h.create(core, _plain_pod(plain, node, delete_delay_ms=1500))  # slow to leave: "pending" is visible
    h.create(core, _plain_pod(tolerant, node, [LOCK_TOLERATION], namespace=OPS))
    agent = h.wait_until("the DaemonSet's Pod on the Node", lambda: _daemon_pod_on(core, daemonset, node), 30)
    where = {plain: "default", tolerant: OPS, agent: OPS}
    for name, ns in where.items():
        h.wait_until(f"{name} running", functools.partial(_running, core, name, ns), 15)

    tandem = h.unique("strict")
    with LockRecorder(core, slurm_node) as lock:
        h.create(core, h.tandem_pod(stack_cfg, tandem, {h.PREFIX + "required-nodes": slurm_node}))
        seen_while_binding: dict[str, bool] = {}

        def bound() -> bool:
            pod = h.get_pod(core, tandem)
            if pod is None or not pod.spec.node_name:
                return False
            seen_while_binding.update({n: h.get_pod(core, n, ns) is not None for n, ns in where.items()})
            return True

        h.wait_until("Tandem pod bound", bound, 30, every=0.02)
        h.wait_until("Tandem pod running", lambda: _running(core, tandem), 15)
        assert seen_while_binding == {plain: False, tolerant: False, agent: True}
        assert _running(core, agent, OPS)
        assert h.lock_annotation(core, slurm_node) == "locked_strict"
        assert h.node_has_lock_taint(core, node)
        # The tolerating Pod only Tandem's strict lock evicts; the other one the taint manager may
        # have deleted first (the NoExecute taint), and then Tandem leaves it alone.
        evicted = [e for e in h.events_for(core, tolerant, OPS) if e.reason == "Evicted"]
        assert len(evicted) == 1 and slurm_node in evicted[0].message
        plain_events = [e.reason for e in h.events_for(core, plain)]
        assert plain_events.count("Evicted") + plain_events.count("TaintManagerEviction") >= 1, plain_events
        assert plain_events.count("Evicted") <= 1

        h.delete_pod(core, tandem)
        h.wait_until("lock released", lambda: h.lock_annotation(core, slurm_node) == "false", 30)
    assert lock.values == ["false", "pending", "locked_strict", "false"]
    assert not h.node_has_lock_taint(core, node)
    assert _running(core, agent, OPS)


def test_a_strict_lock_spares_only_a_real_daemonsets_pod_whose_template_tolerates_it(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, daemonset: str
) -> None:
    """Issue 50: the strict lock spared any Pod of a sharing namespace whose owner reference said
    DaemonSet. A Pod there naming a real DaemonSet (the right uid) whose own template does not
    tolerate the lock is evicted now; the logging agent's Pod stays."""
    slurm_node, node = "cpu-005", h.kube_node_of("cpu-005")
    apps = k8s.AppsV1Api(devkube.api(stack_cfg))
    plain_ds = h.unique("no-toleration")
    ds = apps.create_namespaced_daemon_set(
        OPS,
        {
            "metadata": {"name": plain_ds},
            "spec": {
                "selector": {"matchLabels": {"app": plain_ds}},
                "template": {
                    "metadata": {"labels": {"app": plain_ds}},
                    "spec": {
                        "nodeSelector": {"tandem.test/nowhere": "true"},
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                },
            },
        },
    )
    poser = h.unique("poser")
    pod = _plain_pod(poser, node, [LOCK_TOLERATION], namespace=OPS)
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": plain_ds,
            "uid": ds.metadata.uid,
            "controller": True,
        }
    ]
    tandem = h.unique("strict")
    try:
        h.create(core, pod)
        agent = h.wait_until(
            "the DaemonSet's Pod on the Node", lambda: _daemon_pod_on(core, daemonset, node), 30
        )
        h.wait_until("the poser running", functools.partial(_running, core, poser, OPS), 15)
        h.create(core, h.tandem_pod(stack_cfg, tandem, {h.PREFIX + "required-nodes": slurm_node}))
        h.wait_until("Tandem pod running", lambda: _running(core, tandem), 30)
        assert h.lock_annotation(core, slurm_node) == "locked_strict"
        assert h.get_pod(core, poser, OPS) is None or not _running(core, poser, OPS)
        evicted = [e for e in h.events_for(core, poser, OPS) if e.reason == "Evicted"]
        assert len(evicted) == 1 and slurm_node in evicted[0].message, evicted
        assert _running(core, agent, OPS)
    finally:
        h.delete_pod(core, tandem)
        apps.delete_namespaced_daemon_set(plain_ds, OPS)


def test_a_normal_slurm_job_takes_a_plain_lock_that_spares_tolerating_pods(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    slurm_node, node = "cpu-003", h.kube_node_of("cpu-003")
    plain, tolerant = h.unique("web"), h.unique("tolerant")
    h.create(core, _plain_pod(plain, node))
    h.create(core, _plain_pod(tolerant, node, [LOCK_TOLERATION], namespace=OPS))
    for name, ns in ((plain, "default"), (tolerant, OPS)):
        h.wait_until(f"{name} running", functools.partial(_running, core, name, ns), 15)
    with LockRecorder(core, slurm_node) as lock:
        job = h.sbatch(stack_cfg, f"--nodelist={slurm_node}", script="#!/bin/sh\nsleep 3\n")
        h.wait_until("job running", lambda: job in h.squeue_ids(stack_cfg), 15)
        h.wait_until("node locked", lambda: h.lock_annotation(core, slurm_node) == "locked", 15)
        assert h.get_pod(core, plain) is None
        assert _running(core, tolerant, OPS)
        assert h.node_has_lock_taint(core, node)
        h.wait_until("job done and lock released", lambda: h.lock_annotation(core, slurm_node) == "false", 30)
    assert lock.values[0] == "false" and lock.values[-1] == "false" and "locked" in lock.values
    assert "locked_strict" not in lock.values
    assert not h.node_has_lock_taint(core, node)


@pytest.fixture
def broken_hooks(stack_cfg: StackConfig) -> Iterator[Any]:
    """Point the prolog at a wrong token or a dead gateway; restore the real one afterwards."""
    env_file = services.hooks_env_file(stack_cfg)
    original = env_file.read_text()

    def breaking(text: str) -> None:
        env_file.write_text(text)

    yield breaking
    env_file.write_text(original)


@pytest.mark.parametrize("how", ["wrong-token", "gateway-down"])
def test_a_failed_lock_fails_the_prolog_and_slurm_drains_the_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, broken_hooks: Any, how: str
) -> None:
    slurm_node = "cpu-005"
    if how == "wrong-token":
        broken_hooks(f"TANDEM_HOOKS_URL='{stack_cfg.hooks_url}'\nTANDEM_HOOKS_TOKEN='not-the-token'\n")
    else:
        # Short budgets: the prolog's lock and the epilog's unlock each wait out a dead gateway.
        broken_hooks(
            "TANDEM_HOOKS_URL='http://127.0.0.1:9'\nTANDEM_HOOKS_TOKEN='x'\n"
            "TANDEM_LOCK_TIMEOUT=3\nTANDEM_UNLOCK_TIMEOUT=3\n"
        )
    job = h.sbatch(stack_cfg, f"--nodelist={slurm_node}", "--no-requeue", script="#!/bin/sh\nsleep 1\n")
    try:

        def drained() -> tuple[str, str] | None:
            state = h.node_state(stack_cfg, slurm_node)
            return state if "drain" in state[0] else None

        _state, reason = h.wait_until("node drained", drained, 30)
        assert "Prolog" in reason or "prolog" in reason
        assert h.lock_annotation(core, slurm_node) != "locked"
    finally:
        h.scancel(stack_cfg, job)
        h.resume_if_drained(stack_cfg, slurm_node)


def test_a_lock_taint_on_a_node_without_a_slurmd_pod_is_removed(core: k8s.CoreV1Api) -> None:
    """A Node left tainted when its slurmd Pod moved or was deleted while its node was locked:
    no Slurm node maps to it, and the syncer takes the taint off when it sees the Node (issue 19,
    issue 22: no longer only at its periodic resync)."""
    name = h.unique("orphan")
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {"taints": [{"key": h.PREFIX + "lock", "value": "true", "effect": "NoExecute"}]},
        }
    )
    try:
        h.wait_until("the stale lock taint removed", lambda: not h.node_has_lock_taint(core, name), 20)
    finally:
        core.delete_node(name)
