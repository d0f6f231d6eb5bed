"""One arm of an open-loop run with finite lifetimes (issue 55): arrivals fixed beforehand (a
seeded Poisson process, bench/openloop.py), each a Slurm job or a Pod that lives `lifetime`
seconds once it runs and then goes (a job's script exits; a Pod is deleted: for Tandem that is
the cancel, the epilog and the unlock), all of it inside one window of CPU and API accounting.

    arm            what one arrival is                       it "runs" when
    truly-bare     a job to slurmrestd, no Tandem prolog     its script starts (it writes the time)
    bare           the same job in a Tandem cluster          its script starts
    kube-scheduler a Pod kube-scheduler's default places     it is bound (seen on the watch)
    tandem         a Pod Tandem's scheduler places           it is bound

Latency counts from each arrival's intended time, not its send (coordinated omission). The
CPU window opens at the first arrival and closes `tail` seconds after the last one could have
gone (its arrival + its lifetime), or once the stack is quiet if that is later: each process's idle
rate, measured in a quiet window just before, is subtracted over the window's length.
"""

from __future__ import annotations

import contextlib
import heapq
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import checks, cpu, openloop
from bench.schedule import NAMESPACE, pod_manifest
from devstack import audit, config, identities
from devstack.config import StackConfig
from tandem.kube import JSON, KubeClient, KubeError
from tandem.slurm.models import Job, JobSpec
from tandem.slurm.rest import SlurmApiError, SlurmRestClient

TRULY_BARE, BARE, KUBE_SCHEDULER, TANDEM = "truly-bare", "bare", "kube-scheduler", "tandem"
ARMS = (TRULY_BARE, BARE, KUBE_SCHEDULER, TANDEM)
SLURM_ARMS = (TRULY_BARE, BARE)
# Enough threads that a slow create or submit never holds back the schedule (the slip says if one did).
WORKERS = 64
# How long an arrival may take to run before the run gives up on it (it is then a failed check).
RUN_TIMEOUT = 180.0


@dataclass
class ArmRun:
    """What one arm did at one offered rate."""

    arm: str
    rate: float
    sent: list[openloop.Sent]
    # Arrival index -> when it ran (wall clock).
    ran: dict[int, float]
    warmup: float
    started: float
    window: float = 0.0
    # CPU seconds by process group over the window, its idle share taken away.
    cpu: dict[str, float] = field(default_factory=dict)
    # API requests by user over the window (the API server's audit log).
    api: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def latencies(self) -> list[float]:
        """Each measured arrival's, from its intended time to when it ran."""
        return [s.latency(self.ran[s.index]) for s in self.measured() if s.index in self.ran]

    def measured(self) -> list[openloop.Sent]:
        return openloop.measured(self.sent, self.started, self.warmup)

    def slips(self) -> list[float]:
        return [s.slip for s in self.sent]


def idle_rates(cfg: StackConfig, seconds: float) -> dict[str, float]:
    """CPU seconds per second each group spends on a quiet stack (its timers, polls and watches)."""
    before = cpu.sample_stack(cfg)
    time.sleep(seconds)
    used = cpu.used_between(before, cpu.sample_stack(cfg))
    return {group: value / seconds for group, value in used.items()}


def minus_idle(used: dict[str, float], idle: dict[str, float], seconds: float) -> dict[str, float]:
    """CPU seconds above each group's idle over a window of `seconds` (a group busier than idle
    only by noise can come out below zero: kept, so that the noise shows)."""
    return {group: value - idle.get(group, 0.0) * seconds for group, value in used.items()}


class JobsSeen:
    """Every Slurm job polled during a run, as last seen while it held nodes: a Pod's job is gone
    from slurmctld a minute after it ends (MinJobAge), and the placement check needs its nodes."""

    def __init__(self, slurm: SlurmRestClient, every: float = 1.0) -> None:
        self.slurm, self.every = slurm, every
        self.jobs: dict[int, Job] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> JobsSeen:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(self.every):
            try:
                for job in self.slurm.list_jobs() or []:
                    if job.nodes or job.job_id not in self.jobs:
                        self.jobs[job.job_id] = job
            except (SlurmApiError, httpx.HTTPError):
                continue


