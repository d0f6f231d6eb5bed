"""Where the local stack lives, which ports it uses and which versions it pins."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from devstack import installed
from tandem import keys

REPO_ROOT = Path(__file__).resolve().parent.parent

# Pinned versions of everything built from Go modules or npm (lab/KUBERNETES.md).
# Kubernetes 1.37 unless KUBERNETES_VERSION names the other one (CI's second leg runs 1.36, so
# both Workload API versions stay tested); each has its own wrapper module, tools/kubernetes-<minor>.
KUBERNETES_VERSIONS = ("v1.37.2", "v1.36.2")
DEFAULT_KUBERNETES_VERSION = KUBERNETES_VERSIONS[0]
ETCD_VERSION = "v3.6.14"
KWOK_VERSION = "v0.8.0"
LWS_VERSION = "v0.9.0"
# Kueue, the queue in front of Tandem (admission, quota, preemption); built on Go 1.26.
KUEUE_VERSION = "v0.17.0"
HELM_VERSION = "v3.21.4"
GRPCURL_VERSION = "v1.9.3"
BUF_VERSION = "1.75.0"
# CRDs only (PodMonitor, PrometheusRule), for the chart's monitoring objects: no operator runs.
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
# The real Node beside the kwok ones (lab/KUBELET.md); kubelet and kube-proxy are the stack's
# Kubernetes version.
CONTAINERD_VERSION = "v2.4.2"
RUNC_VERSION = "v1.5.2"
CNI_PLUGINS_VERSION = "v1.9.1"
COREDNS_VERSION = "v1.15.0"

# The Kubernetes namespace of the slurmd Pods (one per Node, the shape of a SUNK NodeSet).
SLURM_NAMESPACE = "tandem-slurm"
# Where the tests' node agents run: a namespace the lab's administrator lets share held Nodes
# (the chart's lock.sharingNamespaces); a tenant's namespace (default) may not tolerate the lock.
OPS_NAMESPACE = "tandem-ops"
# The namespace the Tandem services run "in"; the scheduler name derives from it as in the chart.
TANDEM_NAMESPACE = "tandem"
TANDEM_RELEASE = "tandem"
# The chart's tenant policy ConfigMap for that release ("<fullname>-policy"); the tests write it.
POLICY_CONFIGMAP = "tandem-policy"
SLURMD_POD_LABEL = (keys.SLURMD_POD_LABEL, keys.SLURMD_POD_LABEL_VALUE)

# DEPLOY=chart: one real Node, `host-0`, beside the kwok ones (devstack.realnode, lab/KUBELET.md),
# on the lab bridge; its IP (REAL_NODE_IP, the bridge's own address, made before the apiserver
# starts) is how Pods reach the apiserver, slurmrestd and CoreDNS on the host.
REAL_NODE_NAME = "host-0"
REAL_NODE_BRIDGE = "tandem0"
POD_CIDR = "10.88.0.0/24"
SERVICE_CIDR = "10.0.0.0/24"
CLUSTER_DOMAIN = "cluster.local"

GPU_MODEL = "H100_NVLINK_80GB"
GPU_GRES_TYPE = "h100"
GPUS_PER_NODE = 8
# What NVML (and so NVIDIA's DRA driver) calls that GPU, and its memory (lab/GPU.md): the lab's
# ResourceSlices (devstack.resourceslices) describe the same GPUs gres.conf does.
GPU_PRODUCT_NAME = "NVIDIA H100 80GB HBM3"
GPU_MEMORY_MIB = 81559
# One GPU node of the lab (when it has that many nodes) has its GPU 0 in MIG mode, split into 7
# slices of the smallest profile (lab/GPU.md), and its other 7 GPUs whole: Pods and Slurm jobs
# share one physical GPU there, slice by slice.
MIG_NODE = 6
MIG_PROFILE = "1g.10gb"
MIG_SLICES = 7
MIG_MEMORY_MIB = 9984  # 9.75 GiB
CPUS_PER_NODE = 32
MEMORY_MB_PER_NODE = 256_000
KILL_WAIT_SECONDS = 30
# The Node conditions that drain a Slurm node in the lab (the syncer's --health-conditions, the
# chart's syncer.healthConditions): what a GPU health checker would set.
HEALTH_CONDITIONS = ("GpuUnhealthy",)
# The Node labels the syncer writes Slurm's topology from, widest first (issue 38). The lab's
# Nodes carry none until a test labels them: each Node is then a domain of its own, and Slurm's
# tree plugin takes nodes in the order a flat cluster would.
TOPOLOGY_LEVELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/rack")
TOPOLOGY_CONFIGMAP = f"{TANDEM_NAMESPACE}/{TANDEM_RELEASE}-topology"
# How `make up` runs Tandem: from this virtualenv, or installed with helm on the lab's real Node.
DEPLOYS = ("venv", "chart")
# The real Node's address on the lab's bridge (lab/KUBELET.md: a node IP cannot be loopback).
REAL_NODE_IP = "10.88.0.1"
# Slurm 24.11 (Debian trixie) unless SLURM_VERSION says 26.05 (sid): devstack.slurm_root.
DEFAULT_SLURM_VERSION = "24.11"


def hostname() -> str:
    return socket.gethostname().split(".")[0]


def cache_dir() -> Path:
    """Binaries built once per machine, by version; shared by every clone (CI uses fresh clones)."""
    return Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem"))


# One slurmd per node, each on its own port from base + SLURMD_PORT_OFFSET; the scale benchmark
# runs 1,000 of them.
MAX_NODES = 1000
SLURMD_PORT_OFFSET = 100
EPHEMERAL_PORTS_START = 32768


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    slurmctld: int
    slurmrestd: int
    controller_manager: int
    kube_scheduler: int
    lws_webhook: int
    lws_health: int
    # Kueue's admission webhooks and its health probes (devstack.kueue).
    kueue_webhook: int
    kueue_health: int
    slurmd_base: int
    scheduler_grpc: int
    scheduler_health: int
    syncer_grpc: int
    syncer_health: int
    hooks_http: int
    mariadb: int
    slurmdbd: int
    # With two replicas (REPLICAS=2): each syncer's own port behind the leader-routing stand-in for
    # the syncer Service (which keeps syncer_grpc), and the second replicas' ports.
    syncer_grpc_a: int
    syncer_grpc_b: int
    syncer_health_b: int
    scheduler_grpc_b: int
    scheduler_health_b: int
    # DEPLOY=chart's real Node: the kubelet's API (on the node IP) and healthz, kube-proxy's
    # healthz and metrics, and CoreDNS's readiness (all on 127.0.0.1 but the kubelet's API).
    kubelet: int
    kubelet_healthz: int
    kube_proxy_healthz: int
    kube_proxy_metrics: int
    coredns_ready: int
    # The lab's Prometheus (devstack.prometheus).
    prometheus: int

    @classmethod
    def from_base(cls, base: int) -> Ports:
        return cls(
            etcd_client=base + 1,
            etcd_peer=base + 2,
            apiserver=base + 3,
            slurmctld=base + 4,
            slurmrestd=base + 5,
            controller_manager=base + 6,
            kube_scheduler=base + 7,
            lws_webhook=base + 8,
            lws_health=base + 9,
            scheduler_grpc=base + 10,
            scheduler_health=base + 11,
            syncer_grpc=base + 12,
            syncer_health=base + 13,
            hooks_http=base + 14,
            mariadb=base + 16,
            slurmdbd=base + 17,
            syncer_grpc_a=base + 18,
            syncer_grpc_b=base + 19,
            syncer_health_b=base + 20,
            scheduler_grpc_b=base + 21,
            scheduler_health_b=base + 22,
            kubelet=base + 23,
            kubelet_healthz=base + 24,
            kube_proxy_healthz=base + 25,
            kube_proxy_metrics=base + 26,
            coredns_ready=base + 27,
            prometheus=base + 28,
            kueue_webhook=base + 30,
            kueue_health=base + 31,
            slurmd_base=base + SLURMD_PORT_OFFSET,
        )


@dataclass(frozen=True)
class StackConfig:
    """Everything that fixes one local stack; saved in its state dir so later commands agree."""

    nodes: int
    state_dir: Path
    ports: Ports
    # The Slurm major release (devstack.slurm_root.RELEASES) and its preemption plugin.
    slurm_version: str = DEFAULT_SLURM_VERSION
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    preempt: str = "partition_prio"
    hostname: str = field(default_factory=hostname)
    # Replicas of the scheduler and the syncer (1, or 2 electing leaders as a chart's HA install).
    replicas: int = 1
    # How Tandem runs: "venv" (the services as processes of this virtualenv) or "chart" (installed
    # with helm onto the lab's real Node: devstack.chart).
    deploy: str = "venv"

    @classmethod
    def from_env(cls) -> StackConfig:
        state_dir = Path(os.environ.get("TANDEM_STATE_DIR") or default_state_dir()).resolve()
        saved = state_dir / "stack.json"
        if saved.exists():
            data = json.loads(saved.read_text())
            requested = os.environ.get("NODES")
            if requested and int(requested) != data["nodes"]:
                raise SystemExit(
                    f"the stack in {state_dir} was made with NODES={data['nodes']}; "
                    f"run `make down` before asking for NODES={requested}"
                )
            requested_replicas = os.environ.get("REPLICAS")
            if requested_replicas and int(requested_replicas) != data.get("replicas", 1):
                raise SystemExit(
                    f"the stack in {state_dir} runs {data.get('replicas', 1)} replica(s); "
                    f"run `make down` before asking for REPLICAS={requested_replicas}"
                )
            requested_deploy = os.environ.get("DEPLOY")
            if requested_deploy and requested_deploy != data.get("deploy", "venv"):
                raise SystemExit(
                    f"the stack in {state_dir} runs Tandem with DEPLOY={data.get('deploy', 'venv')}; "
                    f"run `make down` before asking for DEPLOY={requested_deploy}"
                )
            requested_slurm = os.environ.get("SLURM_VERSION")
            made_with = data.get("slurm_version", DEFAULT_SLURM_VERSION)
            if requested_slurm and requested_slurm != made_with:
                raise SystemExit(
                    f"the stack in {state_dir} runs Slurm {made_with}; "
                    f"run `make down` before asking for SLURM_VERSION={requested_slurm}"
                )
            requested_kube = os.environ.get("KUBERNETES_VERSION")
            kube_made_with = data.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION)
            if requested_kube and requested_kube != kube_made_with:
                raise SystemExit(
                    f"the stack in {state_dir} runs Kubernetes {kube_made_with}; "
                    f"run `make down` before asking for KUBERNETES_VERSION={requested_kube}"
                )
            return cls(
                nodes=data["nodes"],
                state_dir=state_dir,
                # A stack saved before a port was added still comes down (and up) cleanly.
                ports=Ports(
                    **{
                        **asdict(Ports.from_base(data["ports"]["etcd_client"] - 1)),
                        **_known_ports(data["ports"]),
                    }
                ),
                slurm_version=made_with,
                kubernetes_version=kube_made_with,
                preempt=data.get("preempt", "partition_prio"),
                replicas=data.get("replicas", 1),
                deploy=data.get("deploy", "venv"),
            )
        nodes = int(os.environ.get("NODES", "8"))
        if not 1 <= nodes <= MAX_NODES:
            raise SystemExit(f"NODES must be between 1 and {MAX_NODES}, not {nodes}")
        base = int(os.environ.get("TANDEM_PORT_BASE", "31000"))
        last = base + SLURMD_PORT_OFFSET + nodes
        if last > EPHEMERAL_PORTS_START:
            raise SystemExit(
                f"TANDEM_PORT_BASE={base} with NODES={nodes} reaches port {last}: "
                f"slurmd ports must stay below {EPHEMERAL_PORTS_START}, where Linux picks outgoing ports"
            )
        slurm_version = os.environ.get("SLURM_VERSION") or DEFAULT_SLURM_VERSION
        kubernetes_version = os.environ.get("KUBERNETES_VERSION") or DEFAULT_KUBERNETES_VERSION
        if kubernetes_version not in KUBERNETES_VERSIONS:
            raise SystemExit(
                f"KUBERNETES_VERSION must be one of {', '.join(KUBERNETES_VERSIONS)}, "
                f"not {kubernetes_version!r}"
            )
        replicas = int(os.environ.get("REPLICAS", "1"))
        if replicas not in (1, 2):
            raise SystemExit(f"REPLICAS must be 1 or 2, not {replicas}")
        deploy = os.environ.get("DEPLOY") or "venv"
        if deploy not in DEPLOYS:
            raise SystemExit(f"DEPLOY must be one of {', '.join(DEPLOYS)}, not {deploy!r}")
        return cls(
            nodes=nodes,
            state_dir=state_dir,
            ports=Ports.from_base(base),
            slurm_version=slurm_version,
            kubernetes_version=kubernetes_version,
            replicas=replicas,
            deploy=deploy,
        )

    def save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = {
            "nodes": self.nodes,
            "ports": asdict(self.ports),
            "slurm_version": self.slurm_version,
            "kubernetes_version": self.kubernetes_version,
            "preempt": self.preempt,
            "replicas": self.replicas,
            "deploy": self.deploy,
        }
        (self.state_dir / "stack.json").write_text(json.dumps(data, indent=2))

    # Layout of the state dir.
    @property
    def bin_dir(self) -> Path:
        return self.state_dir / "bin"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def slurm_dir(self) -> Path:
        return self.state_dir / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_dir / "slurm.conf"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env"

    @property
    def real_node(self) -> bool:
        """DEPLOY=chart: the lab runs one real Node (devstack.realnode)."""
        return self.deploy == "chart"

    @property
    def apiserver_host(self) -> str:
        """The one address the apiserver binds: the node IP with a real Node, whose Pods must
        reach it (and never 0.0.0.0); loopback otherwise."""
        return REAL_NODE_IP if self.real_node else "127.0.0.1"

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.apiserver_host}:{self.ports.apiserver}"

    @property
    def slurmrestd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.slurmrestd}"

    @property
    def slurmrestd_url_for_pods(self) -> str:
        """slurmrestd as a Pod on the real Node reaches it: on the lab bridge, not loopback."""
        return f"http://{REAL_NODE_IP}:{self.ports.slurmrestd}"

    @property
    def hooks_url(self) -> str:
        """The hooks gateway as the host reaches it: its own port, or the installed chart's
        Service (devstack.chart writes chart.json)."""
        if self.deploy == "chart":
            return installed.load(self.state_dir).hooks_url
        return f"http://127.0.0.1:{self.ports.hooks_http}"

    @property
    def scheduler_name(self) -> str:
        return f"{TANDEM_NAMESPACE}-{TANDEM_RELEASE}"

    def slurm_node_names(self) -> list[str]:
        return [slurm_node_name(i) for i in range(self.nodes)]


def default_state_dir() -> Path:
    """`.tandem` in the checkout. slurmrestd (as nobody) and placeholder jobs (as the Pods' users)
    read files in it, so every directory above it must let others through; a checkout under a
    private directory (e.g. mktemp's 0700) gets its state under /var/tmp, linked as `.tandem`."""
    local = REPO_ROOT / ".tandem"
    if local.is_symlink() or all(p.stat().st_mode & 0o001 for p in [REPO_ROOT, *REPO_ROOT.parents]):
        return local
    elsewhere = Path("/var/tmp/tandem") / hashlib.sha1(str(REPO_ROOT).encode()).hexdigest()[:12]
    elsewhere.mkdir(parents=True, exist_ok=True)
    for p in (Path("/var/tmp/tandem"), elsewhere):
        p.chmod(0o755)
    if not local.exists():
        local.symlink_to(elsewhere)
    return local


def is_gpu_node(index: int) -> bool:
    """Half the nodes (the even ones) are GPU nodes."""
    return index % 2 == 0


@dataclass(frozen=True)
class GpuGres:
    """One gres.conf record of a lab node: `count` GPUs (or MIG slices) of one GRES type, device
    files `<file><first>`..; records are listed, and so indexed by Slurm, in this order."""

    gres_type: str
    count: int
    file: str  # "nvidia" (a GPU) or "nvidia-cap" (a MIG slice's access file)
    first: int = 0

    @property
    def mig(self) -> bool:
        return self.file == "nvidia-cap"


def gpu_gres(index: int) -> tuple[GpuGres, ...]:
    """A lab node's GPUs as Slurm counts them, in Slurm's index order; () for a CPU node."""
    if not is_gpu_node(index):
        return ()
    if index == MIG_NODE:
        # GPU 0's slices first: Slurm indexes them 0-6, GPUs 1-7 then 7-13.
        return (
            GpuGres(MIG_PROFILE, MIG_SLICES, "nvidia-cap"),
            GpuGres(GPU_GRES_TYPE, GPUS_PER_NODE - 1, "nvidia", first=1),
        )
    return (GpuGres(GPU_GRES_TYPE, GPUS_PER_NODE, "nvidia"),)


# A GPU node whose whole GPUs Slurm may also share out as `gres/shard` (issue 54): SHARDS_PER_GPU
# shards over each of them.
SHARD_NODE = 4
SHARDS_PER_GPU = 16


# A GPU node whose whole GPUs Slurm may share out as `gres/mps` instead (issue 54): MPS_PER_GPU
# over each, Slurm's usual 100 (a share is then a percentage). None: a lab without one.
MPS_NODE: int | None = 2
MPS_PER_GPU = 100


def shards(index: int) -> int:
    """How many shards the node's gres.conf declares (0: none)."""
    return SHARDS_PER_GPU * GPUS_PER_NODE if index == SHARD_NODE and is_gpu_node(index) else 0


def mps(index: int) -> int:
    """How much MPS the node's gres.conf declares (0: none)."""
    return (
        MPS_PER_GPU * GPUS_PER_NODE
        if MPS_NODE is not None and index == MPS_NODE and is_gpu_node(index)
        else 0
    )


def shared_gres(index: int) -> tuple[tuple[str, int], ...]:
    """The node's shared GRES over its GPUs, (name, node total): `(("shard", 128),)`, or none."""
    return tuple((name, count) for name, count in (("shard", shards(index)), ("mps", mps(index))) if count)


def gres_string(index: int) -> str:
    """The node's Gres= (and what slurmrestd's `gres` says): `gpu:h100:8`, `...,shard:h100:128`."""
    # Slurm types a node's shards and MPS after its GPUs (sinfo prints `shard:h100:128` either way).
    shared = [f"{name}:{GPU_GRES_TYPE}:{count}" for name, count in shared_gres(index)]
    return ",".join([*(f"gpu:{g.gres_type}:{g.count}" for g in gpu_gres(index)), *shared])


def slurm_node_name(index: int) -> str:
    return f"{'gpu' if is_gpu_node(index) else 'cpu'}-{index:03d}"


def kube_node_name(index: int) -> str:
    # Deliberately not the Slurm node's name: the mapping goes through the slurmd Pod.
    return f"node-{index:03d}"


def _known_ports(saved: dict[str, int]) -> dict[str, int]:
    """A stack.json written by an older checkout may name ports this one no longer has."""
    names = {f.name for f in fields(Ports)}
    return {k: v for k, v in saved.items() if k in names}
