"""A Slurm user on the nodes cannot move a Pod, a lock or a node through the hooks API (issue 18),
and no credential speaks for more than it names (issue 39): a node's credential (its slurmd Pod's
token) is root's and speaks for that node only, and a placeholder's own credential speaks for its
own job and nodes only, as Slurm says. Each attack is made as an attacker would, and changes
nothing."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client as k8s

from devstack import config, nodetokens, services, slurm, slurm_root, stack
from devstack.config import StackConfig
from devstack.procs import Daemon
from tandem import jobtoken, placeholder
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

_, UID, GID = slurm.POD_USER


def _bound(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod | None:
    pod = h.get_pod(core, name)
    return pod if pod is not None and pod.spec.node_name and pod.status.phase == "Running" else None


def _running(stack_cfg: StackConfig, core: k8s.CoreV1Api, prefix: str) -> tuple[k8s.V1Pod, int, str]:
    name = h.unique(prefix)
    h.create(core, h.tandem_pod(stack_cfg, name))
    pod = h.wait_until(f"{name} running", lambda: _bound(core, name), 40)
    job_id = h.job_id_of(core, name)
    assert job_id is not None
    return pod, job_id, h.rest_job(stack_cfg, job_id)["nodes"]


def _reference(stack_cfg: StackConfig, pod: k8s.V1Pod) -> str:
    ref = placeholder.PodRef(pod.metadata.namespace, pod.metadata.name, pod.metadata.uid)
    return placeholder.job_name(ref, stack_cfg.scheduler_name)


@pytest.mark.parallel
def test_a_slurm_user_cannot_read_a_nodes_credential(stack_cfg: StackConfig) -> None:
    token_file = nodetokens.path(stack_cfg, stack_cfg.slurm_node_names()[0])
    assert token_file.read_text().strip()  # root reads it (the prolog)
    out = subprocess.run(
        slurm_root.chroot_argv(slurm.root(stack_cfg), ["/bin/cat", str(token_file)], (UID, GID)),
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode != 0 and "Permission denied" in out.stderr
    assert out.stdout == ""


def _uid(core: k8s.CoreV1Api, slurm_node: str) -> str:
    pod = h.get_pod(core, slurm_node, config.SLURM_NAMESPACE)
    assert pod is not None
    return str(pod.metadata.uid)


def _node_auth(stack_cfg: StackConfig, slurm_node: str) -> dict[str, str]:
    """What root on `slurm_node` holds: that node's own credential, as its prolog reads it."""
    return {"Authorization": f"Bearer {nodetokens.read(stack_cfg, slurm_node)}"}


