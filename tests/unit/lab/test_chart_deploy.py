"""Issue 20: what `DEPLOY=chart make up` installs, checked on `helm template` with the lab's values
(no cluster): the lab's image, on the real Node only, pointed at the lab's Slurm as the host sees it,
with the Slurm users the lab's Slurm knows. Needs the lab's helm (`make tools`); skipped without.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack import chart, installed, slurm
from devstack.config import REAL_NODE_IP, Ports, StackConfig, default_state_dir

HELM = default_state_dir() / "bin" / "helm"
TAG = "0123456789ab"

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="no helm: `make tools` builds it")


def _cfg(tmp_path: Path) -> StackConfig:
    return StackConfig(nodes=2, state_dir=tmp_path, ports=Ports.from_base(31000), deploy="chart")


def _render(cfg: StackConfig) -> list[dict[str, Any]]:
    """What `helm upgrade --install` would apply: the same arguments, as a template."""
    argv = chart.helm_args(cfg, TAG)
    args = argv[argv.index(chart.RELEASE.name) : argv.index("--wait")]
    args = [a for a in args if a != "--create-namespace"]
    res = subprocess.run([str(HELM), "template", *args], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def _deployments(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_every_service_runs_the_labs_image_on_the_real_node_only(tmp_path: Path) -> None:
    deployments = _deployments(_render(_cfg(tmp_path)))
    assert set(deployments) == {f"tandem-{c}" for c in chart.COMPONENTS}
    for name, d in deployments.items():
        spec, container = d["spec"]["template"]["spec"], _container(d)
        assert container["image"] == f"tandem.local/tandem:{TAG}", name
        assert container["imagePullPolicy"] == "Never", name  # no registry: imported by the lab
        assert spec["nodeSelector"] == {"tandem.lab/real-node": "true"}, name
        assert {"key": "tandem.lab/real-node", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ], name


def test_the_uninstall_cleanup_runs_the_labs_image_on_the_real_node_too(tmp_path: Path) -> None:
    jobs = [d for d in _render(_cfg(tmp_path)) if d["kind"] == "Job"]
    (job,) = [j for j in jobs if j["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"]
    spec = job["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == f"tandem.local/tandem:{TAG}"
    assert spec["nodeSelector"] == {"tandem.lab/real-node": "true"}
    real_node = {"key": "tandem.lab/real-node", "operator": "Exists", "effect": "NoSchedule"}
    assert real_node in spec["tolerations"]


def test_the_services_reach_the_labs_slurm_and_its_placeholders_find_hooks_env(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    deployments = _deployments(_render(cfg))
    scheduler = _container(deployments["tandem-scheduler"])["args"]
    syncer = _container(deployments["tandem-syncer"])["args"]
    api = f"--slurm-api-base=http://{REAL_NODE_IP}:{cfg.ports.slurmrestd}"
    assert api in scheduler and api in syncer  # not loopback: that is the Pod itself
    assert f"--hooks-env-file={cfg.slurm_dir}/hooks.env" in scheduler
    assert any(a.startswith(f"--placeholder-output={cfg.slurm_dir}/placeholder-logs/") for a in scheduler)
    assert f"--slurm-user={slurm.SERVICE_USERS['tandem-scheduler']}" in scheduler
    assert f"--slurm-user={slurm.SERVICE_USERS['tandem-syncer']}" in syncer
    assert "--slurm-kill-wait=30s" in scheduler


def test_the_labs_policy_lets_a_pod_without_user_id_run_as_the_labs_pod_user(tmp_path: Path) -> None:
    docs = _render(_cfg(tmp_path))
    policy = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "tandem-policy")
    assert yaml.safe_load(policy["data"]["policy.yaml"])["default"]["defaultUser"] == slurm.POD_USER[1]


def test_a_client_dialling_a_service_by_its_cluster_ip_checks_the_services_name(tmp_path: Path) -> None:
    release = installed.Installed(
        scheduler="10.0.0.20:8443",
        scheduler_name="tandem-scheduler.tandem.svc",
        syncer="10.0.0.21:8443",
        syncer_name="tandem-syncer.tandem.svc",
        hooks_url="http://10.0.0.22:8000",
    )
    release.save(tmp_path)
    loaded = installed.load(tmp_path)
    assert loaded.server_name("10.0.0.21:8443") == "tandem-syncer.tandem.svc"
    assert loaded.server_name("127.0.0.1:1") is None
    assert _cfg(tmp_path).hooks_url == "http://10.0.0.22:8000"


def test_nothing_installed_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="DEPLOY=chart make up"):
        _ = _cfg(tmp_path).hooks_url
