"""The elastic rows of bench/gang.py (issue 53): how soon an elastic gang's extra member starts once
Slurm has room for it, and how soon Slurm takes one back, each beside the same thing done to a
bare Slurm job, in the same run.

  room      - the cluster full but for the core's two nodes: a blocker holds every other node, and
              the one-node job waits behind it (bare: an sbatch'd job; Tandem: the gang's extra,
              its core running). From the blocker's cancel to the script running (bare) or the
              extra bound (Tandem).
  take back - a one-node job on a node (bare: an sbatch'd job; Tandem: the gang's extra), and a
              `--partition=high --exclusive` job asking for that node: from its submit to its
              script running (Slurm preempts the one below it; for Tandem, the extra's Pod goes
              first, then its placeholder).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.schedule import slurm_client, wait_for_no_jobs
from devstack import config
from devstack import kube as devkube
from devstack.config import StackConfig
from tandem.kube import KubeClient, KubeError
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmApiError, SlurmRestClient

PREFIX = "bench-elastic-"


@contextmanager
def _marks(cfg: StackConfig) -> Iterator[Path]:
    """A directory each bare job's script writes its start time into (slurmd runs it as root)."""
    marks = Path(tempfile.mkdtemp(prefix="tandem-elastic-", dir=cfg.state_dir))
    marks.chmod(0o777)
    try:
        yield marks
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def _job(name: str, marks: Path, **fields: Any) -> JobSpec:
    script = f"#!/bin/bash\ndate +%s.%N > {marks}/{name}\nsleep 3600 &\nwait\n"
    return JobSpec(
        name=PREFIX + name,
        script=script,
        environment={"PATH": "/usr/bin:/bin"},
        cpus=1,
        memory_mb=100,
        **fields,
    )


def _started(marks: Path, name: str, timeout: float = 120.0) -> float:
    mark = marks / name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if mark.exists() and (text := mark.read_text().strip()):
            return float(text)
        time.sleep(0.01)
    raise SystemExit(f"{name}'s script did not start within {timeout:.0f} s")


def _nodes(cfg: StackConfig) -> list[str]:
    return [config.slurm_node_name(i) for i in range(cfg.nodes)]


def _end_all(slurm: SlurmRestClient, ids: list[int]) -> None:
    for job_id in ids:
        with contextlib.suppress(SlurmApiError):  # over already
            slurm.cancel_job(job_id, signal="KILL")
    wait_for_no_jobs(slurm, PREFIX)


def bare_room(cfg: StackConfig) -> float:
    """Seconds from cancelling the blocker to the waiting one-node job's script running."""
    nodes = _nodes(cfg)
    slurm = slurm_client(cfg)
    ids: list[int] = []
    try:
        with _marks(cfg) as marks:
            ids.append(slurm.submit_job(_job("core", marks, nodes=2, required_nodes=",".join(nodes[:2]))))
            blocker = _job(
                "blocker", marks, nodes=len(nodes) - 2, exclusive="none", excluded_nodes=",".join(nodes[:2])
            )
            ids.append(slurm.submit_job(blocker))
            _started(marks, "core")
            _started(marks, "blocker")
            # Off the core's nodes, as an extra's job is: else it starts beside the core at once.
            ids.append(slurm.submit_job(_job("waiting", marks, excluded_nodes=",".join(nodes[:2]))))
            time.sleep(1.0)  # Slurm has looked at it: it pends for Resources
            t = time.time()
            slurm.cancel_job(ids[1], signal="KILL")
            return _started(marks, "waiting") - t
    finally:
        _end_all(slurm, ids)
        slurm.close()


def bare_take_back(cfg: StackConfig) -> float:
    """Seconds from submitting a high-tier whole-node job for the node a low one runs on to its
    script running."""
    node = _nodes(cfg)[-1]
    slurm = slurm_client(cfg)
    ids: list[int] = []
    try:
        with _marks(cfg) as marks:
            ids.append(slurm.submit_job(_job("low", marks, required_nodes=node)))
            _started(marks, "low")
            t = time.time()
            ids.append(
                slurm.submit_job(_job("high", marks, required_nodes=node, partition="high", exclusive="none"))
            )
            return _started(marks, "high") - t
    finally:
        _end_all(slurm, ids)
        slurm.close()


