"""Runs a reconciler the way controller-runtime does: workers take keys from a work queue, started
once every cache the reconciler reads has synced (tandem.manager starts them); a failed key comes
back after a per-key exponential backoff; an error no retry can fix is logged once and never
retried; a reconciler asks for a later look by returning a delay. Each outcome is counted."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tandem.kube import KubeError
from tandem.metrics import REGISTRY
from tandem.slurm.rest import SlurmApiError
from tandem.workqueue import Key, WorkQueue

log = logging.getLogger(__name__)

RECONCILES = REGISTRY.counter(
    "tandem_reconcile_total",
    "reconciles by controller and outcome (success, requeue_after, not_yet, error, terminal)",
    ["controller", "result"],
)
RECONCILE_SECONDS = REGISTRY.histogram("tandem_reconcile_seconds", "time one reconcile took", ["controller"])
# Each controller's queue, the newest runner of a name reporting (tests make many). One callback for
# all: a callback per runner replaced the one before, and the syncer's node-sync queue went unreported
# once its topology runner was made.
_QUEUES: dict[str, WorkQueue] = {}
REGISTRY.gauge(
    "tandem_workqueue_depth",
    "keys waiting in a controller's work queue",
    ["controller"],
    collect=lambda: {(name,): float(len(queue)) for name, queue in list(_QUEUES.items())},
)

# A reconcile's answer: None when done, or seconds after which to look at the key again.
Requeue = float | None


class TerminalError(Exception):
    """What the reconciler found cannot be fixed by trying again (the object must change first)."""


class NotYet(Exception):
    """Nothing can be done yet and no event is sure to announce when: not an error, but the key
    comes back after its own backoff, as a failed one does (the runner owns every retry)."""


class Runner:
    def __init__(
        self,
        name: str,
        queue: WorkQueue,
        reconcile: Callable[[Key], Requeue],
        workers: int = 1,
    ) -> None:
        self.name = name
        self.queue = queue
        self.reconcile = reconcile
        self.workers = workers
        _QUEUES[name] = queue

    def start_workers(self, on_started: Callable[[], None] = lambda: None) -> None:
        """Start the workers (they end when the queue shuts down), then call `on_started`. Only
        once every cache the reconciler reads has synced (tandem.manager waits for that): before,
        "not in the cache" does not mean "gone", and a reconcile could cancel the job of a Pod it
        has not seen yet."""
        for i in range(self.workers):
            threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True).start()
        log.info("workers started", extra={"controller": self.name, "workers": self.workers})
        on_started()

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                self.handle(key)
            finally:
                self.queue.done(key)

    def handle(self, key: Key) -> None:
        began = time.monotonic()
        try:
            after = self.reconcile(key)
        except NotYet as e:
            RECONCILES.inc(controller=self.name, result="not_yet")
            delay = self.queue.add_rate_limited(key)
            log.info("waiting", extra={"key": key, "why": str(e), "retry_in_s": delay})
        except TerminalError as e:
            RECONCILES.inc(controller=self.name, result="terminal")
            log.error("reconcile failed; not retried", extra={"key": key, "error": str(e)})
            self.queue.forget(key)
        except Exception as e:
            RECONCILES.inc(controller=self.name, result="error")
            delay = self.queue.add_rate_limited(key)
            log.warning(
                "reconcile failed; retrying",
                extra={"key": key, "error": str(e), "retry_in_s": delay},
                exc_info=not _expected(e),
            )
        else:
            self.queue.forget(key)
            if after is not None:
                RECONCILES.inc(controller=self.name, result="requeue_after")
                self.queue.add_after(key, after)
            else:
                RECONCILES.inc(controller=self.name, result="success")
        finally:
            RECONCILE_SECONDS.observe(time.monotonic() - began, controller=self.name)


def _expected(e: Exception) -> bool:
    """An outside service's error (worth a line in the log) rather than a bug (worth a trace)."""
    return isinstance(e, KubeError | SlurmApiError)
