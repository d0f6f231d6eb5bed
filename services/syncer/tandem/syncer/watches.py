"""What wakes the syncer's two reconcilers, in controller-runtime's Watches(source, handler,
predicates) shape (tandem.watches), declared in one place as the scheduler's are
(tandem.scheduler.watches): each source's change and the keys it queues.

The node sync is keyed by Slurm node (`node/<Node>` for a lock taint no Slurm node maps to): a
Slurm node whose state or jobs changed (the Slurm store, tandem.syncer.slurmstate), a Node or
slurmd Pod that changed (the informers, tandem.syncer.cluster), the Pods on a Node a lock waits on,
a Pod gone that a KillWait drain waited for. The topology sync has one key: a Node's topology label
changed, a Slurm node came or its features changed (a reconfigure dropped its domains)."""

from __future__ import annotations

from tandem.kube import JSON
from tandem.syncer.cluster import ClusterView
from tandem.syncer.nodefacts import NODE_KEY_PREFIX, CacheFacts
from tandem.syncer.nodesync import drained_for
from tandem.syncer.slurmstate import SlurmState
from tandem.syncer.topologysync import DEBOUNCE_SECONDS
from tandem.syncer.topologysync import KEY as TOPOLOGY_KEY
from tandem.watches import Queue, Watch, itself
from tandem.workqueue import WorkQueue


def register_node_sync(queue: Queue, cluster: ClusterView, slurm: SlurmState, facts: CacheFacts) -> None:
    """Before the sources start (Manager.start)."""
    cluster.on_slurm_node_changed = Watch(queue, itself)
    slurm.on_node_changed(Watch(queue, itself))
    cluster.on_node_pods_changed = Watch(queue, facts.waiting_on)
    cluster.on_pod_gone = Watch[JSON](queue, lambda pod: drained_for(slurm.nodes(), pod))
    cluster.on_node_without_slurmd = Watch[str](queue, lambda kube_node: [NODE_KEY_PREFIX + kube_node])


def register_topology(queue: WorkQueue, cluster: ClusterView, slurm: SlurmState) -> None:
    """Before the sources start. Changes come in bursts (a rack relabelled Node by Node): one pass
    after the burst (DEBOUNCE_SECONDS)."""
    cluster.on_topology_changed = lambda: queue.add_after(TOPOLOGY_KEY, DEBOUNCE_SECONDS)
    known: dict[str, tuple[str, ...]] = {}

    def slurm_node_changed(name: str) -> None:
        node = slurm.node(name)
        features = node.features if node is not None else ()
        # A Slurm node new to the topology (its state is no matter), or its features changed.
        if known.get(name) != features:
            known[name] = features
            queue.add_after(TOPOLOGY_KEY, DEBOUNCE_SECONDS)

    slurm.on_node_changed(slurm_node_changed)
