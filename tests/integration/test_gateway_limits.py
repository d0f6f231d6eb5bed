"""Issue 18 on the lab's own hooks gateway: it keeps answering prologs while 200 slow
unauthenticated connections are open (before: a thread each, no timeout, the body read before the
token), and it closes them itself."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from kubernetes import client as k8s

from devstack import kube, nodetokens
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

SLOW_CONNECTIONS = 200
# Valid as a name, known to neither Slurm nor Kubernetes: the call goes gateway -> syncer ->
# slurmrestd and the slurmd Pods and is refused there, and no real node is locked.
NO_SUCH_NODE = "tandem-no-such-node-999"
NO_SUCH_JOB = 4_000_000_000


def _auth(cfg: StackConfig) -> dict[str, str]:
    """A real node's own credential (its call for another node is refused by the syncer)."""
    return {"Authorization": f"Bearer {nodetokens.read(cfg, cfg.slurm_node_names()[0])}"}


def _lock(cfg: StackConfig, timeout: float = 10) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = httpx.post(
        f"{cfg.hooks_url}/v1/lock",
        json={"node": NO_SUCH_NODE, "job": NO_SUCH_JOB, "timeout": 10},
        headers=_auth(cfg),
        timeout=timeout,
    )
    return r, time.monotonic() - started


@pytest.fixture
def slow_clients(stack_cfg: StackConfig) -> Iterator[list[socket.socket]]:
    """Connections without a token: some silent, some with half a head, some with a head whose
    body never comes (Content-Length promised, nothing sent)."""
    host, port = stack_cfg.hooks_url.removeprefix("http://").rsplit(":", 1)
    starts = [
        b"",
        b"POST /v1/lock HTTP/1.1\r\nHost: x\r\nContent-Le",
        b"POST /v1/lock HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{",
    ]
    opened: list[socket.socket] = []
    try:
        for i in range(SLOW_CONNECTIONS):
            s = socket.create_connection((host, int(port)), timeout=5)
            opened.append(s)
            if starts[i % 3]:
                s.sendall(starts[i % 3])
        yield opened
    finally:
        for s in opened:
            s.close()


def test_a_prolog_call_is_answered_while_200_slow_connections_are_open(
    stack_cfg: StackConfig, slow_clients: list[socket.socket]
) -> None:
    # The 401 for the promised body comes from the head alone: those connections are answered.
    for s in slow_clients[2::3][:5]:
        s.settimeout(2)
        assert s.recv(64).split(b" ", 2)[1] == b"401"
    for s in slow_clients[:60]:  # trickling: bytes keep coming, but never a whole request
        s.send(b"X")
    r, took = _lock(stack_cfg)
    assert r.status_code == 403, r.text  # refused by the syncer: not the credential's node
    assert r.json()["error"]
    assert took < 2, f"the lock call took {took:.2f}s with {SLOW_CONNECTIONS} slow connections open"
    assert httpx.get(f"{stack_cfg.hooks_url}/healthz", timeout=2).status_code == 200
    bad = httpx.post(
        f"{stack_cfg.hooks_url}/v1/lock",
        json={"node": "../job/5", "job": NO_SUCH_JOB},
        headers=_auth(stack_cfg),
        timeout=2,
    )
    assert bad.status_code == 400 and "node name" in bad.json()["error"]


def test_the_gateway_closes_slow_connections_itself(
    stack_cfg: StackConfig, slow_clients: list[socket.socket]
) -> None:
    """Within its request timeout (10 s): a slow client cannot keep a connection for ever."""
    deadline = time.monotonic() + 15
    for s in slow_clients:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        reply = b""
        try:
            while chunk := s.recv(4096):
                reply += chunk
        except ConnectionResetError:
            pass  # closed with bytes of ours unread: closed all the same
        except TimeoutError:
            pytest.fail("a slow connection is still open 15 s after it was made")
        assert reply == b"" or reply.split(b" ", 2)[1] in (b"401", b"408"), reply[:80]


def _token_reviews(cfg: StackConfig) -> float:
    """The TokenReviews the syncer has asked of the API server (its own counter)."""
    text = httpx.get(f"http://127.0.0.1:{cfg.ports.syncer_health}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tandem_kube_requests_total{") and 'resource="tokenreviews"' in line
    )


def _forged(i: int, real: str) -> str:
    """A node credential of the right form that Kubernetes never signed: its claims made up (a
    fresh expiry, the hooks audience, another node's Pod), under a real key id or a made-up one."""
    head, _, _ = real.split(".")
    claims = {
        "aud": ["tandem-hooks"],
        "exp": int(time.time()) + 3600,
        "kubernetes.io": {"namespace": "tandem-slurm", "pod": {"name": f"cpu-00{i % 8}", "uid": f"u{i}"}},
    }
    if i % 2:
        head = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "kid": f"made-up-{i}"}).encode()).decode()
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{head.rstrip('=')}.{body}.{base64.urlsafe_b64encode(b'x' * 256).decode().rstrip('=')}"


