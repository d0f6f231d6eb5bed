"""The scheduler's reconciler: one placement key (a Pod alone, or a group) observed
(tandem.scheduler.observe), decided (tandem.scheduler.decide), acted on (tandem.scheduler.act).
What queues a key is tandem.scheduler.watches; requeues and backoff belong to the runner
(tandem.runner): this module only says "look again in N seconds" or raises."""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict

from tandem.kube import pod_finished
from tandem.metrics import REGISTRY
from tandem.runner import NotYet, Requeue
from tandem.scheduler import actions, groups, podstate
from tandem.scheduler import decide as d
from tandem.scheduler.act import act
from tandem.scheduler.announce import Announcer
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.caches import Caches
from tandem.scheduler.controller_settings import ControllerSettings
from tandem.scheduler.hands import Hands, Writers
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.killwait_source import KillWait
from tandem.scheduler.observe import Observer, gated, owner

DECISIONS = REGISTRY.counter(
    "tandem_scheduler_decisions_total",
    "what reconciles decided, by action (Nothing: a wake-up that found nothing to do)",
    ["action"],
)
RECONCILES_TO_BIND = REGISTRY.histogram(
    "tandem_scheduler_reconciles_to_bind",
    "reconciles of a Pod's key (a group's, for a gang) from its first to its bind: how often it woke",
    buckets=(1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100),
)
# Keys whose reconciles are counted until their bind: the oldest are let go past this many.
COUNTED_KEYS = 20_000


class Controller:
    def __init__(
        self,
        caches: Caches,
        jobs: JobTracker,
        writers: Writers,
        settings: ControllerSettings,
    ) -> None:
        self.caches = caches
        self.jobs = jobs
        self.settings = settings
        # What this process wrote that its caches do not show yet (shared with the watches, which
        # forget the echoes no reconcile comes for); the conditions the Pod writer remembers are
        # part of it.
        self.assumed = Assumed(conditions=writers.pods.written)
        self.observer = Observer(caches, jobs, self.assumed, settings)
        self.hands = Hands(writers, self.assumed, jobs, Announcer(writers.events, writers.pods))
        # Key -> reconciles so far, until its bind (RECONCILES_TO_BIND).
        self._reconciles: OrderedDict[str, int] = OrderedDict()
        self._counting = threading.Lock()
        REGISTRY.gauge(
            "tandem_pods",
            "this scheduler's unfinished Pods: pending (not bound yet), bound, refused",
            ["state"],
            collect=self._count_pods,
        )

    @property
    def writers(self) -> Writers:
        return self.hands.writers

    def reconcile(self, key: str) -> Requeue:
        placed = groups.target(key)  # what the key places, resolved once and passed down
        if placed.alone:
            pod = self.caches.pods.get(key)
            if pod is not None and gated(pod):
                return None  # not schedulable yet; the gates' removal is a change that comes back
            if pod is not None and self.observer.in_gang(pod):
                return None  # its group's reconcile places it
        elif self.caches.placement_key(key) != key:
            return None  # a child PodGroup: its CompositePodGroup's reconcile places it
        kill_wait = self.settings.kill_wait()
        if kill_wait is None:
            # Not read from Slurm yet (slurmrestd unreachable so far: the source logs why). A Pod
            # refused for a guessed KillWait would stay refused, so nothing is decided until then.
            raise NotYet("Slurm's KillWait is not known yet")
        # What this process wrote that the caches show now is forgotten (Assumed.reconciled): by a
        # reconcile only, since observing (which the placement view does too) forgets nothing.
        members, _, jobs = self.observer.members_and_jobs(placed)
        dra = self.caches.dra
        self.assumed.reconciled(
            owner(placed, members),
            members,
            jobs,
            lambda pod: dra is not None and dra.extended_claim(pod) is not None,
        )
        with self._counting:
            self._reconciles[key] = self._reconciles.pop(key, 0) + 1
            while len(self._reconciles) > COUNTED_KEYS:
                self._reconciles.popitem(last=False)
        observed, action = self.decision(placed, kill_wait)
        DECISIONS.inc(action=type(action).__name__)
        return act(self.hands, self.settings.placeholder, observed, action, self._bound_after)

    def decision(
        self, placed: groups.Target, kill_wait: KillWait | None = None
    ) -> tuple[actions.Observed, actions.Action]:
        """What to do for a key: decided on a snapshot, judged against every Node only when the
        decision needs which Nodes would take the members."""
        observed = self.observer.observe(placed, kill_wait)
        action = d.decide(observed)
        if isinstance(action, actions.Judge):
            observed = dataclasses.replace(observed, fits=self.observer.fits(observed.members, observed.job))
            action = d.decide(observed)
        return observed, action

    def _bound_after(self, key: str) -> None:
        """The key's members are all bound: how many reconciles it took."""
        with self._counting:
            count = self._reconciles.pop(key, None)
        if count is not None:
            RECONCILES_TO_BIND.observe(count)

    def _count_pods(self) -> dict[tuple[str, ...], float]:
        counts: dict[tuple[str, ...], float] = dict.fromkeys((("pending",), ("bound",), ("refused",)), 0.0)
        for pod in self.caches.pods.items():
            if pod_finished(pod):
                continue
            state = (
                "bound"
                if (pod.get("spec") or {}).get("nodeName")
                else "refused"
                if podstate.refused(pod)
                else "pending"
            )
            counts[(state,)] += 1
        return counts
