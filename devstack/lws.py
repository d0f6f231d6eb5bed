"""The LeaderWorkerSet controller, run out of cluster on 127.0.0.1 (lab/KUBERNETES.md).

Its CRDs and webhook manifests come from the pinned module itself (the Go module cache of
tools/lws), so they always match the binary. The webhooks point at 127.0.0.1 with the stack's CA;
LWS's own certificate management (which writes a Secret for an in-cluster Service) is off.
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from devstack import config, files, kube
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for

NAMESPACE = "lws-system"
WEBHOOK_CONFIG_PREFIX = "tandem-lab-lws-"
# The Pod webhooks see only the Pods LWS made (its kustomize patches): nothing else may depend on
# the controller being up.
_POD_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}


def module_dir() -> Path:
    """sigs.k8s.io/lws at the pinned version, as `go mod download` left it in the module cache."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/lws@{config.LWS_VERSION}"],
        cwd=config.REPO_ROOT / "tools" / "lws",
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"go mod download sigs.k8s.io/lws failed: {out.stderr.strip()}")
    return Path(json.loads(out.stdout)["Dir"])


def ensure_installed(cfg: StackConfig) -> None:
    """CRDs, namespace and webhook configurations, applied server-side (idempotent)."""
    source = module_dir() / "config"
    for crd in sorted((source / "crd" / "bases").glob("*.yaml")):
        kube.kubectl(cfg, "apply", "--server-side", "--force-conflicts", "-f", str(crd))
    manifests = list(yaml.safe_load_all((source / "webhook" / "manifests.yaml").read_text()))
    webhook_configs = [_local_webhooks(m, cfg) for m in manifests if m]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    kube.kubectl(
        cfg,
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        stdin=yaml.safe_dump_all([namespace, *webhook_configs]),
    )


def _local_webhooks(manifest: dict[str, Any], cfg: StackConfig) -> dict[str, Any]:
    ca_bundle = base64.b64encode((cfg.pki_dir / "ca.crt").read_bytes()).decode()
    manifest["metadata"]["name"] = WEBHOOK_CONFIG_PREFIX + manifest["metadata"]["name"]
    for hook in manifest["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{cfg.ports.lws_webhook}{path}",
            "caBundle": ca_bundle,
        }
        if any("pods" in rule.get("resources", []) for rule in hook.get("rules", [])):
            hook["objectSelector"] = _POD_SELECTOR
    return manifest


def write_config(cfg: StackConfig) -> Path:
    cert_dir = cfg.state_dir / "lws-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    for src, dst in (("lws-webhook.crt", "tls.crt"), ("lws-webhook.key", "tls.key")):
        files.write_whole(cert_dir / dst, (cfg.pki_dir / src).read_bytes())
    path = cfg.state_dir / "lws-config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.lws.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {"host": "127.0.0.1", "port": cfg.ports.lws_webhook, "certDir": str(cert_dir)},
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{cfg.ports.lws_health}"},
            }
        )
    )
    return path


def start(cfg: StackConfig, daemon: Daemon) -> None:
    ensure_installed(cfg)
    daemon.start(
        [
            str(cfg.bin_dir / "lws-controller"),
            f"--config={write_config(cfg)}",
            f"--kubeconfig={kube.kubeconfig(cfg, 'lws-controller')}",
            "--zap-log-level=info",
        ]
    )
    wait_for("lws-controller /readyz", lambda: _ready(cfg), 60, daemon)


def _ready(cfg: StackConfig) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{cfg.ports.lws_health}/readyz", timeout=2) as r:
        return bool(r.status == 200)