class ElasticGang:
    """A PodGroup of minCount 2 and three members (a core of two, one extra) in `namespace`, and a
    watch of when each member is bound or gone."""

    def __init__(self, cfg: StackConfig, raw: KubeClient, namespace: str, name: str, member: Any) -> None:
        self.cfg, self.raw, self.name = cfg, raw, name
        self.pods = f"/api/v1/namespaces/{namespace}/pods"
        self.groups = f"/apis/{'/'.join(devkube.podgroup_api(cfg))}/namespaces/{namespace}/podgroups"
        self.bound: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.member = member
        self._stop = threading.Event()

    def start(self) -> None:
        version = self.raw.get(self.pods)["metadata"]["resourceVersion"]
        threading.Thread(target=self._watch, args=(version,), daemon=True).start()
        self.raw.post(
            self.groups,
            {
                "apiVersion": "/".join(devkube.podgroup_api(self.cfg)),
                "kind": "PodGroup",
                "metadata": {"name": self.name},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            },
        )
        for i in range(3):
            self.raw.post(self.pods, self.member(self.cfg, f"{self.name}-{i}", self.name))

    def _watch(self, version: str) -> None:
        for event in self.raw.watch(self.pods, {"resourceVersion": version}, 300):
            if self._stop.is_set():
                return
            obj = event.get("object") or {}
            name = str((obj.get("metadata") or {}).get("name") or "")
            if not name.startswith(f"{self.name}-"):
                continue
            if (obj.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, time.time())
            if event.get("type") == "DELETED":
                self.gone.setdefault(name, time.time())

    def wait(self, what: str, check: Any, timeout: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := check():
                return found
            time.sleep(0.02)
        raise SystemExit(f"{self.name}: {what} not within {timeout:.0f} s")

    def extra_node(self) -> str:
        pod = self.raw.get(f"{self.pods}/{self.name}-2")
        return str(pod["spec"]["nodeName"])

    def end(self) -> None:
        self._stop.set()
        for i in range(3):
            with contextlib.suppress(KubeError):  # gone already (Slurm took it back)
                self.raw.delete(f"{self.pods}/{self.name}-{i}", {"gracePeriodSeconds": 0})
        self.raw.delete(f"{self.groups}/{self.name}")


def tandem_room(cfg: StackConfig, raw: KubeClient, namespace: str, run: int, member: Any) -> float:
    """Seconds from cancelling the blocker to the waiting extra member bound."""
    nodes = _nodes(cfg)
    slurm = slurm_client(cfg)
    gang = ElasticGang(cfg, raw, namespace, f"elastic-room-{run}", member)
    ids: list[int] = []
    try:
        with _marks(cfg) as marks:
            blocker = _job(
                "blocker", marks, nodes=len(nodes) - 2, exclusive="none", excluded_nodes=",".join(nodes[:2])
            )
            ids.append(slurm.submit_job(blocker))
            _started(marks, "blocker")
            gang.start()
            gang.wait("the core bound", lambda: len(gang.bound) >= 2)
            time.sleep(2.0)  # the extra's job submitted and pending for Resources
            assert f"{gang.name}-2" not in gang.bound
            t = time.time()
            slurm.cancel_job(ids[0], signal="KILL")
            return float(gang.wait("the extra bound", lambda: gang.bound.get(f"{gang.name}-2"))) - t
    finally:
        gang.end()
        _end_all(slurm, ids)
        wait_for_no_jobs(slurm, "tandem:")
        slurm.close()


def tandem_take_back(
    cfg: StackConfig, raw: KubeClient, namespace: str, run: int, member: Any
) -> tuple[float, float]:
    """Seconds from submitting a high-tier whole-node job for the extra's node to the extra's Pod
    gone, and to the high job's script running."""
    slurm = slurm_client(cfg)
    gang = ElasticGang(cfg, raw, namespace, f"elastic-back-{run}", member)
    ids: list[int] = []
    try:
        with _marks(cfg) as marks:
            gang.start()
            gang.wait("all three bound", lambda: len(gang.bound) == 3)
            node = config.slurm_node_name(int(gang.extra_node().split("-")[1]))
            t = time.time()
            ids.append(
                slurm.submit_job(_job("high", marks, required_nodes=node, partition="high", exclusive="none"))
            )
            started = _started(marks, "high")
            gone = float(gang.wait("the extra gone", lambda: gang.gone.get(f"{gang.name}-2"), 30))
            if len(gang.gone) > 1:
                raise SystemExit(f"{gang.name}: Slurm took back {sorted(gang.gone)}, not the extra alone")
            return gone - t, started - t
    finally:
        gang.end()
        _end_all(slurm, ids)
        wait_for_no_jobs(slurm, "tandem:")
        slurm.close()
