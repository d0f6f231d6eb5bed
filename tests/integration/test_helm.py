"""Issue 5: the umbrella chart lints, renders for both scopes, rejects bad values, and what it
renders is accepted by the real apiserver (server-side dry run). Issue 13: its monitoring objects
(PodMonitors, Grafana dashboard, PrometheusRule), against the Prometheus Operator's CRDs the stack
installs. Issue 18: its PKI hook, job key and NetworkPolicies are accepted, and the job key it
generated is found and kept by the next render against the cluster (an upgrade); a new job key
restarts the scheduler and not the gateway. Issue 39: the PKI hook, run with its own rights, makes
certificates that name each identity in its URI SAN, keeps them, and removes them.
(What the chart renders for TLS and NetworkPolicies, without a cluster: tests/unit/lab/test_helm_chart.py.)"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from devstack import config, kube, pki
from devstack.config import StackConfig
from tandem import mtls
from tandem.kube import KubeClient, KubeError

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
CHART = "helm/tandem"
MONITORING = (
    "monitoring.podMonitors.enabled=true",
    "monitoring.dashboard.enabled=true",
    "monitoring.prometheusRule.enabled=true",
)
ALERTS = {
    "TandemLeaderMissing",
    "TandemNodeLockedWhileIdle",
    "TandemDrainedNodes",
    "TandemSubmitErrors",
    "TandemSlurmApiErrors",
    "TandemSlurmTokenExpiring",
    "TandemHookErrors",
}
# Every metric the services export for operators has a panel.
DASHBOARD_METRICS = (
    "tandem_pods{",
    "tandem_pods_validated_total{",
    "tandem_pod_create_to_bound_seconds_bucket",
    "tandem_node_locks{",
    "tandem_lock_wait_seconds_bucket",
    "tandem_node_sync_actions_total",
    "tandem_evictions_total",
    "tandem_hook_calls_total",
    "tandem_hook_call_seconds_bucket",
    "tandem_slurm_api_errors_total",
    "tandem_jobs_submitted_total",
    "tandem_leader{",
    "tandem_slurm_token_expiry_timestamp_seconds",
)


def _helm(cfg: StackConfig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cfg.bin_dir / "helm"), *args], capture_output=True, text=True)


def _render(cfg: StackConfig, *sets: str) -> str:
    res = _helm(cfg, "template", "tandem", CHART, "-n", "tandem", *(a for s in sets for a in ("--set", s)))
    assert res.returncode == 0, res.stderr
    return res.stdout


def _server_dry_run(cfg: StackConfig, manifest: str) -> str:
    return kube.kubectl(cfg, "apply", "--dry-run=server", "-f", "-", stdin=manifest)


def _docs(manifest: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def _monitoring_objects(cfg: StackConfig) -> list[dict[str, Any]]:
    return [
        d
        for d in _docs(_render(cfg, *MONITORING))
        if d["apiVersion"].startswith("monitoring.coreos.com/")
        or d["metadata"]["name"].endswith("-dashboard")
    ]


def test_the_chart_lints(stack_cfg: StackConfig) -> None:
    res = _helm(stack_cfg, "lint", CHART)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_chart_lints_with_monitoring_on(stack_cfg: StackConfig) -> None:
    res = _helm(stack_cfg, "lint", CHART, *(a for s in MONITORING for a in ("--set", s)))
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
    # Pods (and their claims) only in those namespaces; cluster-wide, nothing but reading Nodes
    # (what fits where) and their devices, and the claim-binding check the apiserver makes there.
    assert [role["rules"] for role in scheduler_cluster_roles] == [
        [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices", "deviceclasses"],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"], "verbs": ["patch"]},
        ]
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("scheduler.scope.type=galaxy", "scope/type"),
        ("global.slurm.killWait=thirty", "killWait"),
        ("monitoring.podMonitors.interval=soon", "podMonitors/interval"),
    ],
)
def test_bad_values_are_rejected_with_a_clear_message(
    stack_cfg: StackConfig, value: str, message: str
) -> None:
    res = _helm(stack_cfg, "template", "tandem", CHART, "--set", value)
    assert res.returncode != 0
    assert message in res.stderr


def test_monitoring_is_off_unless_asked_for(stack_cfg: StackConfig) -> None:
    manifest = _render(stack_cfg)
    assert "monitoring.coreos.com" not in manifest
    assert "grafana_dashboard" not in manifest


def test_a_pod_monitor_scrapes_every_replica_of_each_service_on_its_metrics_port(
    stack_cfg: StackConfig,
) -> None:
    docs = _docs(_render(stack_cfg, *MONITORING))
    monitors = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodMonitor"}
    deployments = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Deployment"}
    assert set(monitors) == set(deployments) == {"tandem-scheduler", "tandem-syncer", "tandem-hooks"}
    for name, spec in monitors.items():
        pod = deployments[name]["template"]
        assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (endpoint,) = spec["podMetricsEndpoints"]
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics", name


def test_the_dashboard_is_json_with_a_panel_for_every_metric(stack_cfg: StackConfig) -> None:
    (configmap,) = [d for d in _monitoring_objects(stack_cfg) if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["tandem.json"])
    exprs = "\n".join(t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", []))
    missing = [metric for metric in DASHBOARD_METRICS if metric not in exprs]
    assert not missing, missing


def test_the_rule_has_every_alert_and_says_what_to_do(stack_cfg: StackConfig) -> None:
    (rule,) = [d for d in _monitoring_objects(stack_cfg) if d["kind"] == "PrometheusRule"]
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == ALERTS
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        for key in ("summary", "description", "runbook"):
            assert alert["annotations"][key].strip(), (name, key)


def test_the_apiserver_accepts_the_monitoring_objects(stack_cfg: StackConfig) -> None:
    objects = _monitoring_objects(stack_cfg)
    out = _server_dry_run(stack_cfg, yaml.safe_dump_all(objects))
    for name in (
        "podmonitor.monitoring.coreos.com/tandem-scheduler",
        "prometheusrule.monitoring.coreos.com/tandem",
        "configmap/tandem-dashboard",
    ):
        assert name in out, out
    assert out.count("(server dry run)") == len(objects), out


def test_the_apiserver_accepts_the_pki_hook_and_network_policies(stack_cfg: StackConfig) -> None:
    out = _server_dry_run(stack_cfg, _render(stack_cfg, f"global.slurmdNamespace={config.SLURM_NAMESPACE}"))
    for name in (
        "serviceaccount/tandem-pki",
        "role.rbac.authorization.k8s.io/tandem-pki",
        "rolebinding.rbac.authorization.k8s.io/tandem-pki",
        "job.batch/tandem-pki",
        "job.batch/tandem-pki-remove",
        "secret/tandem-job-key",
        "networkpolicy.networking.k8s.io/tandem-scheduler",
        "networkpolicy.networking.k8s.io/tandem-syncer",
        "networkpolicy.networking.k8s.io/tandem-hooks",
    ):
        assert any(
            f"{name} {verb} (server dry run)" in out for verb in ("created", "configured", "unchanged")
        ), (
            name,
            out,
        )


def _render_against(cfg: StackConfig, release: str, ns: str) -> list[dict[str, Any]]:
    """What `helm upgrade` renders: lookup against the cluster (`helm template --dry-run=server`)."""
    res = _helm(
        cfg, "template", release, CHART, "-n", ns, "--dry-run=server",
        f"--kubeconfig={cfg.kubeconfig}", "--set", f"global.slurmdNamespace={ns}",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return _docs(res.stdout)


def _secrets(cfg: StackConfig, ns: str) -> dict[str, dict[str, Any]]:
    items = json.loads(kube.kubectl(cfg, "get", "secrets", "-n", ns, "-o", "json"))["items"]
    return {s["metadata"]["name"]: s for s in items if s["type"] == "kubernetes.io/tls"}


def _as_pki_hook(cfg: StackConfig, ns: str, docs: list[dict[str, Any]], path: Path) -> Path:
    """The PKI hook's rendered ServiceAccount, Role and binding (and its admission policy) applied
    in `ns`, and a kubeconfig at `path` holding a token of that ServiceAccount."""
    hook = [
        d
        for d in docs
        if (
            d["kind"] in ("ServiceAccount", "Role", "RoleBinding")
            and d["metadata"]["name"] == "pki-tandem-pki"
        )
        or (
            d["kind"].startswith("ValidatingAdmissionPolicy")
            and d["metadata"]["name"] == f"{ns}-pki-tandem-pki"
        )
    ]
    assert len(hook) == 5
    kube.kubectl(cfg, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(hook))
    token = kube.kubectl(cfg, "create", "token", "pki-tandem-pki", "-n", ns).strip()
    pki.write_kubeconfig(path, cfg.apiserver_url, cfg.pki_dir / "ca.crt", "pki", token)
    return path


def _run_pki(docs: list[dict[str, Any]], job: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """The hook Job `job` as rendered, run here with the hook's own rights."""
    (rendered,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == job]
    args = rendered["spec"]["template"]["spec"]["containers"][0]["args"]
    return subprocess.run(
        [sys.executable, "-m", "tandem.pkijob", *args, f"--kubeconfig={kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _drop_pki_hook_policy(cfg: StackConfig, ns: str) -> None:
    kube.run_kubectl(
        cfg, "delete", "validatingadmissionpolicy,validatingadmissionpolicybinding", f"{ns}-pki-tandem-pki"
    )


def test_the_pki_hook_makes_the_certificates_with_its_own_rights_keeps_them_and_removes_them(
    stack_cfg: StackConfig, tmp_path: Path
) -> None:
    """Issue 39: the generated mode's hook Job, run as its rendered ServiceAccount with its rendered
    args: it makes the CA and one certificate per identity, each naming it in the URI SAN the
    services go by; a second run changes nothing; a certificate deleted by hand is made again by the
    kept CA; the post-delete run removes them all."""
    ns = "tandem-chart-pki"
    kube.run_kubectl(stack_cfg, "create", "namespace", ns)  # may exist from an earlier run
    try:
        docs = _render_against(stack_cfg, "pki", ns)
        kubeconfig = _as_pki_hook(stack_cfg, ns, docs, tmp_path / "pki.kubeconfig")

        def run(job: str) -> str:
            out = _run_pki(docs, job, kubeconfig)
            assert out.returncode == 0, out.stderr
            return out.stdout

        assert "wrote 5 Secret(s)" in run("pki-tandem-pki")
        first = _secrets(stack_cfg, ns)
        assert set(first) == {f"pki-tandem-{c}-tls" for c in ("scheduler", "syncer", "hooks", "operator")} | {
            "pki-tandem-grpc-ca"
        }
        for component in ("scheduler", "syncer", "hooks", "operator"):
            cert = x509.load_pem_x509_certificate(
                base64.b64decode(first[f"pki-tandem-{component}-tls"]["data"]["tls.crt"])
            )
            uris = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert uris.get_values_for_type(x509.UniformResourceIdentifier) == [
                mtls.identity_uri(f"tandem-{component}")
            ]
        assert "none (all still good)" in run("pki-tandem-pki")
        assert {n: s["metadata"]["resourceVersion"] for n, s in _secrets(stack_cfg, ns).items()} == {
            n: s["metadata"]["resourceVersion"] for n, s in first.items()
        }
        kube.kubectl(stack_cfg, "delete", "secret", "pki-tandem-syncer-tls", "-n", ns)
        assert "wrote 1 Secret(s): pki-tandem-syncer-tls" in run("pki-tandem-pki")
        again = _secrets(stack_cfg, ns)
        assert (
            again["pki-tandem-syncer-tls"]["data"]["ca.crt"] == first["pki-tandem-grpc-ca"]["data"]["tls.crt"]
        )
        assert "removed 5 Secret(s)" in run("pki-tandem-pki-remove")
        assert _secrets(stack_cfg, ns) == {}
    finally:
        kube.run_kubectl(stack_cfg, "delete", "namespace", ns, "--wait=false")
        _drop_pki_hook_policy(stack_cfg, ns)


def test_the_pki_hook_cannot_mint_a_service_account_token_nor_trust_a_planted_ca(
    stack_cfg: StackConfig, tmp_path: Path
) -> None:
    """Issue 50: the hook's Role may create any Secret (RBAC cannot limit create by name): a
    ServiceAccount token Secret for the syncer would be a permanent syncer token. Its admission
    policy refuses it. And a CA Secret made before Helm first recorded the release (planted by
    whoever could create Secrets there) is refused, not signed with."""
    ns = "tandem-chart-planted"
    kube.run_kubectl(stack_cfg, "create", "namespace", ns)  # may exist from an earlier run
    try:
        docs = _render_against(stack_cfg, "pki", ns)
        kubeconfig = _as_pki_hook(stack_cfg, ns, docs, tmp_path / "pki.kubeconfig")
        as_hook = KubeClient.from_kubeconfig(str(kubeconfig))
        minted: dict[str, Any] = {
            "metadata": {
                "name": "pki-tandem-grpc-ca",
                "annotations": {"kubernetes.io/service-account.name": "default"},
            },
            "type": "kubernetes.io/service-account-token",
        }
        other: dict[str, Any] = {
            "metadata": {"name": "anything-else"},
            "type": "Opaque",
            "stringData": {"x": "y"},
        }
        deadline = time.monotonic() + 30  # a new policy takes a moment to be enforced
        for body in (minted, other):
            while True:
                try:
                    as_hook.post(f"/api/v1/namespaces/{ns}/secrets", body)
                except KubeError as e:
                    assert "the PKI hook writes only the release's TLS Secrets" in e.message, e
                    break
                kube.run_kubectl(stack_cfg, "delete", "secret", body["metadata"]["name"], "-n", ns)
                assert time.monotonic() < deadline, f"{body['metadata']['name']} was admitted"
                time.sleep(1)
        as_hook.close()
        # A CA planted first, then the release recorded (as `helm install` does before its hooks).
        planted = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "pki-tandem-grpc-ca",
                "labels": {"app.kubernetes.io/managed-by": "tandem-pki", "app.kubernetes.io/instance": "pki"},
            },
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "planted", "tls.key": "planted"},
        }
        kube.kubectl(stack_cfg, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(planted))
        time.sleep(1.1)  # creation timestamps are whole seconds
        record = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "sh.helm.release.v1.pki.v1"},
            "type": "helm.sh/release.v1",
        }
        kube.kubectl(stack_cfg, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(record))
        out = _run_pki(docs, "pki-tandem-pki", kubeconfig)
        assert out.returncode != 0 and "it is older than the release" in out.stderr, out.stderr
        assert (
            _secrets(stack_cfg, ns)["pki-tandem-grpc-ca"]["data"]["tls.crt"]
            == base64.b64encode(b"planted").decode()
        )
    finally:
        kube.run_kubectl(stack_cfg, "delete", "namespace", ns, "--wait=false")
        _drop_pki_hook_policy(stack_cfg, ns)


