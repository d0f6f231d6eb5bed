"""`DEPLOY=chart`: Tandem installed with `helm upgrade --install` from helm/ onto the lab's real Node,
as a platform team installs it; the Slurm side (prolog, epilog, placeholder) pointed at the
gateway's Service.

What a user makes before installing, the lab makes too: the namespace and the services' Slurm JWTs
Secret (the chart never holds slurmctld's key). Everything else (certificates, the job key, RBAC,
the tenant policy) is the chart's own, read back from the cluster afterwards: the operator's
certificate for grpcurl, the tests and kubectl tandem. The prolog's credential is its slurmd Pod's
token, minted by the lab as for the other deploy (devstack.nodetokens).
The lab's Slurm runs on the host, where no cluster DNS answers, so its hooks.env names the
gateway's ClusterIP (kube-proxy routes it from the host) where a slurmd Pod's names the Service.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from devstack import identities, installed, kube, services
from devstack.config import StackConfig

CHART = identities.CHART
VALUES = Path(__file__).with_name("chart-values.yaml")
RELEASE = identities.MAIN
# The lab's Slurm users' JWTs, as an operator makes them with `scontrol token` (values.yaml).
TOKEN_SECRET = "tandem-slurm-tokens"
COMPONENTS = ("scheduler", "syncer", "hooks")
# Where each component serves /metrics in its Pod (the charts' health or HTTP port).
METRICS_PORT = {"scheduler": 8081, "syncer": 8081, "hooks": 8000}
# A cold install pulls nothing (the image is imported), but the first Pods wait for their
# certificates' Secrets and the leader elections: well under this.
INSTALL_TIMEOUT = "5m"


def lab_values(cfg: StackConfig, image_tag: str) -> list[str]:
    """What only the running lab knows, as `--set` pairs; the rest is in chart-values.yaml."""
    return [
        f"global.image.tag={image_tag}",
        f"global.slurm.apiBase={cfg.slurmrestd_url_for_pods}",
        # The lab's slurmrestd is on this machine's bridge: the tokens never leave it.
        "global.slurm.allowPlaintext=true",
        f"global.slurm.tokenSecret={TOKEN_SECRET}",
        # The placeholder jobs read hooks.env where the lab's Slurm finds it.
        f"global.hooksMountPath={cfg.slurm_dir}",
        f"scheduler.placeholderOutput={services.placeholder_log_dir(cfg)}/%j.out",
        *identities.LAB_POLICY,
    ]


def helm_args(cfg: StackConfig, image_tag: str, extra: Sequence[str] = ()) -> list[str]:
    """`extra` are `--set` pairs on top of the lab's (a test's changed value)."""
    sets = [*lab_values(cfg, image_tag), *extra]
    return [
        str(cfg.bin_dir / "helm"),
        f"--kubeconfig={cfg.kubeconfig}",
        "upgrade",
        "--install",
        RELEASE.name,
        str(CHART),
        "--namespace",
        RELEASE.namespace,
        "--create-namespace",
        "--values",
        str(VALUES),
        *(a for s in sets for a in ("--set-string" if s.startswith("global.image.tag=") else "--set", s)),
        "--wait",
        "--timeout",
        INSTALL_TIMEOUT,
    ]


def install(cfg: StackConfig, image_tag: str, extra: Sequence[str] = ()) -> float:
    """Install or upgrade the release and wait for its Deployments; returns the seconds it took."""
    started = time.monotonic()
    kube.kubectl(
        cfg,
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE.namespace}},
                token_secret(cfg),
            ]
        ),
    )
    out = subprocess.run(helm_args(cfg, image_tag, extra), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"helm upgrade --install {RELEASE.name} failed: {out.stderr.strip()}")
    for component in COMPONENTS:
        kube.kubectl(
            cfg,
            "-n",
            RELEASE.namespace,
            "wait",
            "--for=condition=Available",
            f"deployment/{RELEASE.fullname}-{component}",
            "--timeout=300s",
        )
    read_back(cfg)
    return time.monotonic() - started


def token_secret(cfg: StackConfig) -> dict[str, object]:
    """The services' own Slurm JWTs, as values.yaml tells an operator to make them."""
    data = {}
    for service, key in (("tandem-scheduler", "scheduler"), ("tandem-syncer", "syncer")):
        services.ensure_slurm_token(cfg, service)
        token = services.slurm_token_file(cfg, service).read_text().strip()
        data[key] = base64.b64encode(token.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": TOKEN_SECRET, "namespace": RELEASE.namespace},
        "type": "Opaque",
        "data": data,
    }


def read_back(cfg: StackConfig) -> installed.Installed:
    """The release's addresses and operator certificate, from the cluster."""
    ns, full = RELEASE.namespace, RELEASE.fullname

    def service(component: str) -> tuple[str, int]:
        svc = json.loads(kube.kubectl(cfg, "-n", ns, "get", "service", f"{full}-{component}", "-o", "json"))
        return str(svc["spec"]["clusterIP"]), int(svc["spec"]["ports"][0]["port"])

    def dns(component: str) -> str:
        return f"{full}-{component}.{ns}.svc"

    (scheduler_ip, scheduler_port), (syncer_ip, syncer_port) = service("scheduler"), service("syncer")
    hooks_ip, hooks_port = service("hooks")
    result = installed.Installed(
        scheduler=f"{scheduler_ip}:{scheduler_port}",
        scheduler_name=dns("scheduler"),
        syncer=f"{syncer_ip}:{syncer_port}",
        syncer_name=dns("syncer"),
        hooks_url=f"http://{hooks_ip}:{hooks_port}",
    )
    operator = _secret(cfg, ns, f"{full}-operator-tls")
    d = services.chart_tls_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    for key, name in (("ca.crt", "ca.crt"), ("tls.crt", "operator.crt"), ("tls.key", "operator.key")):
        services.publish(d / name, operator[key], mode=0o600)
    result.save(cfg.state_dir)
    return result


def metrics_urls(cfg: StackConfig, component: str) -> list[str]:
    """/metrics of each running replica of a component, by Pod IP (the lab's bridge reaches them
    from the host; the Services carry only gRPC and the hooks API)."""
    pods = json.loads(
        kube.kubectl(
            cfg,
            "-n",
            RELEASE.namespace,
            "get",
            "pods",
            "-l",
            f"app.kubernetes.io/name=tandem-{component},app.kubernetes.io/instance={RELEASE.name}",
            "-o",
            "json",
        )
    )["items"]
    port = METRICS_PORT[component]
    return [
        f"http://{p['status']['podIP']}:{port}/metrics"
        for p in pods
        if p.get("status", {}).get("podIP") and p["status"].get("phase") == "Running"
    ]


def uninstall(cfg: StackConfig) -> None:
    """`helm uninstall`: its pre-delete hook cancels the release's placeholders and removes the lock
    taints, lock annotations and Tandem Node annotations left; then the release's objects go
    (README, Uninstalling)."""
    subprocess.run(
        [
            str(cfg.bin_dir / "helm"),
            f"--kubeconfig={cfg.kubeconfig}",
            "uninstall",
            RELEASE.name,
            "--namespace",
            RELEASE.namespace,
            "--wait",
        ],
        capture_output=True,
        text=True,
    )
    installed.path(cfg.state_dir).unlink(missing_ok=True)


def _secret(cfg: StackConfig, namespace: str, name: str) -> dict[str, str]:
    obj = json.loads(kube.kubectl(cfg, "-n", namespace, "get", "secret", name, "-o", "json"))
    return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
