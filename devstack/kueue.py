"""Kueue, the queue in front of Tandem, run out of cluster on 127.0.0.1 as the LWS controller is
(devstack.lws): Kueue admits (quota, order, preemption), Tandem and Slurm place.

Its CRDs and webhook manifests come from the pinned module itself (the Go module cache of
tools/kueue), so they always match the binary. Only the webhooks of what this Kueue serves are
installed (its own kinds, batch/job, LeaderWorkerSet and, for LWS groups, Pods), pointed at
127.0.0.1 with the stack's CA; those on Jobs, LeaderWorkerSets and Pods see only objects that name
a queue, so nothing else in the lab depends on Kueue being up. Kueue's own certificate management
(a Secret for an in-cluster Service) is off.

The lab's queue: one ResourceFlavor whose node labels every lab Node carries (Kueue writes them
into an admitted Job's nodeSelector; Tandem passes them to Slurm as the nodes it may use), a
ClusterQueue with a small quota that preempts lower priorities within itself, and a LocalQueue in
`default`.

Kueue's topology-aware scheduling (TAS) is on, and only the second queue uses it: a Topology of the
lab's rack label then the hostname, a ResourceFlavor naming it, and its own ClusterQueue and
LocalQueue. What TAS changes is confined to Workloads admitted on that flavor (Kueue v0.17.0): only
a PodSet assignment with a topology assignment gates a Job's Pods with `kueue.x-k8s.io/topology`
(pkg/podset FromAssignment), and the same gate Kueue's Pod webhook puts on every queued Pod of a
Pod group (an LWS's) is lifted with the admission gate when the assignment has no topology
(pkg/controller/jobs/pod prepare). TAS counts only the Nodes that carry every level's label: the
lab's Nodes carry no rack label until a test labels them (tests/integration/test_kueue.py).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from devstack import config, files, kube
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for

NAMESPACE = "kueue-system"
WEBHOOK_CONFIG_PREFIX = "tandem-lab-kueue-"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# What the lab runs through Kueue; LWS brings Kueue's Pod integration with it (a group of Pods).
FRAMEWORKS = ("batch/job", "leaderworkerset.x-k8s.io/leaderworkerset")
# The webhook paths of those (and of Kueue's own kinds); the rest of the module's manifests name
# integrations this Kueue does not serve, and the apiserver would fail every call to them.
_SERVED_PATHS = ("-kueue-x-k8s-io-", "-batch-v1-job", "-leaderworkerset-x-k8s-io-", "--v1-pod")
_QUEUED_RESOURCES = ("jobs", "leaderworkersets")
_QUEUED = {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}
# Kueue's Pod webhooks see the Pods LWS makes, queued or not: a queued LWS's Pods carry no queue
# label when they are created (Kueue's LWS Pod reconciler adds it, with the group's labels, and
# skips a Pod that already has one), yet must be gated then. A Pod of an LWS not queued passes
# through unchanged. No other Pod depends on Kueue being up.
_LWS_PODS = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}
# Kueue reads a metrics certificate from this fixed path whenever its own certificate management
# is off, even with metrics off (cmd/kueue/main.go): the lab's serving pair is put there.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")

FLAVOR = "tandem-lab"
CLUSTER_QUEUE = "tandem-lab"
LOCAL_QUEUE = "tandem"
LOCAL_QUEUE_NAMESPACE = "default"
# Small on purpose: a few Pods use it up, so a queued Job visibly waits.
QUOTA = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "8"}
FLAVOR_NODE_LABELS = {"type": "kwok"}
# The queue topology-aware scheduling places for: Kueue gives each Pod a Node of one domain, by its
# nodeSelector (the hostname, the lowest level), before Tandem sees it.
TAS_TOPOLOGY = "tandem-lab-racks"
TAS_LEVELS = (config.TOPOLOGY_LEVELS[-1], "kubernetes.io/hostname")
TAS_FLAVOR = "tandem-tas"
TAS_CLUSTER_QUEUE = "tandem-tas"
TAS_LOCAL_QUEUE = "tandem-tas"
# Room for a gang of three Pods of 16 CPUs (more than half a lab Node: one per Node).
TAS_QUOTA = {"cpu": "64", "memory": "64Gi"}


def module_dir() -> Path:
    """sigs.k8s.io/kueue at the pinned version, as `go mod download` left it in the module cache."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kueue@{config.KUEUE_VERSION}"],
        cwd=config.REPO_ROOT / "tools" / "kueue",
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"go mod download sigs.k8s.io/kueue failed: {out.stderr.strip()}")
    return Path(json.loads(out.stdout)["Dir"])


