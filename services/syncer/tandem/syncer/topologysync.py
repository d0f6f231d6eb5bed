"""Slurm's topology kept in step with Node labels (issue 38), one key for the whole cluster.

The syncer owns the topology as it owns the Slurm node -> Node mapping: it renders it
(tandem.topology) from the labels of each Slurm node's Node, writes it where slurmctld reads it
(`--topology-file`: `topology.conf` for 24.11, `topology.yaml` for 25.05 and later, by its suffix)
makes Slurm take it (slurmrestd's `reconfigure`), gives each node its domains as features (below),
and only then publishes it in a ConfigMap (`--topology-configmap`: the file for a Slurm side that
mounts it, and `topology.json`, which `kubectl tandem topology` and the scheduler read): a gang the
scheduler places in a domain names features Slurm already has.

A topology never takes slurmctld down: it is checked before anything is written
(tandem.topology.problems), written whole (a temporary file renamed over the old one), and after
the reconfigure slurmctld must still answer; if it does not, the previous file is put back and the
failure said (log, metric `tandem_topology_writes_total{outcome="slurmctld down"}`), so that
slurmctld's restart reads a topology that worked. Label changes come in bursts (a rack relabelled
Node by Node): a change waits `DEBOUNCE_SECONDS` for the rest, and writes are at least
`--topology-min-interval` apart (MIN_INTERVAL_SECONDS unless set).

Each Slurm node also carries its domains as features (tandem.topology.node_domains), which a
gang's job names to stay in one domain (`--constraint=[a|b]`, tandem.topology.one_domain). Slurm
forgets features set so on every reconfigure and restart, whoever makes it: the reconcile runs
again whenever a node's features change (the Slurm poll shows it) and sets them back, and at least
every RESYNC_SECONDS asks Slurm itself (a change the poll's view missed). A pending job naming a
domain pends `BadConstraints` in between, and runs once they are back (measured).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tandem import topology
from tandem.kube import JSON, KubeClient, KubeError
from tandem.metrics import REGISTRY
from tandem.runner import Requeue
from tandem.slurm.models import Node
from tandem.slurm.rest import SlurmApiError

log = logging.getLogger(__name__)

KEY = "topology"
DEBOUNCE_SECONDS = 2.0
MIN_INTERVAL_SECONDS = 10.0
# How long slurmctld is given to read the new file and die of it (it exits within a second here).
SURVIVAL_WAIT_SECONDS = 3.0
CONFIGMAP_JSON = "topology.json"

WRITES = REGISTRY.counter(
    "tandem_topology_writes_total", "Slurm topologies written from Node labels, by outcome", ["outcome"]
)
FEATURE_WRITES = REGISTRY.counter(
    "tandem_topology_feature_writes_total",
    "Slurm nodes given their topology domains as features (again after a reconfigure), by outcome",
    ["outcome"],
)


# A pass at least this often, which asks Slurm for the nodes' features itself: what the poll's view
# missed (a restart of slurmctld and every slurmd dropped them while the mirror, between two of
# its polls, never saw them back: bench/topology.py's switch of slurm.conf) is given back within it.
RESYNC_SECONDS = 30.0


class SlurmControl(Protocol):
    def reconfigure(self) -> None: ...

    def ping(self) -> bool: ...

    def set_node_features(self, node: str, features: tuple[str, ...]) -> None: ...

    def list_nodes(self, changed_since: int | None = None) -> list[Node] | None: ...


@dataclass(frozen=True)
class TopologyConfig:
    levels: tuple[str, ...]
    plugin: str = topology.TREE
    # Where slurmctld reads it ("": not written to a file); `.yaml`: topology.yaml's form.
    file: str = ""
    # namespace/name of the ConfigMap to publish it in ("": none).
    configmap: str = ""
    # The least time between two writes, each a reconfigure of slurmctld.
    min_interval: float = MIN_INTERVAL_SECONDS

    @property
    def enabled(self) -> bool:
        return bool(self.levels)

    def yaml(self, slurm_reads_yaml: bool) -> bool:
        """topology.yaml's form: the file's suffix says, else the Slurm release (25.05 and later)."""
        if self.file:
            return self.file.endswith((".yaml", ".yml"))
        return slurm_reads_yaml


class TopologySync:
    """The reconcile of KEY: the topology the labels say, written and taken by Slurm when it
    differs from what was written last."""

    def __init__(
        self,
        cfg: TopologyConfig,
        labels: Callable[[], Mapping[str, Mapping[str, str] | None]],
        slurm: SlurmControl,
        kube: KubeClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        reads_yaml: Callable[[], bool] = lambda: False,
        features: Callable[[], Mapping[str, tuple[str, ...]]] = dict,
    ) -> None:
        # `labels`: every Slurm node -> its Node's labels (None: its Node is not known);
        # `reads_yaml`: whether the Slurm behind slurmrestd reads topology.yaml (25.05 and later);
        # `features`: every Slurm node -> its features as Slurm last showed them.
        self.cfg, self.labels, self.slurm, self.kube = cfg, labels, slurm, kube
        self.features = features
        self.reads_yaml = reads_yaml
        self.clock, self.sleep = clock, sleep
        self._last_write = float("-inf")
        self._published = ""
        # A reconfigure of ours whose features are not all set again yet: Slurm is asked for them
        # (the poll's view is older than Slurm's, which dropped them) until they are.
        self._reconfigured = False
        # When a pass last asked Slurm for the features itself rather than the poll's view.
        self._asked_at = clock()
        # Level key -> how many Nodes miss its label, as last rendered (what the user is told).
        self._unlabelled: dict[str, int] = {}
        REGISTRY.gauge(
            "tandem_topology_nodes_unlabelled",
            "Nodes without a topology level's label (each its own domain at that level, or, when a"
            " narrower label places them, in the level's one unlabelled domain)",
            ["level"],
            collect=lambda: {(key,): float(n) for key, n in self._unlabelled.items()},
        )

    def render(self) -> tuple[topology.Topology, str, str]:
        """The topology, its file's text and the file's name (topology.conf or topology.yaml)."""
        t = topology.build(self.cfg.levels, self.cfg.plugin, self.labels())
        if self.cfg.yaml(self.reads_yaml()):
            return t, topology.render_yaml(t), "topology.yaml"
        return t, topology.render_conf(t), "topology.conf"

    def reconcile(self, key: str) -> Requeue:
        if not self.cfg.enabled:
            return None
        t, text, file_key = self.render()
        missing = topology.unlabelled(t)
        self._unlabelled = {key: len(missing.get(key, ())) for key in t.levels}
        wanted_json = topology.to_json(t)
        changed_file = bool(self.cfg.file) and _read(self.cfg.file) != text
        if changed_file or self._published != wanted_json:
            wait = self._last_write + self.cfg.min_interval - self.clock()
            if wait > 0:
                return wait
            bad = topology.problems(t)
            if bad:
                WRITES.inc(outcome="refused")
                log.error("topology not written: slurmctld would refuse it", extra={"problems": bad})
                return None
            self._last_write = self.clock()
            if changed_file:
                self._write_file(text)
                self._reconfigured = True
            # Slurm has the domains as node features before the scheduler reads them: a gang
            # submitted in between names features Slurm would refuse (issue 53).
            self._set_features(t)
            self._publish(file_key, text, wanted_json)
            return RESYNC_SECONDS
        self._set_features(t)
        return RESYNC_SECONDS

    def _set_features(self, t: topology.Topology) -> None:
        """Each Slurm node's features: its own (slurm.conf's) and its domains. Every node is tried;
        a failure is raised after (the runner tries again). Right after this reconfigure, the
        poll's view is older than Slurm's (which dropped them): Slurm is asked; so it is every
        RESYNC_SECONDS, for what the poll's view missed."""
        ask = self._reconfigured or self.clock() - self._asked_at >= RESYNC_SECONDS
        if ask:
            self._asked_at = self.clock()
        seen = {n.name: n.features for n in self.slurm.list_nodes() or []} if ask else self.features()
        failed: list[str] = []
        for node, domains in topology.node_domains(t).items():
            current = seen.get(node)
            if current is None:
                continue  # not shown by Slurm yet: the poll that shows it brings a reconcile
            wanted = topology.node_features(current, domains)
            if wanted == current:
                continue
            try:
                self.slurm.set_node_features(node, wanted)
                FEATURE_WRITES.inc(outcome="written")
            except SlurmApiError as e:
                FEATURE_WRITES.inc(outcome="failed")
                failed.append(f"{node}: {e}")
        if failed:
            raise SlurmApiError(
                f"topology features not set on {len(failed)} node(s): {'; '.join(failed[:3])}"
            )
        self._reconfigured = False

    def _write_file(self, text: str) -> None:
        path = Path(self.cfg.file)
        previous = _read(self.cfg.file)
        _replace(path, text)
        try:
            self.slurm.reconfigure()
        except SlurmApiError as e:
            # Written but not taken: the next reconfigure or restart takes it. Tried again.
            WRITES.inc(outcome="not taken")
            raise SlurmApiError(
                f"topology written to {path}, but Slurm did not reconfigure: {e}", e.status
            ) from e
        self.sleep(SURVIVAL_WAIT_SECONDS)
        if not self.slurm.ping():
            if previous is not None:
                _replace(path, previous)
            WRITES.inc(outcome="slurmctld down")
            log.error(
                "slurmctld stopped answering after a topology reconfigure; the previous topology is back"
                " in place for its restart",
                extra={"file": str(path)},
            )
            raise SlurmApiError("slurmctld stopped answering after the topology reconfigure", 503)
        WRITES.inc(outcome="written")
        log.info(
            "Slurm topology written and taken", extra={"file": str(path), "levels": list(self.cfg.levels)}
        )

    def _publish(self, file_key: str, text: str, as_json: str) -> None:
        if not self.cfg.configmap or self.kube is None:
            self._published = as_json
            return
        namespace, _, name = self.cfg.configmap.partition("/")
        body: JSON = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "tandem-syncer"},
            },
            "data": {file_key: text, CONFIGMAP_JSON: as_json},
        }
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            self.kube.request("PUT", f"{path}/{name}", body=body)
        except KubeError as e:
            if not e.not_found:
                raise
            self.kube.post(path, body)
        self._published = as_json


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _replace(path: Path, text: str) -> None:
    """The whole file or none of it: written beside, then renamed over (slurmctld may read it at any
    moment: a restart, another's reconfigure)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