def test_one_nodes_credential_cannot_lock_or_unlock_another_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Issue 39: root on node A holds A's credential. With it, unlocking node B under B's running
    job, locking B for a made-up job, or locking an idle node C is refused by the syncer (403),
    and nothing changes on B or C. A token of the right form that Kubernetes never signed, and A's
    Pod's token for the API server's audience, are refused too (401)."""
    victim, victim_job, victim_node = _running(stack_cfg, core, "held")
    others = [n for n in stack_cfg.slurm_node_names() if n != victim_node]
    attacker, idle = others[0], next(n for n in reversed(others) if h.lock_annotation(core, n) == "false")
    url = stack_cfg.hooks_url
    forged = nodetokens.read(stack_cfg, attacker).rsplit(".", 1)[0] + ".c2lnbmF0dXJl"
    # The token every Pod has for the API server itself (no audience named): not a node credential.
    api_token = core.create_namespaced_service_account_token(
        "default",
        config.SLURM_NAMESPACE,
        k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(
                audiences=[],
                bound_object_ref=k8s.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=attacker, uid=_uid(core, attacker)
                ),
            )
        ),
    ).status.token
    answers = {
        "unlock B under its job": httpx.post(
            f"{url}/v1/unlock",
            json={"node": victim_node, "job": victim_job},
            headers=_node_auth(stack_cfg, attacker),
            timeout=15,
        ),
        "lock B": httpx.post(
            f"{url}/v1/lock",
            json={"node": victim_node, "job": 4_000_000_001, "timeout": 5},
            headers=_node_auth(stack_cfg, attacker),
            timeout=15,
        ),
        "lock idle C": httpx.post(
            f"{url}/v1/lock",
            json={"node": idle, "job": 4_000_000_002, "timeout": 5},
            headers=_node_auth(stack_cfg, attacker),
            timeout=15,
        ),
        "unlock B, A's token re-signed by nobody": httpx.post(
            f"{url}/v1/unlock",
            json={"node": victim_node, "job": victim_job},
            headers={"Authorization": f"Bearer {forged}"},
            timeout=15,
        ),
        "unlock A, its Pod's API token": httpx.post(
            f"{url}/v1/unlock",
            json={"node": attacker, "job": victim_job},
            headers={"Authorization": f"Bearer {api_token}"},
            timeout=15,
        ),
    }
    codes = {what: r.status_code for what, r in answers.items()}
    assert codes == {
        "unlock B under its job": 403,
        "lock B": 403,
        "lock idle C": 403,
        "unlock B, A's token re-signed by nobody": 401,
        "unlock A, its Pod's API token": 401,
    }, {what: r.text for what, r in answers.items()}
    assert f"speaks for Slurm node {attacker}" in answers["lock idle C"].json()["error"]
    time.sleep(2)  # anything the calls had set off would show by now
    assert h.lock_annotation(core, victim_node) == "locked_strict"
    assert h.node_has_lock_taint(core, h.kube_node_of(victim_node))
    assert h.lock_annotation(core, idle) == "false"
    assert not h.node_has_lock_taint(core, h.kube_node_of(idle))
    still = _bound(core, victim.metadata.name)
    assert still is not None and still.metadata.uid == victim.metadata.uid
    for node in (victim_node, idle):
        state, reason = h.node_state(stack_cfg, node)
        assert "drain" not in state.lower(), (node, state, reason)


@pytest.mark.parallel
def test_a_slurm_user_cannot_end_another_pod_lock_or_drain_its_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    victim, victim_job, victim_node = _running(stack_cfg, core, "victim")
    mine, my_job, _ = _running(stack_cfg, core, "mine")
    # What the attacker holds: their own placeholder's credential (it is in their job's
    # environment), and whatever they make up.
    my_reference = _reference(stack_cfg, mine)
    own = _as(my_reference, _own_token(stack_cfg, my_job, my_reference))
    claimed = {"Authorization": "Bearer guessed", jobtoken.PLACEHOLDER_HEADER: _reference(stack_cfg, victim)}
    body = {"node": victim_node, "job": victim_job, "timeout": 3}
    url = stack_cfg.hooks_url
    answers = {
        "terminating, no credential": httpx.post(f"{url}/v1/terminating", json=body, timeout=10),
        "terminating, the victim's placeholder claimed": httpx.post(
            f"{url}/v1/terminating", json=body, headers=claimed, timeout=10
        ),
        "terminating, own credential": httpx.post(
            f"{url}/v1/terminating", json=body, headers=own, timeout=10
        ),
        "drain, own credential": httpx.post(f"{url}/v1/drain", json=body, headers=own, timeout=10),
        "started, own credential": httpx.post(f"{url}/v1/started", json=body, headers=own, timeout=10),
        "lock, own credential": httpx.post(f"{url}/v1/lock", json=body, headers=own, timeout=10),
        "unlock, own credential": httpx.post(f"{url}/v1/unlock", json=body, headers=own, timeout=10),
    }
    codes = {what: r.status_code for what, r in answers.items()}
    assert codes == {
        "terminating, no credential": 401,
        "terminating, the victim's placeholder claimed": 401,
        "terminating, own credential": 403,
        "drain, own credential": 403,
        "started, own credential": 403,
        "lock, own credential": 403,
        "unlock, own credential": 403,
    }, {what: r.text for what, r in answers.items()}
    assert "is not the placeholder" in answers["terminating, own credential"].json()["error"]
    time.sleep(2)  # anything the calls had set off would show by now
    still = _bound(core, victim.metadata.name)
    assert still is not None and still.metadata.uid == victim.metadata.uid, "the victim's Pod was touched"
    assert "RUNNING" in h.squeue(stack_cfg, "-j", str(victim_job), "-o", "%T")
    state, reason = h.node_state(stack_cfg, victim_node)
    assert "drain" not in state.lower(), (state, reason)
    assert h.lock_annotation(core, victim_node) == "locked_strict"


@pytest.mark.parallel
def test_a_nodes_own_credential_cannot_unlock_it_under_its_running_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Issue 39: root on a Slurm node holds its credential; an unlock of that node for a job Slurm
    says still runs there is refused (409), read from Slurm, and the lock stays."""
    victim, victim_job, victim_node = _running(stack_cfg, core, "held")
    headers = _node_auth(stack_cfg, victim_node)
    answer = httpx.post(
        f"{stack_cfg.hooks_url}/v1/unlock",
        json={"node": victim_node, "job": victim_job},
        headers=headers,
        timeout=15,
    )
    assert answer.status_code == 409, answer.text
    assert f"still holds {victim_node}" in answer.json()["error"]
    time.sleep(2)
    assert h.lock_annotation(core, victim_node) == "locked_strict"
    assert h.node_has_lock_taint(core, h.kube_node_of(victim_node))
    still = _bound(core, victim.metadata.name)
    assert still is not None and still.metadata.uid == victim.metadata.uid