def slurm_jobs(
    cfg: StackConfig, slurm: SlurmRestClient, arrivals: list[float], lifetime: float, tag: str
) -> tuple[list[openloop.Sent], dict[int, float], list[str]]:
    """Jobs whose script writes the time it started and runs `lifetime` seconds: when each ran."""
    marks = Path(tempfile.mkdtemp(prefix="tandem-curve-", dir=cfg.state_dir))
    marks.chmod(0o777)
    problems: list[str] = []
    by_job: dict[int, int] = {}
    lock = threading.Lock()

    def submit(i: int) -> None:
        spec = JobSpec(
            name=f"bench-{tag}-{i}",
            script=f"#!/bin/bash\ndate +%s.%N > {marks}/{i}\nsleep {lifetime:g}\n",
            environment={"PATH": "/usr/bin:/bin"},
            cpus=1,
            memory_mb=100,
        )
        try:
            job_id = slurm.submit_job(spec)
        except (SlurmApiError, httpx.HTTPError) as e:
            with lock:
                problems.append(f"job {i} not submitted: {e}")
            return
        with lock:
            by_job[job_id] = i

    sent = openloop.offer(arrivals, submit, WORKERS, clock=time.time)
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline and len(list(marks.iterdir())) < len(by_job):
        time.sleep(0.2)
    ran = {int(p.name): float(text) for p in marks.iterdir() if (text := p.read_text().strip())}
    shutil.rmtree(marks, ignore_errors=True)
    if len(ran) < len(by_job):
        problems.append(f"{len(by_job) - len(ran)} of {len(by_job)} jobs never ran")
        for job_id in by_job:
            slurm.cancel_job(job_id, signal="KILL")
    return sent, ran, problems