def ensure_installed(cfg: StackConfig) -> None:
    """CRDs, namespace and webhook configurations, applied server-side (idempotent)."""
    source = module_dir() / "config" / "components"
    crds = sorted((source / "crd" / "bases").glob("*.yaml"))
    for crd in crds:
        kube.kubectl(cfg, "apply", "--server-side", "--force-conflicts", "-f", str(crd))
    # Kueue sets up its indexes at start and exits on a kind discovery does not serve yet.
    names = [f"crd/{yaml.safe_load(crd.read_text())['metadata']['name']}" for crd in crds]
    kube.kubectl(cfg, "wait", "--for=condition=Established", "--timeout=60s", *names)
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
    served = []
    for hook in manifest["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        if not any(part in path for part in _SERVED_PATHS):
            continue
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{cfg.ports.kueue_webhook}{path}",
            "caBundle": ca_bundle,
        }
        resources = [r for rule in hook.get("rules", []) for r in rule.get("resources", [])]
        if "pods" in resources:
            hook["objectSelector"] = _LWS_PODS
        elif any(r in resources for r in _QUEUED_RESOURCES):
            hook["objectSelector"] = _QUEUED
        served.append(hook)
    manifest["webhooks"] = served
    return manifest


def write_config(cfg: StackConfig) -> Path:
    cert_dir = cfg.state_dir / "kueue-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    for directory in (cert_dir, METRICS_CERT_DIR):
        directory.mkdir(parents=True, exist_ok=True)
        for src, dst in (("kueue-webhook.crt", "tls.crt"), ("kueue-webhook.key", "tls.key")):
            files.write_whole(directory / dst, (cfg.pki_dir / src).read_bytes())
    path = cfg.state_dir / "kueue-config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "namespace": NAMESPACE,
                "manageJobsWithoutQueueName": False,
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {"host": "127.0.0.1", "port": cfg.ports.kueue_webhook, "certDir": str(cert_dir)},
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{cfg.ports.kueue_health}"},
                # The visibility API would listen on every address (and want an APIService).
                # TAS is on for the queue that asks for it (TAS_CLUSTER_QUEUE); the others' Pods
                # never wait for its gate (module docstring).
                "featureGates": {"VisibilityOnDemand": False, "TopologyAwareScheduling": True},
                "integrations": {"frameworks": list(FRAMEWORKS)},
            }
        )
    )
    return path


def start(cfg: StackConfig, daemon: Daemon) -> None:
    ensure_installed(cfg)
    daemon.start(
        [
            str(cfg.bin_dir / "kueue-controller"),
            f"--config={write_config(cfg)}",
            f"--kubeconfig={kube.kubeconfig(cfg, 'kueue-controller')}",
            "--zap-log-level=info",
        ]
    )
    wait_for("kueue-controller /readyz", lambda: _ready(cfg), 90, daemon)
    ensure_queues(cfg)


_API = "kueue.x-k8s.io/v1beta2"


def queue_objects() -> list[dict[str, Any]]:
    """The lab's queues: ResourceFlavor, ClusterQueue and LocalQueue of the plain queue, then the
    Topology, ResourceFlavor, ClusterQueue and LocalQueue of the one TAS places for."""
    plain = _queue(
        FLAVOR,
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        QUOTA,
        {"nodeLabels": FLAVOR_NODE_LABELS},
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    topology = {
        "apiVersion": _API,
        "kind": "Topology",
        "metadata": {"name": TAS_TOPOLOGY},
        "spec": {"levels": [{"nodeLabel": level} for level in TAS_LEVELS]},
    }
    tas = _queue(
        TAS_FLAVOR,
        TAS_CLUSTER_QUEUE,
        TAS_LOCAL_QUEUE,
        TAS_QUOTA,
        {"nodeLabels": FLAVOR_NODE_LABELS, "topologyName": TAS_TOPOLOGY},
    )
    return [*plain, topology, *tas]


def _queue(
    flavor: str,
    cluster_queue: str,
    local_queue: str,
    quota: dict[str, str],
    flavor_spec: dict[str, Any],
    preemption: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A ResourceFlavor, a ClusterQueue giving `quota` of it to every namespace, and a LocalQueue
    in `default` feeding it."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [
                    {"name": flavor, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]}
                ],
            }
        ],
    }
    if preemption:
        spec["preemption"] = preemption
    return [
        {"apiVersion": _API, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": flavor_spec},
        {
            "apiVersion": _API,
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": spec,
        },
        {
            "apiVersion": _API,
            "kind": "LocalQueue",
            "metadata": {"name": local_queue, "namespace": LOCAL_QUEUE_NAMESPACE},
            "spec": {"clusterQueue": cluster_queue},
        },
    ]


def ensure_queues(cfg: StackConfig) -> None:
    # Kueue's own webhooks validate these: applied once it serves them.
    kube.kubectl(
        cfg,
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(queue_objects()),
    )


def release_host() -> None:
    """Remove the metrics certificate put where Kueue reads it (the stack's only file there)."""
    shutil.rmtree(METRICS_CERT_DIR.parent.parent, ignore_errors=True)


def _ready(cfg: StackConfig) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{cfg.ports.kueue_health}/readyz", timeout=2) as r:
        return bool(r.status == 200)