def test_the_job_key_is_kept_by_the_next_upgrade_and_a_new_one_restarts_only_the_scheduler(
    stack_cfg: StackConfig,
) -> None:
    """`helm upgrade` renders with lookup against the cluster: the job key the first render made,
    once in the cluster, comes out again unchanged, and so do the Pods' checksums (no restart)."""
    ns = "tandem-chart-keep"
    kube.run_kubectl(stack_cfg, "create", "namespace", ns)  # may exist from an earlier run

    def secrets(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        return {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "Secret"}

    def checksums(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        return {
            d["metadata"]["name"]: {
                k: v
                for k, v in d["spec"]["template"]["metadata"].get("annotations", {}).items()
                if k.startswith("checksum/")
            }
            for d in docs
            if d["kind"] == "Deployment"
        }

    try:
        kube.kubectl(stack_cfg, "delete", "secret", "--all", "-n", ns, "--wait=true")
        first = _render_against(stack_cfg, "keep", ns)
        made = [d for d in first if d["kind"] == "Secret"]
        assert {d["metadata"]["name"] for d in made} == {"keep-tandem-job-key"}
        kube.kubectl(stack_cfg, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(made))
        second = _render_against(stack_cfg, "keep", ns)
        assert secrets(second) == secrets(first)
        assert checksums(second) == checksums(first)
        assert "checksum/job-key" in checksums(first)["keep-tandem-scheduler"]
        # A job key deleted by hand (a rotation) is made again: the scheduler, which reads it at
        # start, restarts; the gateway re-reads it and keeps the previous one, so it does not.
        kube.kubectl(stack_cfg, "delete", "secret", "keep-tandem-job-key", "-n", ns)
        fourth = _render_against(stack_cfg, "keep", ns)
        assert secrets(fourth)["keep-tandem-job-key"] != secrets(first)["keep-tandem-job-key"]
        assert (
            checksums(fourth)["keep-tandem-scheduler"]["checksum/job-key"]
            != checksums(first)["keep-tandem-scheduler"]["checksum/job-key"]
        )
        assert checksums(fourth)["keep-tandem-hooks"] == checksums(first)["keep-tandem-hooks"]
    finally:
        kube.run_kubectl(stack_cfg, "delete", "namespace", ns, "--wait=false")
