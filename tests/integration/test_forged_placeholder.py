"""A Slurm user cannot pass a job of theirs off as a Pod's placeholder: Tandem knows its jobs by the
AdminComment only Slurm's administrators write, and a job named like a placeholder is any job."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import slurm, slurm_root
from devstack.config import StackConfig
from tandem import placeholder
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.parallel]

_, UID, GID = slurm.POD_USER


def sbatch_as_user(cfg: StackConfig, *args: str) -> subprocess.CompletedProcess[str]:
    """sbatch as the Slurm user tandem-pods (not root), as anyone with a login on the cluster."""
    argv = slurm_root.chroot_argv(
        slurm.root(cfg),
        ["/usr/bin/sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *args],
        (UID, GID),
    )
    return subprocess.run(
        argv,
        input="#!/bin/sh\nsleep 300\n",
        env={"SLURM_CONF": str(cfg.slurm_conf), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def waiting_pod(stack_cfg: StackConfig, core: k8s.CoreV1Api, clean: None) -> Iterator[k8s.V1Pod]:
    """A Pod of Tandem's that has no job: no Node matches its selector."""
    name = h.unique("victim")
    pod = h.tandem_pod(stack_cfg, name)
    pod["spec"]["nodeSelector"] = {"example.com/nowhere": "true"}
    h.create(core, pod)
    yield h.wait_until(
        "the Pod is Unschedulable",
        lambda: (
            (p := h.get_pod(core, name))
            and (c := h.scheduled_condition(p)) is not None
            and c.reason == "Unschedulable"
            and p
        ),
        30,
    )


def test_a_job_named_like_a_placeholder_is_not_the_pods(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, waiting_pod: k8s.V1Pod
) -> None:
    ref = placeholder.PodRef(
        waiting_pod.metadata.namespace, waiting_pod.metadata.name, waiting_pod.metadata.uid
    )
    forged = placeholder.job_name(ref, stack_cfg.scheduler_name)
    out = sbatch_as_user(stack_cfg, "-J", forged, "--extra=: started")
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    h.wait_until(
        "the forged job runs", lambda: "RUNNING" in h.squeue(stack_cfg, "-j", str(job_id), "-o", "%T"), 30
    )
    node = h.squeue(stack_cfg, "-j", str(job_id), "-o", "%N").strip()
    time.sleep(5)  # the syncer polls Slurm every second; the scheduler would act within that
    pod = h.get_pod(core, waiting_pod.metadata.name)
    assert pod is not None and not pod.spec.node_name, "the Pod was bound to a Slurm user's allocation"
    assert h.job_id_of(core, waiting_pod.metadata.name) is None, "the forged job was recorded on the Pod"
    assert "RUNNING" in h.squeue(stack_cfg, "-j", str(job_id), "-o", "%T"), "Tandem cancelled a user's job"
    # Its prolog took the lock a job takes, not a placeholder's strict one.
    assert h.lock_annotation(core, node) == "locked"
    h.scancel(stack_cfg, job_id)


def test_a_slurm_user_cannot_write_the_admin_comment(stack_cfg: StackConfig) -> None:
    out = sbatch_as_user(stack_cfg, "-J", "x", "--admin-comment=tandem:tandem/default/p/u")
    assert out.returncode != 0
    assert "admin" in out.stderr.lower() or "denied" in out.stderr.lower(), out.stderr
