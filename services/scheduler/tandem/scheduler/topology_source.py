"""Slurm's topology as the scheduler reads it: the `topology.json` tandem-syncer publishes in its
ConfigMap (tandem.syncer.topologysync), watched by an informer, parsed once per change.

The syncer owns the topology; the scheduler only maps a gang's label key to a level and its
domains (tandem.topology.one_domain). No ConfigMap, one that does not parse, or one the scheduler
may not read: no topology, and a gang asking for one domain waits Unschedulable saying so until it
comes. Nothing else waits for it: it is no source the workers wait on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tandem import topology
from tandem.informer import Informer
from tandem.kube import JSON, KubeClient

log = logging.getLogger(__name__)

JSON_KEY = "topology.json"


class TopologySource:
    def __init__(self, kube: KubeClient, ref: str, on_change: Callable[[], None] = lambda: None) -> None:
        """`ref`: `namespace/name` of the syncer's topology ConfigMap ("" for none). `on_change`: told
        when the topology changed (tandem.scheduler.watches.register sets it)."""
        namespace, _, name = ref.partition("/")
        if ref and (not namespace or not name):
            raise ValueError(f"--topology-configmap must be NAMESPACE/NAME, got {ref!r}")
        self.ref = ref
        self.on_change = on_change
        self._lock = threading.Lock()
        self._topology: topology.Topology | None = None
        # Why there is none ("" when there is one), as a gang's Unschedulable message says it.
        self._why = "the scheduler reads no topology (--topology-configmap)" if not ref else ""
        self.informer: Informer | None = None
        if ref:
            self._why = f"ConfigMap {ref} (tandem-syncer's --topology-levels) is not there"
            self.informer = Informer(
                kube,
                [f"/api/v1/namespaces/{namespace}/configmaps"],
                {"fieldSelector": f"metadata.name={name}"},
                self._changed,
            )

    @property
    def synced(self) -> bool:
        return self.informer is None or self.informer.synced

    @property
    def trouble(self) -> str:
        return self.informer.trouble if self.informer is not None else ""

    def run(self, stop: threading.Event) -> None:
        if self.informer is not None:
            self.informer.run(stop)

    def current(self) -> topology.Topology | str:
        """The topology, or why there is none (not read yet: what the listing last said)."""
        with self._lock:
            if self._topology is not None:
                return self._topology
            why = self._why
        if self.informer is not None and not self.informer.synced:
            trouble = self.informer.trouble
            return f"ConfigMap {self.ref} is not read yet" + (f" ({trouble})" if trouble else "")
        return why

    def _changed(self, key: str, old: JSON | None, new: JSON | None) -> None:
        found: topology.Topology | None = None
        if new is None:
            why = f"ConfigMap {self.ref} was deleted"
        else:
            try:
                found = topology.from_json(str((new.get("data") or {}).get(JSON_KEY, "")))
                why = ""
            except ValueError as e:
                why = f"ConfigMap {self.ref} holds no topology tandem-syncer wrote ({e})"
                log.error(why)
        with self._lock:
            changed = found != self._topology
            self._topology, self._why = found, why
        if changed:
            self.on_change()