# --- job tokens bound to their job (issue 39, step 2) ----------------------------------------------


def _own_token(stack_cfg: StackConfig, job_id: int, reference: str, key: bytes | None = None) -> str:
    """The token a job's script holds: signed with the ring's first key, bound to the binding in
    the job's AdminComment (the test derives it as the scheduler made it)."""
    ring = services.job_key_file(stack_cfg).read_text().split()
    binding = placeholder.binding_of(str(h.rest_job(stack_cfg, job_id).get("admin_comment") or ""))
    assert binding, "a job Tandem submits carries its credential's binding"
    return jobtoken.token(key or ring[0].encode(), reference, binding)


def _as(reference: str, token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", jobtoken.PLACEHOLDER_HEADER: reference}


@pytest.mark.parallel
def test_a_job_token_replayed_on_the_placeholders_next_job_is_refused(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """A group's next job carries the same placeholder reference and a new binding; the previous
    job's token is not its. The next job is made here as the scheduler would (root over REST)."""
    pod, job_id, node = _running(stack_cfg, core, "replay")
    reference = _reference(stack_cfg, pod)
    token = _own_token(stack_cfg, job_id, reference)
    client = slurm.admin_client(stack_cfg)
    try:
        from tandem.slurm.models import JobSpec

        nxt = client.submit_job(
            JobSpec(
                name=reference,
                admin_comment=placeholder.admin_comment(reference, jobtoken.new_binding()),
                script="#!/bin/sh\nsleep 300\n",
                environment={"PATH": "/usr/bin:/bin"},
                cpus=1,
                memory_mb=100,
                required_nodes=node,
            )
        )
    finally:
        client.close()
    try:
        answer = httpx.post(
            f"{stack_cfg.hooks_url}/v1/started", json={"job": nxt}, headers=_as(reference, token), timeout=15
        )
        assert answer.status_code == 403, answer.text
        assert f"not Slurm job {nxt}'s own" in answer.json()["error"]
        # Its own job still takes it.
        own = httpx.post(
            f"{stack_cfg.hooks_url}/v1/started",
            json={"job": job_id},
            headers=_as(reference, token),
            timeout=15,
        )
        assert own.status_code == 200, own.text
    finally:
        h.scancel(stack_cfg, nxt)


@pytest.mark.parallel
def test_a_job_token_used_after_its_job_ended_is_refused(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    pod, job_id, node = _running(stack_cfg, core, "ended")
    reference = _reference(stack_cfg, pod)
    token = _own_token(stack_cfg, job_id, reference)
    h.delete_pod(core, pod.metadata.name)
    h.wait_until(
        "its job ended",
        lambda: (
            str(h.rest_job(stack_cfg, job_id)["job_state"]) in ("CANCELLED", "COMPLETED")
            and "COMPLETING" not in h.rest_job(stack_cfg, job_id)["job_flags"]
        ),
        60,
    )
    body = {"job": job_id, "node": node, "timeout": 3}
    for route in ("started", "drain", "terminating"):
        answer = httpx.post(
            f"{stack_cfg.hooks_url}/v1/{route}", json=body, headers=_as(reference, token), timeout=15
        )
        assert answer.status_code == 403, (route, answer.text)
        assert "its credential ended with it" in answer.json()["error"], (route, answer.text)
    state, _ = h.node_state(stack_cfg, node)
    assert "drain" not in state.lower()


@pytest.mark.parallel
def test_a_revoked_job_token_and_an_unbound_one_are_refused(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Issue 50: revocation was an AdminComment without a binding, which made tokens of before
    bindings good again, with no cutoff. Now an administrator writes the marker `token-revoked`:
    the job's own token is refused from then on, and so is an unbound token (the syncer accepts
    those only with --accept-unbound-job-tokens), while the Pod and its job run on untouched."""
    pod, job_id, node = _running(stack_cfg, core, "revoked")
    reference = _reference(stack_cfg, pod)
    ring = services.job_key_file(stack_cfg).read_text().split()
    own = _own_token(stack_cfg, job_id, reference)
    unbound = jobtoken.token(ring[0].encode(), reference)
    body = {"job": job_id, "node": node}
    url = f"{stack_cfg.hooks_url}/v1/started"
    before = httpx.post(url, json=body, headers=_as(reference, own), timeout=15)
    assert before.status_code == 200, before.text
    old = httpx.post(url, json=body, headers=_as(reference, unbound), timeout=15)
    assert old.status_code == 403 and "--accept-unbound-job-tokens" in old.json()["error"], old.text
    h.scontrol(
        stack_cfg, "update", f"JobId={job_id}", f"AdminComment={placeholder.revoked_comment(reference)}"
    )
    for name, token in (("own", own), ("unbound", unbound)):
        after = httpx.post(url, json=body, headers=_as(reference, token), timeout=15)
        assert after.status_code == 403, (name, after.text)
    revoked = httpx.post(url, json=body, headers=_as(reference, own), timeout=15)
    assert "was revoked" in revoked.json()["error"], revoked.text
    still = _bound(core, pod.metadata.name)
    assert still is not None and still.metadata.uid == pod.metadata.uid
    assert "RUNNING" in h.squeue(stack_cfg, "-j", str(job_id), "-o", "%T")


def test_a_pods_own_job_token_cannot_take_over_an_administrators_drain(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Issue 50, attack 3: an administrator drains the node a Pod's placeholder runs on (a bad
    GPU); the Pod's user asks for a drain with the job's own token while it runs, then deletes the
    Pod. The drain is refused (409: the job has not ended), and the node stays drained with the
    administrator's reason: Tandem never resumes a drain it did not write."""
    pod, job_id, node = _running(stack_cfg, core, "admin-drained")
    h.scontrol(stack_cfg, "update", f"nodename={node}", "state=drain", "reason=bad-gpu")
    try:
        reference = _reference(stack_cfg, pod)
        token = _own_token(stack_cfg, job_id, reference)
        answer = httpx.post(
            f"{stack_cfg.hooks_url}/v1/drain",
            json={"node": node, "job": job_id},
            headers=_as(reference, token),
            timeout=15,
        )
        assert answer.status_code == 409, answer.text
        assert "has not ended (RUNNING)" in answer.json()["error"]
        assert h.node_state(stack_cfg, node)[1] == "bad-gpu"
        h.delete_pod(core, pod.metadata.name)
        h.wait_until("the Pod gone", lambda: h.get_pod(core, pod.metadata.name) is None, 60)
        h.wait_until(
            "its job ended",
            lambda: (
                "COMPLETING" not in h.rest_job(stack_cfg, job_id)["job_flags"]
                and str(h.rest_job(stack_cfg, job_id)["job_state"]) != "RUNNING"
            ),
            60,
        )
        # The syncer's node pass runs within a second of the job's end (the old code resumed the
        # node in ~15 s); the reason is read for longer than that.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state, reason = h.node_state(stack_cfg, node)
            assert "drain" in state.lower() and reason == "bad-gpu", (state, reason)
            time.sleep(1)
    finally:
        h.resume_if_drained(stack_cfg, node)


@pytest.fixture
def restore_job_key(stack_cfg: StackConfig) -> Iterator[Path]:
    path = services.job_key_file(stack_cfg)
    before = path.read_text()
    yield path
    services.publish(path, before, mode=0o600)


def _rotate(path: Path) -> None:
    """What an operator does: a new first line; the older keys stay for the jobs they signed."""
    services.publish(path, f"{secrets.token_hex(32)}\n{path.read_text()}", mode=0o600)


def test_two_rotations_and_a_gateway_restart_keep_a_running_jobs_killwait_path(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, restore_job_key: Path
) -> None:
    pod, job_id, node = _running(stack_cfg, core, "rotated")
    _rotate(restore_job_key)
    gateway = Daemon("tandem-hooks", stack_cfg.run_dir, stack_cfg.log_dir)
    pid = gateway.pid()
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    h.wait_until("the gateway stopped", lambda: not gateway.alive(), 15)
    stack.up_as_built(stack_cfg)  # starts it again, reading the ring from its file
    _rotate(restore_job_key)
    assert len(restore_job_key.read_text().split()) == 3
    # The job's script, signed with the first key, asks terminating when its Pod goes: the Pod is
    # deleted whole, the job ends, and no KillWait drain is needed.
    h.delete_pod(core, pod.metadata.name)
    h.wait_until("the Pod gone", lambda: h.get_pod(core, pod.metadata.name) is None, 60)
    h.wait_until(
        "its job ended",
        lambda: str(h.rest_job(stack_cfg, job_id)["job_state"]) in ("CANCELLED", "COMPLETED"),
        60,
    )

    def answers() -> list[str]:
        return [
            line
            for line in (stack_cfg.log_dir / "tandem-hooks.log").read_text().splitlines()
            if line.startswith("{")
            and (entry := json.loads(line)).get("route") == "/v1/terminating"
            and entry.get("job") == job_id
        ]

    # Slurm says CANCELLED at the scancel, before the script (sent SIGTERM then) asks terminating.
    answered = h.wait_until("the script's terminating call answered", answers, 30)
    assert all(json.loads(line)["status"] == 200 for line in answered), answered
    state, reason = h.node_state(stack_cfg, node)
    assert "drain" not in state.lower(), (state, reason)


def _ring_unreadable(cfg: StackConfig) -> float:
    """The syncer's count of key ring versions it refused."""
    text = httpx.get(f"http://127.0.0.1:{cfg.ports.syncer_health}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tandem_job_key_ring_unreadable_total")
    )


def test_a_key_ring_that_does_not_read_is_counted_and_the_last_one_stays(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, restore_job_key: Path
) -> None:
    """Issue 50: a ring that failed to parse was ignored without a word. An operator's rotation
    that writes a short key: the syncer says so (log, counter) and keeps the ring it had, so the
    running job's own token is still good."""
    pod, job_id, node = _running(stack_cfg, core, "ring")
    reference = _reference(stack_cfg, pod)
    own = _as(reference, _own_token(stack_cfg, job_id, reference))
    url = f"{stack_cfg.hooks_url}/v1/started"
    body = {"job": job_id, "node": node}
    assert httpx.post(url, json=body, headers=own, timeout=15).status_code == 200
    before = _ring_unreadable(stack_cfg)
    services.publish(restore_job_key, f"short\n{restore_job_key.read_text()}", mode=0o600)
    answer = httpx.post(url, json=body, headers=own, timeout=15)
    assert answer.status_code == 200, answer.text
    assert _ring_unreadable(stack_cfg) == before + 1
    assert "job key ring's new version is refused" in (stack_cfg.log_dir / "tandem-syncer.log").read_text()


@pytest.mark.parallel
def test_the_gateway_holds_no_job_key(stack_cfg: StackConfig) -> None:
    """Issue 50: whoever took the gateway could mint any placeholder's token with the ring it
    held. The lab's gateway, as it runs: no flag, variable or open file names the ring, and no
    key of it is in its environment; the syncer alone verifies job tokens."""
    pid = Daemon("tandem-hooks", stack_cfg.run_dir, stack_cfg.log_dir).pid()
    assert pid is not None
    ring_file = str(services.job_key_file(stack_cfg))
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    assert not any("job-key" in a or ring_file in a for a in argv), argv
    assert ring_file not in environ and "JOB_KEY" not in environ
    for key in services.job_key_file(stack_cfg).read_text().split():
        assert key not in environ
    opened = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir() if fd.is_symlink()]
    assert ring_file not in opened, opened
