"""controller-runtime's Watches(source, handler, predicates), made smaller: what an event of a
source (an informer's change, a message of a stream) puts on a controller's work queue.

Predicates drop the events no reconcile would act on before any key is queued (a heartbeat, the
echo of the controller's own write); the handler maps the rest to the keys whose reconcile reads
what changed. A service declares its watches in one module, so what wakes a reconcile is read in
one place (tandem.scheduler.watches)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from tandem.kube import JSON
from tandem.workqueue import Key

E = TypeVar("E")


class Queue(Protocol):
    """A controller's work queue (tandem.workqueue.WorkQueue), as a watch fills it."""

    def add(self, key: Key, urgent: bool = False) -> None: ...


@dataclass(frozen=True)
class Change:
    """An informer's event: an object's key, as it was (None: new) and as it is now (None: gone)."""

    key: str
    old: JSON | None
    new: JSON | None


@dataclass(frozen=True)
class Watch(Generic[E]):
    """One source's events into `queue`: an event any predicate says False to is dropped; the keys
    `handler` maps the others to are queued, ahead of the rest when `urgent` says so (a Pod to
    bind before a condition to write). Predicates run in order and stop at the first False, so
    one with a side effect (forgetting what it recognised) runs only when those before it pass."""

    queue: Queue
    handler: Callable[[E], Iterable[Key]]
    predicates: tuple[Callable[[E], bool], ...] = ()
    urgent: Callable[[E], bool] | None = None

    def __call__(self, event: E) -> None:
        if not all(passes(event) for passes in self.predicates):
            return
        urgent = self.urgent is not None and self.urgent(event)
        for key in self.handler(event):
            if urgent:
                self.queue.add(key, urgent=True)
            else:
                self.queue.add(key)


def on_change(*calls: Callable[[Change], None]) -> Callable[[str, JSON | None, JSON | None], None]:
    """What an informer calls back on each change (tandem.informer.Informer's `on_change`): each
    watch of it in order, and whatever keeps a cache derived from it current."""

    def changed(key: str, old: JSON | None, new: JSON | None) -> None:
        change = Change(key, old, new)
        for call in calls:
            call(change)

    return changed


def itself(event: Key) -> list[Key]:
    """The handler of a source whose event is the key to queue (a Slurm node's name)."""
    return [event]
