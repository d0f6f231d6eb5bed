"""A Slurm user on the nodes cannot move a Pod, a lock or a node through the hooks API (issue 18):
the hooks token is root's, and a placeholder's own credential speaks for its own job and nodes
only, as Slurm says. Each attack is made as an attacker would, and changes nothing."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
from kubernetes import client as k8s

from devstack import services, slurm, slurm_root
from devstack.config import StackConfig
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


def test_a_slurm_user_cannot_read_the_hooks_token(stack_cfg: StackConfig) -> None:
    token_file = stack_cfg.slurm_dir / "hooks-token"
    out = subprocess.run(
        slurm_root.chroot_argv(slurm.root(stack_cfg), ["/bin/cat", str(token_file)], (UID, GID)),
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode != 0 and "Permission denied" in out.stderr
    assert out.stdout == ""


def test_a_slurm_user_cannot_end_another_pod_lock_or_drain_its_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    victim, victim_job, victim_node = _running(stack_cfg, core, "victim")
    mine, _, _ = _running(stack_cfg, core, "mine")
    # What the attacker holds: their own placeholder's credential (it is in their job's
    # environment), and whatever they make up.
    key = services.job_key_file(stack_cfg).read_text().strip().encode()
    my_reference = _reference(stack_cfg, mine)
    own = {
        "Authorization": f"Bearer {jobtoken.token(key, my_reference)}",
        jobtoken.PLACEHOLDER_HEADER: my_reference,
    }
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


def test_the_hooks_token_cannot_unlock_a_node_under_its_running_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Issue 39: root on a Slurm node holds the hooks token; an unlock of that node for a job Slurm
    says still runs there is refused (409), read from Slurm, and the lock stays."""
    victim, victim_job, victim_node = _running(stack_cfg, core, "held")
    headers = {"Authorization": f"Bearer {services.hooks_token(stack_cfg)}"}
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