class Deleter:
    """Deletes each Pod at its time (its bind + the lifetime), on one thread."""

    def __init__(self, raw: KubeClient, path: str) -> None:
        self.raw, self.path = raw, path
        self._due: list[tuple[float, str]] = []
        self._cv = threading.Condition()
        self._closing = False
        self.failed: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def at(self, when: float, name: str) -> None:
        with self._cv:
            heapq.heappush(self._due, (when, name))
            self._cv.notify()

    def close(self) -> None:
        """Once every Pod given is deleted."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._due and not self._closing:
                    self._cv.wait()
                if not self._due:
                    return
                when, name = self._due[0]
                if when > time.time():
                    self._cv.wait(when - time.time())
                    continue
                heapq.heappop(self._due)
            try:
                self.raw.delete(f"{self.path}/{name}", {"gracePeriodSeconds": 0})
            except (KubeError, httpx.HTTPError) as e:
                if not (isinstance(e, KubeError) and e.not_found):
                    self.failed.append(f"{name} not deleted: {e}")


def pods(
    cfg: StackConfig, arm: str, arrivals: list[float], lifetime: float, tag: str
) -> tuple[list[openloop.Sent], dict[int, float], list[str], dict[str, JSON]]:
    """Pods deleted `lifetime` seconds after each is bound: when each was bound, and each bound
    Pod as the watch showed it then (its job's id on it, for the placement check)."""
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    scheduler = cfg.scheduler_name if arm == TANDEM else "default-scheduler"
    prefix = f"{tag}-"
    ran: dict[int, float] = {}
    bound: dict[str, JSON] = {}
    problems: list[str] = []
    created: set[int] = set()
    lock = threading.Lock()
    finished = threading.Event()
    deleter = Deleter(raw, path)

    def seen(obj: JSON) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name.startswith(prefix) or not (obj.get("spec") or {}).get("nodeName"):
            return
        now = time.time()
        with lock:
            if name in bound:
                return
            bound[name] = obj
            ran[int(name[len(prefix) :])] = now
        deleter.at(now + lifetime, name)

    watcher = threading.Thread(target=_watch, args=(raw, path, seen, finished), daemon=True)
    watcher.start()

    def create(i: int) -> None:
        try:
            raw.post(path, pod_manifest(f"{prefix}{i}", scheduler))
        except (KubeError, httpx.HTTPError) as e:
            with lock:
                problems.append(f"Pod {i} not created: {e}")
            return
        with lock:
            created.add(i)

    sent = openloop.offer(arrivals, create, WORKERS, clock=time.time)
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        with lock:
            if len(ran) >= len(created):
                break
        time.sleep(0.2)
    finished.set()
    deleter.close()
    problems += deleter.failed
    missing = sorted(created - set(ran))
    if missing:
        problems += checks.unbound((f"{prefix}{i}" for i in missing), ())
        for i in missing:
            with contextlib.suppress(KubeError, httpx.HTTPError):
                raw.delete(f"{path}/{prefix}{i}", {"gracePeriodSeconds": 0})
    raw.close()
    return sent, ran, problems, bound


def _watch(raw: KubeClient, path: str, seen: Callable[[JSON], None], done: threading.Event) -> None:
    version = str(raw.get(path)["metadata"]["resourceVersion"])
    while not done.is_set():
        try:
            for event in raw.watch(path, {"resourceVersion": version}, 30):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":  # 410 Gone: list again below
                    raise KubeError(int(obj.get("code") or 0), "", str(obj.get("message")))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                seen(obj)
                if done.is_set():
                    return
        except (KubeError, httpx.HTTPError):
            if done.is_set():
                return
            time.sleep(0.5)
            try:
                listing = raw.get(path)
            except (KubeError, httpx.HTTPError):
                continue
            for obj in listing.get("items") or []:
                seen(obj)
            version = str(listing["metadata"]["resourceVersion"])


def pods_gone(cfg: StackConfig, prefix: str, timeout: float = 120.0) -> bool:
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            items = raw.get(f"/api/v1/namespaces/{NAMESPACE}/pods").get("items") or []
            if not any(str(p["metadata"]["name"]).startswith(prefix) for p in items):
                return True
            time.sleep(0.5)
        return False
    finally:
        raw.close()


def tandem_checks(cfg: StackConfig, bound: dict[str, JSON], jobs: dict[int, Job], since: float) -> list[str]:
    """Each Tandem Pod bound by one request, on a node of its own Slurm job."""
    raw = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    try:
        hosts = checks.kube_node_of(raw, config.SLURM_NAMESPACE)
    finally:
        raw.close()
    user = f"system:serviceaccount:{identities.MAIN.namespace}:{identities.MAIN.service_account('scheduler')}"
    counted = audit.bindings(cfg, NAMESPACE, user, since, time.time())
    return checks.placements(checks.Snapshot(tuple(bound.values()), jobs, hosts)) + checks.bindings(
        bound, counted
    )


def describe(run: ArmRun) -> dict[str, Any]:
    """A run's figures as its record keeps them (bench/curve.py summarises them)."""
    from bench.stats import percentiles

    latencies = run.latencies()
    arrivals = len(run.sent) or 1
    return {
        "arm": run.arm,
        "rate": round(run.rate, 3),
        "arrivals": len(run.sent),
        "measured": len(run.measured()),
        "latency": percentiles(latencies).as_json() if latencies else None,
        "slip_max": round(max(run.slips(), default=0.0), 4),
        "window_s": round(run.window, 2),
        "cpu_ms_per_arrival": {g: round(v / arrivals * 1000, 3) for g, v in sorted(run.cpu.items())},
        "api_per_arrival": {u: round(n / arrivals, 3) for u, n in sorted(run.api.items())},
        "problems": run.problems,
    }
