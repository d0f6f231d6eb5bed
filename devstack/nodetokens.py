"""The lab's share of kubelet's work for node credentials (tandem.nodetoken): each slurmd Pod's
token for the audience tandem-hooks, bound to that Pod, written where its Slurm node's prolog and
epilog find it.

In a cluster kubelet projects the token into the slurmd Pod and rotates it. The lab's slurmds are
host processes sharing one filesystem, so the tokens are minted here (TokenRequest, as the admin)
into `<slurm_dir>/hooks-tokens/<Slurm node>`, root only; hooks.env names the directory and a
script picks its own node's file by SLURMD_NODENAME. `make up` calls `refresh`, and so does a test
that replaces a slurmd Pod: a token dies with the Pod it was bound to.
"""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client as k8s

from devstack import config, kube, services
from devstack.config import StackConfig
from tandem import keys, nodetoken, slurmd

# A lab session's length and then some; minted again when less than half is left.
LIFETIME_SECONDS = 7 * 86400


def path(cfg: StackConfig, slurm_node: str) -> Path:
    return services.hooks_token_dir(cfg) / slurm_node


def read(cfg: StackConfig, slurm_node: str) -> str:
    """The node's credential, as its prolog reads it."""
    return path(cfg, slurm_node).read_text().strip()


def _fresh(token_file: Path, pod_uid: str) -> bool:
    try:
        claims = nodetoken.unverified_claims(token_file.read_text().strip()) or {}
    except OSError:
        return False
    bound = ((claims.get("kubernetes.io") or {}).get("pod") or {}).get("uid")
    return bound == pod_uid and float(claims.get("exp", 0)) - time.time() > LIFETIME_SECONDS / 2


def refresh(cfg: StackConfig) -> list[str]:
    """Mint the token of every slurmd Pod whose file is missing, bound to an older Pod, or past half
    its life; drop the files of Slurm nodes without a Pod. Returns the nodes minted."""
    core = k8s.CoreV1Api(kube.api(cfg))
    key, value = config.SLURMD_POD_LABEL
    pods = core.list_namespaced_pod(config.SLURM_NAMESPACE, label_selector=f"{key}={value}").items
    d = services.hooks_token_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    minted, present = [], set()
    for pod in pods:
        name = slurmd.slurm_node_of({"metadata": _meta(pod)}, config.SLURM_NAMESPACE)
        if name is None:
            continue
        present.add(name)
        if _fresh(path(cfg, name), pod.metadata.uid):
            continue
        request = k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(
                audiences=[keys.HOOKS_TOKEN_AUDIENCE],
                expiration_seconds=LIFETIME_SECONDS,
                bound_object_ref=k8s.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
                ),
            )
        )
        account = pod.spec.service_account_name or "default"
        answer = core.create_namespaced_service_account_token(account, config.SLURM_NAMESPACE, request)
        services.publish(path(cfg, name), answer.status.token, mode=0o400)
        minted.append(name)
    for stale in d.iterdir():
        if stale.name not in present and not stale.name.startswith("."):
            stale.unlink(missing_ok=True)
    return minted


def _meta(pod: k8s.V1Pod) -> dict[str, object]:
    meta = pod.metadata
    return {"name": meta.name, "namespace": meta.namespace, "labels": meta.labels or {}}
