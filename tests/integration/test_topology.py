"""Slurm's topology follows Node labels (issue 38): the syncer writes it where slurmctld reads it
(topology.conf on 24.11, topology.yaml on 26.05), Slurm takes it without a restart, and label
values at the edge of what Kubernetes allows never take slurmctld down."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import config
from devstack.config import StackConfig
from tandem import topology
from tandem.slurm.hostlist import expand
from tests.integration import helpers as h
from tests.integration.test_kubectl_tandem import kubectl_tandem

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

ZONE, RACK = config.TOPOLOGY_LEVELS


@pytest.fixture
def labelled(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[None]:
    """The test labels Nodes; afterwards none carries a topology label (each Node its own domain)."""
    yield
    for i in range(stack_cfg.nodes):
        _label(core, config.kube_node_name(i), {ZONE: None, RACK: None})
    h.wait_until("Slurm's topology flat again", lambda: _racks(stack_cfg) == _singletons(stack_cfg), 60)


def _label(core: k8s.CoreV1Api, node: str, labels: dict[str, str | None]) -> None:
    core.patch_node(node, {"metadata": {"labels": labels}})


def _shown(cfg: StackConfig) -> str:
    return h.scontrol(cfg, "show", "topology")


def _racks(cfg: StackConfig) -> list[frozenset[str]] | None:
    """Slurm's leaf switches as it shows them: the node sets under each (None while it shows no
    topology)."""
    shown = _shown(cfg)
    leaves = [
        frozenset(_expand(m.group(1)))
        for line in shown.splitlines()
        if "Level=0" in line and (m := re.search(r"\bNodes=(\S+)", line))
    ]
    return sorted(leaves, key=sorted) or None


def _expand(hostlist: str) -> list[str]:
    return expand(hostlist)


def _singletons(cfg: StackConfig) -> list[frozenset[str]]:
    return sorted((frozenset({config.slurm_node_name(i)}) for i in range(cfg.nodes)), key=sorted)


def _alive(cfg: StackConfig) -> bool:
    return "UP" in h.scontrol(cfg, "ping")


def test_slurms_topology_follows_node_labels_added_moved_and_removed(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    nodes = [config.slurm_node_name(i) for i in range(stack_cfg.nodes)]
    for i in range(stack_cfg.nodes):
        # Racks of uneven size: 3 in rack-a, the rest in rack-b, all in one zone.
        _label(core, config.kube_node_name(i), {ZONE: "z1", RACK: "rack-a" if i < 3 else "rack-b"})
    want = sorted([frozenset(nodes[:3]), frozenset(nodes[3:])], key=sorted)
    h.wait_until("Slurm's racks as labelled", lambda: _racks(stack_cfg) == want, 60)
    # Moved: node 2 to rack-b.
    _label(core, config.kube_node_name(2), {RACK: "rack-b"})
    want = sorted([frozenset(nodes[:2]), frozenset(nodes[2:])], key=sorted)
    h.wait_until("node 2 in rack-b", lambda: _racks(stack_cfg) == want, 60)
    # Removed: node 0's labels go; it is a domain of its own.
    _label(core, config.kube_node_name(0), {ZONE: None, RACK: None})
    want = sorted([frozenset(nodes[:1]), frozenset(nodes[1:2]), frozenset(nodes[2:])], key=sorted)
    h.wait_until("node 0 on its own", lambda: _racks(stack_cfg) == want, 60)
    assert _alive(stack_cfg)
    # A two-node job asking for one leaf switch lands inside one rack.
    job = h.sbatch(stack_cfg, "-N2", "--switches=1", "--mem=1G", "--cpus-per-task=1")
    h.wait_until(
        "the job running", lambda: "RUNNING" in h.squeue(stack_cfg, "-j", str(job), "-h", "-o", "%T"), 60
    )
    placed = set(_expand(h.squeue(stack_cfg, "-j", str(job), "-h", "-o", "%N").strip()))
    assert any(placed <= rack for rack in want), (placed, want)
    # The tree as an operator reads it.
    shown = kubectl_tandem(stack_cfg, "topology")
    assert "rack-b" in shown and nodes[5] in shown


EDGE = [
    "a" * 63,
    "rack.1_A",
    "1rack1",
    "Rack-A",
    "rack-a",
    "0",
]


def test_label_values_at_the_edge_never_take_slurmctld_down(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    """Values Kubernetes allows, differing only in case, with dots, underscores and digits at both
    ends, 63 characters long: each its own rack, and slurmctld up after every reconfigure."""
    for i, value in enumerate(EDGE):
        if i < stack_cfg.nodes:
            _label(core, config.kube_node_name(i), {RACK: value})
    h.wait_until(
        "every value its own rack",
        lambda: _racks(stack_cfg) is not None and len(_racks(stack_cfg) or []) == stack_cfg.nodes,
        60,
    )
    assert _alive(stack_cfg)
    log = (stack_cfg.log_dir / "slurmctld.log").read_text()
    assert "fatal:" not in log[-20000:]


def test_the_topology_is_published_for_the_scheduler_and_kubectl(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    _label(core, config.kube_node_name(1), {ZONE: "z1", RACK: "r9"})
    namespace, name = config.TOPOLOGY_CONFIGMAP.split("/")

    def published() -> topology.Topology | None:
        try:
            data = core.read_namespaced_config_map(name, namespace).data or {}
        except k8s.ApiException:
            return None
        t = topology.from_json(data.get("topology.json", "{}")) if data.get("topology.json") else None
        return t if t is not None and any(d.value == "r9" for d in t.domains) else None

    t = h.wait_until("the ConfigMap", published, 60)
    r9 = next(d for d in t.domains if d.value == "r9")
    assert r9.nodes == (config.slurm_node_name(1),) and r9.key == RACK
    assert set(t.nodes) == {config.slurm_node_name(i) for i in range(stack_cfg.nodes)}
