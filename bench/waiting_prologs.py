"""Waiting prologs: what hundreds of prologs waiting for their Nodes at once cost the syncer and the
hooks gateway (issue 40). No lab stack: everything runs on this machine, on 127.0.0.1.

Two server processes, with mutual TLS (certificates made in a temporary directory), as the chart
runs them:
- the syncer's gRPC service (tandem.syncer.main.grpc_service) over its real servicer, node locks,
  hold store and waiters. Kubernetes and Slurm are stand-ins (caches filled by hand, an API server
  that vouches for every node credential at once), and no node sync runs: every lock waits until
  the benchmark says "release"; then each node shows locked (its hold's pass settled, its Node
  tainted, its slurmd Pod annotated), each change waking its calls as the informers would, and a
  hold recorded later is settled by the next pass at once;
- the hooks gateway (tandem.hooks.gateway.HooksGateway) in front of it.

Then N lock calls at once, one Slurm node each with its own credential, as N prologs make them:
through the gateway (HTTP, a 503 asked again a second later as the scripts do) or straight to the
syncer (gRPC). Once every call that can is waiting, each server process's threads, RSS and CPU
seconds are read over --hold seconds; then every node is released, and the time until every call
is answered is taken.

    .venv/bin/python bench/waiting_prologs.py [--calls 500] [--hold 5] [--via both|gateway|grpc]

Prints a table, then one JSON line last: per scenario, the calls waiting at the syncer, each
process's threads and RSS (MiB) before any call ("idle") and while they wait, with its CPU seconds
per second then, and release_s.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from devstack import pki
from devstack.procs import cpu_seconds
from devstack.table import format_table
from tandem import keys, mtls, serving
from tandem.kube import JSON
from tandem.slurm.models import Job, Node

SLURMD_NS = "slurm"
JOB_BASE = 100_000


def slurm_node(i: int) -> str:
    return f"bn-{i:04d}"


def node_token(pod: str) -> str:
    """A token of the form kubelet projects into slurmd Pod `pod` (unsigned: the stand-in API
    server's review vouches for it, as the real one does for a signed one)."""

    def segment(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    claims = {
        "aud": [keys.HOOKS_TOKEN_AUDIENCE],
        "exp": int(time.time() + 3600),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": f"system:serviceaccount:{SLURMD_NS}:default",
        "kubernetes.io": {"namespace": SLURMD_NS, "pod": {"name": pod, "uid": f"uid-{pod}"}},
    }
    return f"{segment({'alg': 'RS256', 'kid': 'bench'})}.{segment(claims)}.c2lnbmF0dXJl"


def review(token: str) -> JSON:
    """The API server's TokenReview answer for a token node_token made."""
    from tandem.nodetoken import unverified_claims

    pod = (unverified_claims(token) or {})["kubernetes.io"]["pod"]
    return {
        "status": {
            "authenticated": True,
            "audiences": [keys.HOOKS_TOKEN_AUDIENCE],
            "user": {
                "username": f"system:serviceaccount:{SLURMD_NS}:default",
                "extra": {
                    "authentication.kubernetes.io/pod-name": [pod["name"]],
                    "authentication.kubernetes.io/pod-uid": [pod["uid"]],
                },
            },
        }
    }


class StubSlurm:
    """slurmrestd knowing no job (a prolog's job is looked up once: not a placeholder)."""

    def get_job_components(self, job_id: int) -> list[Job]:
        return []

    def list_jobs(self, changed_since: int | None = None) -> list[Job] | None:
        return []

    def all_job_states(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        return {}

    def list_nodes(self, changed_since: int | None = None) -> list[Node] | None:
        return []

    def drain_node(self, node: str, reason: str) -> None:
        pass

    def update_job(self, job_id: int, **fields: str) -> None:
        pass


def _tls(d: Path, identity: str) -> mtls.TlsFiles:
    return mtls.TlsFiles(str(d / "ca.crt"), str(d / f"{identity}.crt"), str(d / f"{identity}.key"))


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


# -- the syncer process -------------------------------------------------------------------------


def serve_syncer(calls: int, tls_dir: Path) -> None:
    """The syncer's lock service over `calls` Slurm nodes; commands on stdin: holds, release."""
    from tandem.nodetoken import TokenReviewer
    from tandem.syncer import main as syncer_main
    from tandem.syncer.cluster import ClusterView, slim_node, slim_pod
    from tandem.syncer.holds import HoldStore
    from tandem.syncer.lockcalls import NodeLocks
    from tandem.syncer.mirror import SlurmMirror
    from tandem.syncer.nodefacts import CacheFacts
    from tandem.syncer.service import SyncerServicer
    from tandem.syncer.writes import LockWrites
    from tandem.workqueue import WorkQueue

    kube: Any = object()  # never called: no node sync runs, no informer lists
    cluster = ClusterView(kube, SLURMD_NS)

    def put(informer: Any, key: str, obj: JSON) -> None:
        with informer._lock:
            old = informer._put(key, obj)
        informer.on_change(key, old, informer.get(key))

    def slurmd_pod(i: int, lock: str) -> JSON:
        name = slurm_node(i)
        meta = {
            "name": name,
            "namespace": SLURMD_NS,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
            "annotations": {keys.LOCK_KEY: lock},
        }
        return slim_pod(
            {"metadata": meta, "spec": {"nodeName": f"kn-{i:04d}"}, "status": {"phase": "Running"}}
        )

    def kube_node(i: int, tainted: bool) -> JSON:
        taints = [{"key": keys.LOCK_KEY, "effect": "NoExecute"}] if tainted else []
        return slim_node(
            {"metadata": {"name": f"kn-{i:04d}", "resourceVersion": "1"}, "spec": {"taints": taints}}
        )

    for i in range(calls):
        put(cluster.nodes, f"kn-{i:04d}", kube_node(i, tainted=False))
        put(cluster.pods, f"{SLURMD_NS}/{slurm_node(i)}", slurmd_pod(i, "false"))
    holds = HoldStore()
    holds.on_change = cluster.wake
    slurm = StubSlurm()
    mirror = SlurmMirror(slurm, poll_interval=3600)
    writes = LockWrites(kube, SLURMD_NS, cluster.node)
    facts = CacheFacts(cluster, mirror.state, "slurm", holds, writes, "tandem")
    queue = WorkQueue()
    locks = NodeLocks(holds, queue, cluster, facts, mirror)
    released = threading.Event()

    def node_sync() -> None:
        """A pass for each hold, as the node sync's: it settles nothing until the release, and
        after it, a hold a call records late (a prolog turned away and asking again) at once."""
        while (key := queue.get()) is not None:
            try:
                if released.is_set():
                    holds.passed(key, holds.memory(key).seq)
            finally:
                queue.done(key)

    threading.Thread(target=node_sync, name="node-sync", daemon=True).start()
    servicer = SyncerServicer(mirror, locks, slurm, cluster, 30.0, node_tokens=TokenReviewer(review))
    server = syncer_main.grpc_service("127.0.0.1:0", _tls(tls_dir, mtls.SYNCER), servicer)
    server.start()
    syncer_main.serve_as_leader(servicer, server)(True)
    _say(port=server.port, pid=os.getpid())
    for line in sys.stdin:
        command = line.strip()
        if command == "holds":
            _say(holds=sum(len(holds.holds_of(slurm_node(i))) for i in range(calls)))
        elif command == "release":
            released.set()
            for i in range(calls):
                # What the node sync's pass writes and reads back: settled, tainted, annotated.
                holds.passed(slurm_node(i), holds.memory(slurm_node(i)).seq)
                put(cluster.nodes, f"kn-{i:04d}", kube_node(i, tainted=True))
                put(cluster.pods, f"{SLURMD_NS}/{slurm_node(i)}", slurmd_pod(i, "locked"))
            _say(released=calls)
    server.stop(0)
    queue.shutdown()


# -- the gateway process ------------------------------------------------------------------------


def serve_gateway(syncer_port: int, tls_dir: Path) -> None:
    """The hooks gateway with its default limits, in front of the syncer; stops at stdin's end."""
    from tandem.hooks.gateway import HooksGateway
    from tandem.v1 import syncer_pb2_grpc

    channel = serving.channel(f"127.0.0.1:{syncer_port}", _tls(tls_dir, mtls.HOOKS))
    gateway = HooksGateway("127.0.0.1:0", syncer_pb2_grpc.SyncerServiceStub(channel), 55.0)
    gateway.start()
    _say(port=gateway.port, pid=os.getpid())
    sys.stdin.read()
    gateway.stop()
    channel.close()


# -- the driver ---------------------------------------------------------------------------------


class Server:
    """A server subprocess: its pid and port, commands on its stdin, answers on its stdout."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.waiting_prologs", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = self.read()
        self.port, self.pid = int(hello["port"]), int(hello["pid"])

    def read(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"server {self.proc.args!r} ended: {self.proc.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def sample(self) -> dict[str, float]:
        status = dict(
            line.split(":", 1)
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
            if ":" in line
        )
        return {
            "threads": int(status["Threads"]),
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
            "cpu_s": cpu_seconds(self.pid),
        }

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def _prolog(port: int, i: int, answers: dict[int, int], refused: list[int], stop: float) -> None:
    """One prolog's lock call over HTTP/1.1; a 503 is asked again a second later."""
    node = slurm_node(i)
    body = json.dumps({"node": node, "job": JOB_BASE + i, "timeout": 55}).encode()
    head = (
        f"POST /v1/lock HTTP/1.1\r\nHost: hooks\r\nAuthorization: Bearer {node_token(node)}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    while time.monotonic() < stop:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + body)
        await writer.drain()
        reply = await reader.read()
        writer.close()
        status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0
        if status != 503:
            answers[i] = status
            return
        refused.append(i)
        await asyncio.sleep(1.0)


def _grpc_calls(port: int, tls_dir: Path, calls: int) -> tuple[Any, list[Any]]:
    """`calls` lock calls straight to the syncer, all in flight at once (no thread each)."""
    from tandem.v1 import syncer_pb2, syncer_pb2_grpc

    channel = serving.channel(f"127.0.0.1:{port}", _tls(tls_dir, mtls.HOOKS))
    stub = syncer_pb2_grpc.SyncerServiceStub(channel)
    futures = [
        stub.AcquireNodeLock.future(
            syncer_pb2.AcquireNodeLockRequest(
                slurm_node=slurm_node(i), job_id=JOB_BASE + i, node_token=node_token(slurm_node(i))
            ),
            timeout=55,
        )
        for i in range(calls)
    ]
    return channel, futures


@contextlib.contextmanager
def _servers(calls: int, tls_dir: Path, gateway: bool) -> Iterator[tuple[Server, Server | None]]:
    syncer = Server("--serve", "syncer", "--calls", str(calls), "--tls", str(tls_dir))
    front = (
        Server("--serve", "gateway", "--syncer-port", str(syncer.port), "--tls", str(tls_dir))
        if gateway
        else None
    )
    try:
        yield syncer, front
    finally:
        if front is not None:
            front.stop()
        syncer.stop()


def _until_waiting(syncer: Server, calls: int, settle: float) -> int:
    """Until every call holds its node at the syncer, or `settle` seconds (a gateway that turns
    calls away lets fewer through); how many do."""
    deadline = time.monotonic() + settle
    held, steady_since = 0, time.monotonic()
    while time.monotonic() < deadline:
        now = int(syncer.ask("holds")["holds"])
        if now >= calls:
            return now
        if now != held:
            held, steady_since = now, time.monotonic()
        elif now and time.monotonic() - steady_since > 3.0:
            return now
        time.sleep(0.2)
    return held


def _idle(procs: dict[str, Server]) -> dict[str, dict[str, float]]:
    """Each process before any call: its threads and RSS."""
    samples = {name: p.sample() for name, p in procs.items()}
    return {name: {"threads": s["threads"], "rss_mib": round(s["rss_mib"], 1)} for name, s in samples.items()}


def _measure(procs: dict[str, Server], hold: float) -> dict[str, dict[str, float]]:
    """Each process over `hold` seconds: most threads and RSS seen, CPU seconds per second."""
    first = {name: p.sample() for name, p in procs.items()}
    peak = {name: dict(s) for name, s in first.items()}
    began = time.monotonic()
    while time.monotonic() - began < hold:
        time.sleep(0.25)
        for name, p in procs.items():
            s = p.sample()
            peak[name]["threads"] = max(peak[name]["threads"], s["threads"])
            peak[name]["rss_mib"] = max(peak[name]["rss_mib"], s["rss_mib"])
            peak[name]["cpu_s"] = s["cpu_s"]
    took = time.monotonic() - began
    return {
        name: {
            "threads": peak[name]["threads"],
            "rss_mib": round(peak[name]["rss_mib"], 1),
            "cpu_s_per_s": round((peak[name]["cpu_s"] - first[name]["cpu_s"]) / took, 3),
        }
        for name in procs
    }


def via_gateway(calls: int, hold: float, tls_dir: Path) -> dict[str, Any]:
    with _servers(calls, tls_dir, gateway=True) as (syncer, front):
        assert front is not None
        idle = _idle({"syncer": syncer, "gateway": front})
        answers: dict[int, int] = {}
        refused: list[int] = []
        stop = time.monotonic() + 120

        async def prologs() -> None:
            await asyncio.gather(*(_prolog(front.port, i, answers, refused, stop) for i in range(calls)))

        runner = threading.Thread(target=asyncio.run, args=(prologs(),), daemon=True)
        runner.start()
        waiting = _until_waiting(syncer, calls, settle=30)
        busy_before = len(refused)
        measured = _measure({"syncer": syncer, "gateway": front}, hold)
        began = time.monotonic()
        syncer.ask("release")
        runner.join(timeout=120)
        release_s = time.monotonic() - began
        statuses = sorted(set(answers.values()))
        return {
            "idle": idle,
            "waiting": waiting,
            "refused_503": len(refused),
            "refused_503_while_held": len(refused) - busy_before,
            **measured,
            "release_s": round(release_s, 3),
            "answered": len(answers),
            "statuses": statuses,
        }


def via_grpc(calls: int, hold: float, tls_dir: Path) -> dict[str, Any]:
    with _servers(calls, tls_dir, gateway=False) as (syncer, _):
        idle = _idle({"syncer": syncer})
        channel, futures = _grpc_calls(syncer.port, tls_dir, calls)
        try:
            waiting = _until_waiting(syncer, calls, settle=30)
            measured = _measure({"syncer": syncer}, hold)
            began = time.monotonic()
            syncer.ask("release")
            ok = sum(1 for f in futures if f.exception(timeout=60) is None)
            release_s = time.monotonic() - began
        finally:
            channel.close()
        return {
            "idle": idle,
            "waiting": waiting,
            **measured,
            "release_s": round(release_s, 3),
            "answered": ok,
        }


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        [
            "scenario",
            "process",
            "waiting",
            "threads idle/waiting",
            "rss MiB idle/waiting",
            "cpu s/s",
            "release s",
            "answered",
            "503s",
        ]
    ]
    for scenario, r in results.items():
        for process in ("syncer", "gateway"):
            if process in r:
                m, idle = r[process], r["idle"][process]
                rows.append(
                    [
                        scenario,
                        process,
                        str(r["waiting"]),
                        f"{int(idle['threads'])}/{int(m['threads'])}",
                        f"{idle['rss_mib']:.1f}/{m['rss_mib']:.1f}",
                        f"{m['cpu_s_per_s']:.3f}",
                        f"{r['release_s']:.2f}",
                        str(r["answered"]),
                        str(r.get("refused_503", "-")),
                    ]
                )
    return format_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--hold", type=float, default=5.0, help="seconds measured while the calls wait")
    parser.add_argument("--via", choices=["both", "gateway", "grpc"], default="both")
    parser.add_argument("--serve", choices=["syncer", "gateway"], help=argparse.SUPPRESS)
    parser.add_argument("--tls", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--syncer-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "syncer":
        serve_syncer(args.calls, args.tls)
        return
    if args.serve == "gateway":
        serve_gateway(args.syncer_port, args.tls)
        return
    with tempfile.TemporaryDirectory() as root:
        pki.ensure_grpc_pki(Path(root))
        tls_dir = pki.grpc_dir(Path(root))
        results: dict[str, dict[str, Any]] = {}
        if args.via in ("both", "grpc"):
            results["grpc to the syncer"] = via_grpc(args.calls, args.hold, tls_dir)
        if args.via in ("both", "gateway"):
            results["http via the gateway"] = via_gateway(args.calls, args.hold, tls_dir)
    print(table(results))
    print(json.dumps({"calls": args.calls, "hold_s": args.hold, **results}))


if __name__ == "__main__":
    main()
