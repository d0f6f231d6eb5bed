"""Issue 20: `helm uninstall` of the installed release leaves no placeholder job, no lock taint, no
lock annotation, no placeholder Pod and no gRPC certificate behind, and touches no other Slurm job,
even one named like a placeholder. Runs on a DEPLOY=chart stack only, last (it removes the
release), and installs the release again afterwards.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import chart, config, realnode
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.chart, pytest.mark.real_node, pytest.mark.last]


@pytest.fixture
def installed_again(stack_cfg: StackConfig) -> Iterator[None]:
    yield
    chart.install(stack_cfg, realnode.tandem_image(stack_cfg).rsplit(":", 1)[1])


def _bound(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod | None:
    pod = h.get_pod(core, name)
    return pod if pod is not None and pod.spec.node_name and h.job_id_of(core, name) else None


def test_helm_uninstall_cancels_placeholders_and_leaves_no_lock(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, installed_again: None
) -> None:
    name = h.unique("uninstall")
    h.create(core, h.tandem_pod(stack_cfg, name))
    pod = h.wait_until("the Pod bound", lambda: _bound(core, name), 60)
    placeholder = h.job_id_of(core, name)
    slurm_node = h.rest_job(stack_cfg, placeholder or 0)["nodes"]
    assert h.node_has_lock_taint(core, pod.spec.node_name)
    # A Slurm user's job named like a placeholder: only the AdminComment makes one.
    lookalike = h.sbatch(stack_cfg, f"--job-name=tandem:{stack_cfg.scheduler_name}/default/{name}/x")
    try:
        out = subprocess.run(
            [
                str(stack_cfg.bin_dir / "helm"),
                f"--kubeconfig={stack_cfg.kubeconfig}",
                "uninstall",
                chart.RELEASE.name,
                "--namespace",
                config.TANDEM_NAMESPACE,
                "--wait",
                "--timeout=5m",
            ],
            capture_output=True,
            text=True,
            timeout=360,
        )
        assert out.returncode == 0, out.stderr
        # Helm shows the cleanup Job's summary (on stderr): what it cancelled.
        assert f"{placeholder} (default/{name})" in out.stdout + out.stderr
        assert h.squeue_ids(stack_cfg) == {lookalike}
        assert h.get_pod(core, name) is None
        tainted = [
            n.metadata.name for n in core.list_node().items if h.node_has_lock_taint(core, n.metadata.name)
        ]
        assert tainted == []
        assert h.lock_annotation(core, slurm_node) == "false"
        # Issue 39: the PKI hook's Secrets (the CA key among them) go with the release.
        left = core.list_namespaced_secret(
            config.TANDEM_NAMESPACE, label_selector="app.kubernetes.io/managed-by=tandem-pki"
        ).items
        assert [s.metadata.name for s in left] == []
        h.wait_until(  # the garbage collector removes the Deployments' Pods after helm returns
            "the release's Pods gone",
            lambda: (
                not core.list_namespaced_pod(
                    config.TANDEM_NAMESPACE, label_selector="app.kubernetes.io/part-of=tandem"
                ).items
            ),
            60,
        )
    finally:
        h.scancel(stack_cfg, lookalike)
