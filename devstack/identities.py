"""The services run as the chart's ServiceAccounts, bound by the chart's own RBAC rules.

`helm template` renders a release; its ServiceAccounts, Roles, ClusterRoles and bindings are
applied to the local apiserver; each service gets a token for its ServiceAccount (TokenRequest
API) in its own kubeconfig. So a permission the code needs but the chart lacks fails a test
instead of a production install. The release's tenant policy ConfigMap is applied with them, as
the chart renders it with the lab's values (LAB_POLICY).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from devstack import config, kube, pki, slurm
from devstack.config import StackConfig

CHART = config.REPO_ROOT / "helm" / "tandem"
# What a release gets from the chart before its services start: identities, their RBAC, the
# admission policies that hold the services' writes to what they need, and the one that gives
# Tandem's Pods the lock toleration at their creation.
RBAC_KINDS = frozenset(
    {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
# What `helm install` would find the lab's API server serves and `helm template` cannot know.
SERVED_APIS = ("admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",)
# The lab's tenant policy on top of the chart's (which refuses a Pod without user-id): in every
# namespace such a Pod runs as tandem-pods, a Slurm user with an association to account k8s
# (devstack.slurm.ensure_accounting). Root and priorities above the chart's cap stay refused.
LAB_POLICY = (
    f"scheduler.policy.default.defaultUser={slurm.POD_USER[1]}",
    f"lock.sharingNamespaces={{kube-system,{config.OPS_NAMESPACE}}}",
    # Every kwok Node hosts a slurmd Pod (devstack/kube.py); the real Node never does.
    f"syncer.slurmNodeLabels.{kube.SLURM_HOST_LABEL[0]}={kube.SLURM_HOST_LABEL[1]}",
)
# What the syncer's --lock-sharing-namespaces is when the chart resolves those values.
LOCK_SHARING_NAMESPACES = (
    "kube-system",
    config.OPS_NAMESPACE,
    config.SLURM_NAMESPACE,
    config.TANDEM_NAMESPACE,
)
# Long enough for any test session or demo; `make up` mints fresh ones each time.
TOKEN_DURATION = "720h"


@dataclass(frozen=True)
class Release:
    """A chart install: its name, namespace and `--set` values."""

    name: str
    namespace: str = config.TANDEM_NAMESPACE
    values: tuple[str, ...] = ()

    @property
    def fullname(self) -> str:
        """The chart's `tandem.fullname`."""
        return self.name if "tandem" in self.name else f"{self.name}-tandem"

    def service_account(self, component: str) -> str:
        """The chart's name for a component's ServiceAccount ("<fullname>-<component>")."""
        return f"{self.fullname}-{component}"

    @property
    def policy_configmap(self) -> str:
        """The scheduler's tenant policy ConfigMap, as the chart names it: "<ns>/<fullname>-policy"."""
        return f"{self.namespace}/{self.fullname}-policy"


MAIN = Release(config.TANDEM_RELEASE)


def render(cfg: StackConfig, release: Release) -> list[dict[str, object]]:
    """Every object of the release, as `helm template` renders it for the lab."""
    sets = [f"global.slurmdNamespace={config.SLURM_NAMESPACE}", *LAB_POLICY, *release.values]
    out = subprocess.run(
        [
            str(cfg.bin_dir / "helm"),
            "template",
            release.name,
            str(CHART),
            "-n",
            release.namespace,
            *(a for s in sets for a in ("--set", s)),
            *(a for api in SERVED_APIS for a in ("--api-versions", api)),
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"helm template {release.name} failed: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if isinstance(d, dict)]


def policy_of(release: Release, docs: list[dict[str, object]]) -> dict[str, object]:
    """The release's tenant policy ConfigMap among its rendered objects (in its namespace: the
    template leaves that to `helm install -n`)."""
    name = release.policy_configmap.split("/", 1)[1]
    for doc in docs:
        meta = doc.get("metadata")
        if doc.get("kind") == "ConfigMap" and isinstance(meta, dict) and meta.get("name") == name:
            return {**doc, "metadata": {**meta, "namespace": release.namespace}}
    raise RuntimeError(f"helm template {release.name} renders no ConfigMap {name}")


def ensure_release_rbac(cfg: StackConfig, release: Release) -> None:
    """Apply the release's ServiceAccounts and RBAC, and the tenant policy its scheduler reads
    (idempotent: `kubectl apply`; the policy as LAB_POLICY writes it, whatever a test left)."""
    rendered = render(cfg, release)
    docs = [*(d for d in rendered if d.get("kind") in RBAC_KINDS), policy_of(release, rendered)]
    namespaces = {release.namespace, config.OPS_NAMESPACE} | {
        str(meta["namespace"])
        for d in docs
        if isinstance(meta := d.get("metadata"), dict) and meta.get("namespace")
    }
    namespace_docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in sorted(namespaces)
    ]
    kube.kubectl(cfg, "apply", "-f", "-", stdin=yaml.safe_dump_all([*namespace_docs, *docs]))


def write_kubeconfig(cfg: StackConfig, release: Release, component: str, path: Path) -> Path:
    """A kubeconfig holding a fresh token of the component's ServiceAccount."""
    sa = release.service_account(component)
    token = kube.kubectl(
        cfg, "create", "token", sa, "-n", release.namespace, f"--duration={TOKEN_DURATION}"
    ).strip()
    pki.write_kubeconfig(
        path,
        cfg.apiserver_url,
        cfg.pki_dir / "ca.crt",
        f"system:serviceaccount:{release.namespace}:{sa}",
        token,
    )
    return path


def can_i(cfg: StackConfig, release: Release, component: str, *verb_resource: str) -> bool:
    """`kubectl auth can-i ... --as` the component's ServiceAccount."""
    sa = release.service_account(component)
    out = kube.run_kubectl(
        cfg, "auth", "can-i", *verb_resource, f"--as=system:serviceaccount:{release.namespace}:{sa}"
    )
    return out.stdout.strip() == "yes"