def test_a_forged_credential_flood_costs_no_token_review_and_a_real_prolog_is_served(
    stack_cfg: StackConfig,
) -> None:
    """Issue 50: every unsigned JWT with the hooks audience cost the syncer a TokenReview. The
    gateway now checks the signature against the API server's published keys: 300 forged calls,
    none reaches the syncer, and a real job's prolog on another node locks its node meanwhile."""
    real = nodetokens.read(stack_cfg, stack_cfg.slurm_node_names()[0])
    before = _token_reviews(stack_cfg)
    codes: list[int] = []

    def flood(start: int) -> None:
        with httpx.Client(timeout=10) as client:
            for i in range(start, start + 100):
                r = client.post(
                    f"{stack_cfg.hooks_url}/v1/unlock",
                    json={"node": "cpu-001", "job": NO_SUCH_JOB},
                    headers={"Authorization": f"Bearer {_forged(i, real)}"},
                )
                codes.append(r.status_code)

    floods = [threading.Thread(target=flood, args=(k * 100,)) for k in range(3)]
    for t in floods:
        t.start()
    job = h.sbatch(stack_cfg, "--nodelist=cpu-005", script="#!/bin/sh\nsleep 5\n")
    try:
        h.wait_until(
            "the real prolog through",
            lambda: (
                (j := h.rest_job(stack_cfg, job))["job_state"] == "RUNNING" and j["state_reason"] != "Prolog"
            ),
            30,
        )
    finally:
        for t in floods:
            t.join()
        h.scancel(stack_cfg, job)
    assert len(codes) == 300 and set(codes) <= {401, 503}, sorted(set(codes))
    assert codes.count(401) >= 150  # the made-up key ids may be told to ask again while the keys are read
    # At most the real node's own credential, reviewed once for its prolog (then remembered).
    assert _token_reviews(stack_cfg) - before <= 1
    state, reason = h.node_state(stack_cfg, "cpu-005")
    assert "drain" not in state.lower(), (state, reason)


def test_the_syncers_and_schedulers_probes_are_answered_while_a_pod_holds_their_health_ports(
    stack_cfg: StackConfig,
) -> None:
    """Issue 50: their health ports used the stdlib's thread-per-connection server with no
    timeout; connections that send nothing held a thread each until the liveness probe failed."""
    for port in (stack_cfg.ports.syncer_health, stack_cfg.ports.scheduler_health):
        silent = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(300)]
        try:
            started = time.monotonic()
            r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=3)
            assert r.status_code == 200 and time.monotonic() - started < 1.5
            assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=3).status_code == 200
        finally:
            for s in silent:
                s.close()


def test_a_lock_may_not_ask_to_hold_its_slot_longer_than_the_lock_budget(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Issue 50: a lock's `timeout` could be 600 s whatever the prologs wait, so one credential held
    its gateway slots ten times longer than a prolog. Now it is refused before the syncer sees it:
    nothing is locked. (How many slots one credential gets: tests/unit/hooks/test_gateway_limits.py.)"""
    node = "cpu-003"
    too_long = httpx.post(
        f"{stack_cfg.hooks_url}/v1/lock",
        json={"node": node, "job": NO_SUCH_JOB, "timeout": 600},
        headers={"Authorization": f"Bearer {nodetokens.read(stack_cfg, node)}"},
        timeout=5,
    )
    assert too_long.status_code == 400 and "at most 55" in too_long.json()["error"], too_long.text
    assert h.lock_annotation(core, node) == "false"
    assert not h.node_has_lock_taint(core, h.kube_node_of(node))


def test_one_node_credential_holds_only_its_share_and_another_nodes_prolog_is_served(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Issue 50: one node's credential could hold every gateway slot, so every other node's
    prolog failed. Its lock calls wait here (a placeholder's job makes the lock strict, and a
    tenant Pod is slow to leave the Node): 8 are taken, the rest answered 503 at once, and a
    real job's prolog on another node locks its node meanwhile."""
    tandem = h.unique("placeholder")
    h.create(core, h.tandem_pod(stack_cfg, tandem, {h.PREFIX + "required-nodes": "cpu-001"}))
    h.wait_until(
        "the placeholder's Pod bound", lambda: (p := h.get_pod(core, tandem)) and p.spec.node_name, 40
    )
    placeholder_job = h.job_id_of(core, tandem)
    assert placeholder_job is not None
    node = "cpu-003"
    slow = h.unique("slow")
    h.create(
        core,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": slow, "namespace": "default", "annotations": kube.delete_delay(20)},
            "spec": {"nodeName": h.kube_node_of(node), "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    h.wait_until(
        "the slow Pod running",
        lambda: (p := h.get_pod(core, slow)) is not None and p.status.phase == "Running",
        15,
    )
    auth = {"Authorization": f"Bearer {nodetokens.read(stack_cfg, node)}"}
    answers: list[tuple[int, float]] = []

    def lock() -> None:
        started = time.monotonic()
        r = httpx.post(
            f"{stack_cfg.hooks_url}/v1/lock",
            json={"node": node, "job": placeholder_job, "timeout": 8},
            headers=auth,
            timeout=20,
        )
        answers.append((r.status_code, time.monotonic() - started))

    calls = [threading.Thread(target=lock) for _ in range(20)]
    job = 0
    try:
        for t in calls:
            t.start()
        job = h.sbatch(stack_cfg, "--nodelist=cpu-005", script="#!/bin/sh\nsleep 5\n")
        h.wait_until(
            "the other node's prolog through",
            lambda: (
                (j := h.rest_job(stack_cfg, job))["job_state"] == "RUNNING" and j["state_reason"] != "Prolog"
            ),
            30,
        )
        for t in calls:
            t.join()
    finally:
        h.delete_pod(core, tandem)
        if job:
            h.scancel(stack_cfg, job)
        h.wait_until("the slow Pod gone", lambda: h.get_pod(core, slow) is None, 40)
        h.resume_if_drained(stack_cfg, node)
        h.wait_until("the node unlocked", lambda: h.lock_annotation(core, node) == "false", 90)
    busy = [took for code, took in answers if code == 503 and took < 3]
    waited = [(code, took) for code, took in answers if took >= 3]
    assert len(answers) == 20 and len(busy) >= 12, sorted(answers)
    assert 0 < len(waited) <= 8, sorted(answers)
    state, reason = h.node_state(stack_cfg, "cpu-005")
    assert "drain" not in state.lower(), (state, reason)
