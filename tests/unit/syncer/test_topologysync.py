"""The syncer keeps Slurm's topology in step with Node labels (issue 38): written whole, taken by a
reconfigure, put back when slurmctld does not live through it, and not rewritten for nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tandem import topology
from tandem.metrics import REGISTRY
from tandem.slurm.models import Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.topologysync import MIN_INTERVAL_SECONDS, RESYNC_SECONDS, TopologyConfig, TopologySync

RACK = "topology.kubernetes.io/rack"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sync(
    tmp_path: Path, labels: dict[str, Any], alive: bool = True, name: str = "topology.conf"
) -> tuple[TopologySync, mock.Mock, Clock]:
    slurm = mock.Mock()
    slurm.ping.return_value = alive
    slurm.list_nodes.return_value = []
    clock = Clock()
    cfg = TopologyConfig((RACK,), topology.TREE, str(tmp_path / name))
    return TopologySync(cfg, lambda: labels, slurm, clock=clock, sleep=lambda s: None), slurm, clock


def test_the_labels_reach_slurm_and_the_same_labels_write_nothing(tmp_path: Path) -> None:
    labels = {"cpu-001": {RACK: "a"}, "cpu-002": {RACK: "b"}}
    s, slurm, clock = sync(tmp_path, labels)
    assert s.reconcile("topology") == RESYNC_SECONDS
    text = (tmp_path / "topology.conf").read_text()
    assert "SwitchName=l0-a-" in text and "Nodes=cpu-001" in text
    slurm.reconfigure.assert_called_once()
    clock.now += 60
    s.reconcile("topology")
    slurm.reconfigure.assert_called_once()  # nothing changed, nothing written


def test_a_moved_node_is_written_again_but_not_sooner_than_the_minimum_interval(tmp_path: Path) -> None:
    labels: dict[str, Any] = {"cpu-001": {RACK: "a"}, "cpu-002": {RACK: "a"}}
    s, slurm, clock = sync(tmp_path, labels)
    s.reconcile("topology")
    labels["cpu-002"] = {RACK: "b"}
    clock.now += 1
    after = s.reconcile("topology")
    assert after is not None and after == pytest.approx(MIN_INTERVAL_SECONDS - 1)
    assert slurm.reconfigure.call_count == 1
    clock.now += after
    s.reconcile("topology")
    assert slurm.reconfigure.call_count == 2
    assert "l0-b-" in (tmp_path / "topology.conf").read_text()


def test_the_minimum_interval_is_the_one_configured(tmp_path: Path) -> None:
    labels: dict[str, Any] = {"cpu-001": {RACK: "a"}}
    slurm = mock.Mock()
    slurm.list_nodes.return_value = []
    clock = Clock()
    cfg = TopologyConfig((RACK,), topology.TREE, str(tmp_path / "topology.conf"), min_interval=3.0)
    s = TopologySync(cfg, lambda: labels, slurm, clock=clock, sleep=lambda s: None)
    s.reconcile("topology")
    labels["cpu-001"] = {RACK: "b"}
    clock.now += 1
    assert s.reconcile("topology") == pytest.approx(2.0)
    clock.now += 2
    assert s.reconcile("topology") == RESYNC_SECONDS and slurm.reconfigure.call_count == 2


def test_slurmctld_gone_after_the_reconfigure_gets_the_previous_file_back(tmp_path: Path) -> None:
    labels: dict[str, Any] = {"cpu-001": {RACK: "a"}}
    s, slurm, clock = sync(tmp_path, labels)
    s.reconcile("topology")
    good = (tmp_path / "topology.conf").read_text()
    labels["cpu-001"] = {RACK: "b"}
    slurm.ping.return_value = False
    clock.now += 60
    with pytest.raises(SlurmApiError, match="stopped answering"):
        s.reconcile("topology")
    assert (tmp_path / "topology.conf").read_text() == good
    assert not list(tmp_path.glob(".topology.conf.*"))  # no temporary file left


def test_a_reconfigure_slurm_refuses_is_an_error_to_retry(tmp_path: Path) -> None:
    s, slurm, _ = sync(tmp_path, {"cpu-001": {RACK: "a"}})
    slurm.reconfigure.side_effect = SlurmApiError("GET reconfigure: HTTP 403: Access denied", 403)
    with pytest.raises(SlurmApiError, match="did not reconfigure"):
        s.reconcile("topology")


def test_a_yaml_file_gets_topology_yaml(tmp_path: Path) -> None:
    s, _, _ = sync(tmp_path, {"cpu-001": {RACK: "a"}}, name="topology.yaml")
    s.reconcile("topology")
    assert '"topology": "tandem"' in (tmp_path / "topology.yaml").read_text()


def test_a_block_topology_slurm_would_die_of_is_not_written(tmp_path: Path) -> None:
    slurm = mock.Mock()
    cfg = TopologyConfig((RACK,), topology.BLOCK, str(tmp_path / "topology.conf"))
    s = TopologySync(cfg, lambda: {"n1": {RACK: "a"}}, slurm, sleep=lambda s: None)
    with mock.patch.object(topology, "problems", return_value=["a block of 1 nodes is smaller"]):
        s.reconcile("topology")
    assert not (tmp_path / "topology.conf").exists()
    slurm.reconfigure.assert_not_called()


def test_the_configmap_carries_the_file_and_the_tree(tmp_path: Path) -> None:
    kube = mock.Mock()
    slurm = mock.Mock()
    cfg = TopologyConfig((RACK,), topology.TREE, "", "tandem/tandem-topology")
    s = TopologySync(cfg, lambda: {"cpu-001": {RACK: "a"}}, slurm, kube, sleep=lambda s: None)
    s.reconcile("topology")
    method, path = kube.request.call_args.args
    body = kube.request.call_args.kwargs["body"]
    assert (method, path) == ("PUT", "/api/v1/namespaces/tandem/configmaps/tandem-topology")
    assert topology.from_json(body["data"]["topology.json"]).nodes == ("cpu-001",)
    assert "SwitchName=" in body["data"]["topology.conf"]
    slurm.reconfigure.assert_not_called()  # no file of slurmctld's written
    s.reconcile("topology")
    assert kube.request.call_count == 1


def _features(slurm: mock.Mock) -> dict[str, tuple[str, ...]]:
    return {c.args[0]: c.args[1] for c in slurm.set_node_features.call_args_list}


def test_each_node_gets_its_domains_as_features_beside_its_own_after_the_reconfigure(tmp_path: Path) -> None:
    labels: dict[str, Any] = {"cpu-001": {RACK: "a"}, "cpu-002": {RACK: "a"}, "cpu-003": None}
    s, slurm, _ = sync(tmp_path, labels)
    # What Slurm shows right after the reconfigure (slurm.conf's features only), not the poll's
    # older view.
    slurm.list_nodes.return_value = [
        Node("cpu-001", "IDLE", features=("cpu",)),
        Node("cpu-002", "IDLE", features=("cpu", "l0-old-abcde")),
        Node("cpu-003", "IDLE", features=("cpu", "l0-gone-abcde")),
    ]
    s.reconcile("topology")
    rack = topology.build((RACK,), topology.TREE, labels).at_level(0)[0].name
    assert _features(slurm) == {
        "cpu-001": ("cpu", rack),
        "cpu-002": ("cpu", rack),  # a stale domain replaced
        "cpu-003": ("cpu",),  # its Node is not known: no domain, the stale one dropped
    }


def test_features_a_reconfigure_dropped_are_set_again_and_ones_in_place_are_left(tmp_path: Path) -> None:
    labels: dict[str, Any] = {"cpu-001": {RACK: "a"}, "cpu-002": {RACK: "b"}}
    seen: dict[str, tuple[str, ...]] = {}
    slurm = mock.Mock()
    slurm.list_nodes.return_value = []
    s = TopologySync(TopologyConfig((RACK,), topology.TREE), lambda: labels, slurm, features=lambda: seen)
    t = topology.build((RACK,), topology.TREE, labels)
    a, b = (d.name for d in t.at_level(0))
    seen.update({"cpu-001": ("cpu", a), "cpu-002": ("cpu",)})  # an admin's reconfigure wiped cpu-002's
    s.reconcile("topology")
    assert _features(slurm) == {"cpu-002": ("cpu", b)}
    slurm.reconfigure.assert_not_called()  # no file: the features alone


def test_a_node_slurm_refuses_features_for_does_not_stop_the_others_and_is_retried(tmp_path: Path) -> None:
    labels: dict[str, Any] = {"cpu-001": {RACK: "a"}, "cpu-002": {RACK: "a"}}
    seen = {"cpu-001": ("cpu",), "cpu-002": ("cpu",)}
    slurm = mock.Mock()
    slurm.set_node_features.side_effect = [SlurmApiError("POST node/cpu-001: HTTP 500", 500), None]
    s = TopologySync(TopologyConfig((RACK,), topology.TREE), lambda: labels, slurm, features=lambda: seen)
    with pytest.raises(SlurmApiError, match="not set on 1 node"):
        s.reconcile("topology")
    assert [c.args[0] for c in slurm.set_node_features.call_args_list] == ["cpu-001", "cpu-002"]


def test_the_topology_is_published_only_once_slurm_has_its_domains_as_features(tmp_path: Path) -> None:
    """Seen in the lab (issue 53): racks labelled, the topology published, and a gang created at once
    named domains Slurm did not have yet (its reconfigure had dropped the features): refused for
    good. Slurm has them first now; the scheduler reads them after."""
    order: list[str] = []
    kube = mock.Mock()
    kube.request.side_effect = lambda *args, **kwargs: order.append("published")
    slurm = mock.Mock()
    slurm.ping.return_value = True
    slurm.reconfigure.side_effect = lambda: order.append("reconfigured")
    slurm.set_node_features.side_effect = lambda node, features: order.append(f"features {node}")
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE", features=("cpu",))]
    cfg = TopologyConfig((RACK,), topology.TREE, str(tmp_path / "topology.conf"), "tandem/tandem-topology")
    s = TopologySync(cfg, lambda: {"cpu-001": {RACK: "a"}}, slurm, kube, clock=Clock(), sleep=lambda s: None)
    s.reconcile("topology")
    assert order == ["reconfigured", "features cpu-001", "published"]


def test_a_topology_whose_features_slurm_refused_is_not_published_yet(tmp_path: Path) -> None:
    kube = mock.Mock()
    slurm = mock.Mock()
    slurm.set_node_features.side_effect = SlurmApiError("POST node/cpu-001: HTTP 500", 500)
    seen = {"cpu-001": ("cpu",)}
    cfg = TopologyConfig((RACK,), topology.TREE, "", "tandem/tandem-topology")
    clock = Clock()
    labels = {"cpu-001": {RACK: "a"}}
    s = TopologySync(
        cfg, lambda: labels, slurm, kube, features=lambda: seen, clock=clock, sleep=lambda s: None
    )
    with pytest.raises(SlurmApiError, match="not set on 1 node"):
        s.reconcile("topology")
    kube.request.assert_not_called()
    slurm.set_node_features.side_effect = None
    clock.now += MIN_INTERVAL_SECONDS
    s.reconcile("topology")  # the runner's retry
    assert kube.request.call_count == 1


def test_a_retry_after_our_reconfigure_asks_slurm_for_the_features_not_the_older_poll(tmp_path: Path) -> None:
    """Our reconfigure dropped every node's domains, and setting them failed once: the retry must
    not believe the poll's older view (which still shows them) and publish a topology whose
    features Slurm lacks."""
    labels = {"cpu-001": {RACK: "a"}}
    rack = topology.build((RACK,), topology.TREE, labels).at_level(0)[0].name
    kube, slurm = mock.Mock(), mock.Mock()
    slurm.ping.return_value = True
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE", features=("cpu",))]
    slurm.set_node_features.side_effect = [SlurmApiError("POST node/cpu-001: HTTP 500", 500), None]
    older = {"cpu-001": ("cpu", rack)}  # what the poll saw before the reconfigure
    clock = Clock()
    cfg = TopologyConfig((RACK,), topology.TREE, str(tmp_path / "topology.conf"), "tandem/tandem-topology")
    s = TopologySync(
        cfg, lambda: labels, slurm, kube, clock=clock, sleep=lambda s: None, features=lambda: older
    )
    with pytest.raises(SlurmApiError):
        s.reconcile("topology")
    clock.now += MIN_INTERVAL_SECONDS
    s.reconcile("topology")
    assert slurm.set_node_features.call_count == 2
    assert kube.request.call_count == 1


def test_nodes_without_a_levels_label_are_counted_for_the_user(tmp_path: Path) -> None:
    """Issue 53: racks labelled, zones not: the user is told (a metric per level; kubectl tandem
    topology names the Nodes)."""
    zone = "topology.kubernetes.io/zone"
    slurm = mock.Mock()
    slurm.ping.return_value = True
    slurm.list_nodes.return_value = []
    labels = {"cpu-001": {RACK: "a"}, "cpu-002": {RACK: "a"}, "cpu-003": {}}
    cfg = TopologyConfig((zone, RACK), topology.TREE, str(tmp_path / "topology.conf"))
    TopologySync(cfg, lambda: labels, slurm, clock=Clock(), sleep=lambda s: None).reconcile("topology")
    shown = [x for x in REGISTRY.render().splitlines() if x.startswith("tandem_topology_nodes_unlabelled{")]
    assert sorted(shown) == [
        'tandem_topology_nodes_unlabelled{level="topology.kubernetes.io/rack"} 1.0',
        'tandem_topology_nodes_unlabelled{level="topology.kubernetes.io/zone"} 3.0',
    ]


def test_features_the_polls_view_missed_are_set_again_by_a_pass_that_asks_slurm(tmp_path: Path) -> None:
    # Slurm and every slurmd restarted twice between two polls: the poll's view still shows the
    # domains, Slurm has slurm.conf's features only, and no change of the view woke a pass. Before,
    # nothing gave them back (a gang asking its rack pended BadConstraints; bench/topology.py).
    labels: dict[str, Any] = {"cpu-001": {RACK: "a"}}
    t = topology.build((RACK,), topology.TREE, labels)
    (a,) = (d.name for d in t.at_level(0))
    slurm = mock.Mock()
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE", features=("cpu",))]
    clock = Clock()
    stale = {"cpu-001": ("cpu", a)}
    s = TopologySync(
        TopologyConfig((RACK,), topology.TREE), lambda: labels, slurm, features=lambda: stale, clock=clock
    )
    # A pass comes back by itself, and one within RESYNC_SECONDS reads the poll's view.
    assert s.reconcile("topology") == RESYNC_SECONDS
    assert _features(slurm) == {}
    clock.now += RESYNC_SECONDS
    s.reconcile("topology")
    assert _features(slurm) == {"cpu-001": ("cpu", a)}
