"""Issue 5: the umbrella chart lints, renders for both scopes, rejects bad values, and what it
renders is accepted by the real apiserver (server-side dry run)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from devstack import kube
from devstack.config import StackConfig

pytestmark = pytest.mark.integration
CHART = "helm/tandem"


def _helm(cfg: StackConfig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cfg.bin_dir / "helm"), *args], capture_output=True, text=True)


def _render(cfg: StackConfig, *sets: str) -> str:
    res = _helm(cfg, "template", "tandem", CHART, "-n", "tandem", *(a for s in sets for a in ("--set", s)))
    assert res.returncode == 0, res.stderr
    return res.stdout


def _server_dry_run(cfg: StackConfig, manifest: str) -> str:
    return kube.kubectl(cfg, "apply", "--dry-run=server", "-f", "-", stdin=manifest)


def test_the_chart_lints(stack_cfg: StackConfig) -> None:
    res = _helm(stack_cfg, "lint", CHART)
    assert res.returncode == 0, res.stdout + res.stderr


def test_cluster_scope_renders_and_the_apiserver_accepts_it(stack_cfg: StackConfig) -> None:
    manifest = _render(stack_cfg)
    out = _server_dry_run(stack_cfg, manifest)
    assert (
        "clusterrole.rbac.authorization.k8s.io/tandem-tandem-scheduler created (server dry run)" in out
        or "clusterrole.rbac.authorization.k8s.io" in out
    )
    assert "--scheduler-name=tandem-tandem" in manifest
    for kind in ("Deployment", "ServiceAccount", "PodDisruptionBudget", "ConfigMap", "Service"):
        assert f"kind: {kind}" in manifest


def test_namespace_scope_grants_roles_only_in_those_namespaces(stack_cfg: StackConfig) -> None:
    manifest = _render(
        stack_cfg, "scheduler.scope.type=namespace", r"scheduler.scope.namespaces=team-a\,team-b"
    )
    for ns in ("team-a", "team-b"):
        kube.run_kubectl(stack_cfg, "create", "namespace", ns)  # may exist already
    _server_dry_run(stack_cfg, manifest)
    assert "--watch-namespace=team-a,team-b" in manifest
    docs = [yaml.safe_load(doc) for doc in manifest.split("\n---")]
    scheduler_cluster_roles = [
        d for d in docs if d and d.get("kind") == "ClusterRole" and "scheduler" in d["metadata"]["name"]
    ]
    # Pods only in those namespaces; cluster-wide, nothing but reading Nodes (what fits where).
    assert [role["rules"] for role in scheduler_cluster_roles] == [
        [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("scheduler.scope.type=galaxy", "scope/type"),
        ("global.slurm.killWait=thirty", "killWait"),
    ],
)
def test_bad_values_are_rejected_with_a_clear_message(
    stack_cfg: StackConfig, value: str, message: str
) -> None:
    res = _helm(stack_cfg, "template", "tandem", CHART, "--set", value)
    assert res.returncode != 0
    assert message in res.stderr
