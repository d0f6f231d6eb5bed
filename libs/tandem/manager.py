"""What both services run, registered once and started in order (controller-runtime's manager,
made smaller): sources (informers, the Slurm stream or poll) start first; controllers (a Runner)
and the runnables that need the caches start once every source has synced, and only while this
replica leads; one stop Event ends every backoff and wait at once.

A source that has not synced within `cache_sync_timeout` does not end the process (a fixed RBAC
rule or a returning apiserver lets it sync later, and the workers start then), but readiness says
the wait timed out, with the source's last error: a scheduler whose tenant policy is refused then
reads as stuck, not as still starting."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tandem import leader, serving
from tandem.kube import KubeClient
from tandem.runner import Runner
from tandem.sources import Source, Syncing

log = logging.getLogger(__name__)

# How often a wait for the caches looks again (the sources signal no change; a stop ends it at once).
SYNC_POLL_SECONDS = 0.1

Run = Callable[[threading.Event], None]


@dataclass(frozen=True)
class Election:
    """Leader election on a Lease; `enabled=False`: this replica is the only one and leads at once."""

    enabled: bool
    namespace: str  # blank: this Pod's
    lease: str


@dataclass
class _Registered:
    source: Source
    run: Run
    leader_only: bool
    started_at: float | None = None  # monotonic; None until started


@dataclass(frozen=True)
class _Controller:
    runner: Runner
    on_started: Callable[[], None]


@dataclass(frozen=True)
class _Runnable:
    name: str
    run: Run
    leader_only: bool
    on_lost: Callable[[], None] | None


@dataclass
class _Threads:
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self.add(thread)
        thread.start()

    def add(self, thread: threading.Thread) -> None:
        with self.lock:
            self.threads.append(thread)

    def join(self, deadline: float) -> bool:
        with self.lock:
            threads = list(self.threads)
        me = threading.current_thread()
        for t in threads:
            if t is not me:
                t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads if t is not me)


class Manager:
    def __init__(
        self,
        kube: KubeClient,
        election: Election,
        cache_sync_timeout: float = 60.0,
        elector: Callable[[], leader.LeaderElector] | None = None,
    ) -> None:
        """`elector`: makes the LeaderElector (tests give a fake Lease); the default is the
        election's Lease in its namespace."""
        self.kube = kube
        self.election = election
        self.cache_sync_timeout = cache_sync_timeout
        self._make_elector = elector or (
            lambda: leader.LeaderElector(kube, election.namespace or leader.pod_namespace(), election.lease)
        )
        self._sources: list[_Registered] = []
        self._controllers: list[_Controller] = []
        self._runnables: list[_Runnable] = []
        self._threads = _Threads()
        # Set by `stop()` (only): every source, backoff and wait the manager started ends on it.
        self.stopping = threading.Event()
        # Set on a stop or when the lease is lost: what leader-only work waits on.
        self._leader_stop = threading.Event()
        # This replica holds the lease (or needs none).
        self.leading = threading.Event()
        # The lease was lost: the process should end (leader.py says why).
        self.lost = threading.Event()
        self._timed_out_logged = False

    # -- registration ------------------------------------------------------------------------------

    def add_source(self, name: str, what: Syncing, run: Run, *, leader_only: bool = False) -> None:
        """`name` as a person reads it on /readyz; `run(stop)` keeps it current until `stop` (it
        may also start its own threads and return). A leader-only source runs only while leading
        (the syncer polls Slurm only then); the others keep standbys warm."""
        self._sources.append(_Registered(Source.of(name, what), run, leader_only))

    def add_controller(self, runner: Runner, on_started: Callable[[], None] = lambda: None) -> None:
        """Its workers start while leading, once every source has synced: before that, "not in the
        cache" does not mean "gone". `on_started` then (e.g. queue every key once)."""
        self._controllers.append(_Controller(runner, on_started))

    def add_runnable(
        self,
        name: str,
        run: Run,
        *,
        leader_only: bool = True,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        """`run(stop)` on its own thread until `stop`. Leader-only: started while leading, once
        the caches have synced, stopped when the lease is lost (after which `on_lost` is called,
        before the manager reports `lost`). Otherwise: started with the sources."""
        self._runnables.append(_Runnable(name, run, leader_only, on_lost))

    # -- running -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sources and, while leading (now when there is no election), the rest. Returns
        at once; `stop()` ends everything."""
        stop = self.stopping
        self._start_sources(leader_only=False)
        for r in self._runnables:
            if not r.leader_only:
                self._threads.spawn(r.name, r.run, stop)
        if not self.election.enabled:
            leader.LEADING.set(1, lease=self.election.lease)  # the only replica
            self._threads.spawn("manager-lead", self._lead)
            return
        elector = self._make_elector()
        self._threads.spawn("leader", elector.run, stop, self._lead_in_thread, self._on_lost)

    def stop(self) -> None:
        """Stop everything: every backoff and wait ends now (a watch ends when its client closes)."""
        self.stopping.set()
        self._halt_leader_work()

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` for what the manager started to end; True if all has."""
        return self._threads.join(time.monotonic() + timeout)

    def run_until_signal(self, *closers: Callable[[], None]) -> None:
        """Block until SIGTERM or SIGINT or a lost lease; then stop and call `closers` in order. A
        lost lease ends the process with an error: a fresh start rejoins the election."""
        serving.wait_for_stop_signal(self.lost)
        self.stop()
        for close in closers:
            close()
        if self.lost.is_set():
            raise SystemExit("lost the leader lease; exiting so a fresh start rejoins the election")

    def _halt_leader_work(self) -> None:
        self._leader_stop.set()
        for c in self._controllers:
            c.runner.queue.shutdown()

    def _start_sources(self, leader_only: bool) -> None:
        stop = self._leader_stop if leader_only else self.stopping
        for s in self._sources:
            if s.leader_only == leader_only:
                s.started_at = time.monotonic()
                self._threads.spawn(f"source-{s.source.name}", s.run, stop)

    def _lead_in_thread(self) -> None:
        # The elector calls this on a thread of its own; a stop waits for it as for the rest.
        self._threads.add(threading.current_thread())
        self._lead()

    def _lead(self) -> None:
        if self._leader_stop.is_set():
            return
        self.leading.set()
        self._start_sources(leader_only=True)
        while not self.synced():
            if self._leader_stop.wait(SYNC_POLL_SECONDS):
                return
            self._log_timeout()
        for c in self._controllers:
            c.runner.start_workers(c.on_started)
        for r in self._runnables:
            if r.leader_only:
                self._threads.spawn(r.name, r.run, self._leader_stop)

    def _on_lost(self) -> None:
        """The leader-only work stops first (no second leader acts beside the next one), then each
        runnable's `on_lost`, then `lost` tells the process to end."""
        self.leading.clear()
        self._halt_leader_work()
        for r in self._runnables:
            if r.on_lost is not None:
                r.on_lost()
        self.lost.set()

    # -- what it waits for -------------------------------------------------------------------------

    def _running(self) -> list[_Registered]:
        return [s for s in self._sources if s.started_at is not None]

    def synced(self) -> bool:
        """Every source started so far has read everything once."""
        return all(s.source.synced() for s in self._running())

    def wait_synced(self, timeout: float) -> bool:
        """Until every started source has synced, `timeout` passes, or a stop."""
        deadline = time.monotonic() + timeout
        while not self.synced():
            left = deadline - time.monotonic()
            if left <= 0 or self.stopping.wait(min(SYNC_POLL_SECONDS, left)):
                return self.synced()
        return True

    def waiting_for(self) -> list[str]:
        """One line per started source that has not synced, for /readyz: what and why; past the
        cache-sync timeout, that it timed out, and the source's last error."""
        now = time.monotonic()
        return [
            s.source.timed_out(self.cache_sync_timeout) if self._late(s, now) else s.source.waiting()
            for s in self._running()
            if not s.source.synced()
        ]

    def _late(self, s: _Registered, now: float) -> bool:
        return s.started_at is not None and now - s.started_at >= self.cache_sync_timeout

    def _log_timeout(self) -> None:
        if self._timed_out_logged:
            return
        now = time.monotonic()
        late = [s for s in self._running() if not s.source.synced() and self._late(s, now)]
        if late:
            self._timed_out_logged = True
            log.error(
                "caches not synced; workers wait",
                extra={
                    "timeout_s": self.cache_sync_timeout,
                    "sources": {s.source.name: s.source.trouble() for s in late},
                },
            )
