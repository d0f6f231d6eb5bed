"""What `kubectl tandem` reads: Tandem's Pods, the slurmd Pods (Slurm node <-> Node and lock
state), Nodes, Events and Kueue's Workloads from the user's kubeconfig; optionally Slurm's own view
of jobs and nodes from the syncer's stream."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from tandem import keys, reasons, slurmd
from tandem.cli import kueue
from tandem.discovery import Versioned
from tandem.dra.claims import DraConfig
from tandem.dra.slices import NodeDevices, node_devices
from tandem.dra.taints import taint_rule
from tandem.kube import JSON, KubeClient, KubeError
from tandem.mtls import TlsFiles, channel_credentials
from tandem.slurm import wire
from tandem.slurm.models import JobStatus, Node
from tandem.topology import Topology, from_json
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

SYNCER_TIMEOUT_S = 10.0
# The services' own default (tandem.settings.ClusterSettings.slurmd_namespace).
DEFAULT_SLURMD_NAMESPACE = "slurm"
# Where the chart's syncer publishes Slurm's topology (release `tandem` in namespace `tandem`).
DEFAULT_TOPOLOGY_CONFIGMAP = "tandem/tandem-topology"


class Unreachable(RuntimeError):
    """The cluster or a service could not be asked; the message says which and why."""


@dataclass
class SlurmView:
    """Slurm as the syncer mirrors it."""

    jobs: dict[int, JobStatus] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)


@dataclass
class Facts:
    pods: list[JSON]
    # Slurm node name -> its slurmd Pod; Node name -> Slurm node name.
    slurmd: dict[str, JSON]
    slurm_node_of: dict[str, str]
    nodes: dict[str, JSON]
    slurm: SlurmView | None = None
    # Node name -> its NVIDIA GPUs by Slurm index, each with its device taints (its slice's and the
    # DeviceTaintRules'); or why they cannot be numbered. Only Nodes that publish any.
    gpus: dict[str, NodeDevices | str] = field(default_factory=dict)
    # Kueue's Workloads by the uid of what each admits (tandem.cli.kueue.by_owner); none without
    # Kueue.
    workloads: dict[str, kueue.Workload] = field(default_factory=dict)

    def lock_of(self, slurm_node: str) -> str:
        pod = self.slurmd.get(slurm_node)
        return "" if pod is None else slurmd.lock_state_of(pod).value


def is_tandems(pod: JSON, scheduler_names: set[str]) -> bool:
    """Tandem's Pod: it names one of Tandem's schedulers, or Tandem has marked it."""
    if (pod.get("spec") or {}).get("schedulerName") in scheduler_names:
        return True
    if keys.JOB_ID_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return True
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") in reasons.CONDITION_REASONS
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def gather(
    kube: KubeClient,
    namespace: str | None,
    scheduler_name: str = "",
    syncer_address: str = "",
    tls: TlsFiles | None = None,
    slurmd_namespace: str = DEFAULT_SLURMD_NAMESPACE,
    syncer_server_name: str = "",
) -> Facts:
    """`namespace` None: every namespace. The slurmd Pods are read only in `slurmd_namespace`,
    as the syncer reads them: a labelled Pod elsewhere is a tenant's, not a Slurm node."""
    pods_path = "/api/v1/pods" if namespace is None else f"/api/v1/namespaces/{namespace}/pods"
    candidates = _items(kube, pods_path)
    # A scheduler name is learnt from the Pods Tandem marked: its Pods it has not touched yet
    # (Tandem down, or just created) show too.
    names = {scheduler_name} if scheduler_name else set()
    names |= {str((p.get("spec") or {}).get("schedulerName")) for p in candidates if is_tandems(p, set())}
    pods = [p for p in candidates if is_tandems(p, names)]
    listed = _items(
        kube,
        f"/api/v1/namespaces/{slurmd_namespace}/pods",
        {"labelSelector": f"{keys.SLURMD_POD_LABEL}={keys.SLURMD_POD_LABEL_VALUE}"},
    )
    hosted = {name: dict(pod) for name, pod in slurmd.hosting(listed, slurmd_namespace).items()}
    slurm_node_of = {slurmd.host_of(p): name for name, p in hosted.items() if slurmd.host_of(p)}
    nodes = {n["metadata"]["name"]: n for n in _items(kube, "/api/v1/nodes")}
    slurm = read_syncer(syncer_address, tls, syncer_server_name) if syncer_address else None
    workloads = kueue.by_owner(workloads_in(kube, namespace)) if pods else {}
    return Facts(pods, hosted, slurm_node_of, nodes, slurm, gpus_of(kube, nodes), workloads)


def workloads_in(kube: KubeClient, namespace: str | None) -> list[JSON]:
    """Kueue's Workloads (every namespace's for None); none where Kueue is not installed or the
    user may not read them."""
    try:
        served = kueue.WORKLOADS.served(kube)
        if not served:
            return []
        where = "" if namespace is None else f"/namespaces/{namespace}"
        return _items(kube, f"/apis/{served}{where}/{kueue.WORKLOADS.resource}")
    except KubeError as e:
        if e.status in (401, 403, 404):
            return []
        raise


def topology_of(kube: KubeClient, configmap: str) -> Topology | None:
    """The topology the syncer published (None: none is)."""
    namespace, _, name = configmap.partition("/")
    try:
        data = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}").get("data") or {}
    except KubeError as e:
        if e.not_found:
            return None
        raise
    text = data.get("topology.json")
    return from_json(str(text)) if text else None


def podgroup_topology(kube: KubeClient, namespace: str, name: str) -> tuple[str, ...]:
    """The label keys a PodGroup asks one domain of (spec.schedulingConstraints.topology), in the
    version the cluster serves; none when it is gone or asks nothing."""
    served = Versioned(keys.PODGROUP_GROUP, keys.PODGROUP_RESOURCE, keys.PODGROUP_VERSIONS).served(kube)
    if served is None:
        return ()
    try:
        podgroup = kube.get(f"/apis/{served}/namespaces/{namespace}/{keys.PODGROUP_RESOURCE}/{name}")
    except KubeError as e:
        if e.not_found:
            return ()
        raise
    constraints = (podgroup.get("spec") or {}).get("schedulingConstraints") or {}
    return tuple(
        str(e.get("key")) for e in constraints.get("topology") or [] if isinstance(e, dict) and e.get("key")
    )


class _AnyProduct(dict[str, str]):
    """Every product a GRES type of its own: the CLI numbers and reads devices, it types nothing."""

    def get(self, key: str, default: str | None = None) -> str:  # type: ignore[override]
        return "gpu"


def gpus_of(kube: KubeClient, nodes: dict[str, JSON]) -> dict[str, NodeDevices | str]:
    """Each Node's NVIDIA devices numbered the Slurm way, with their taints; none where the
    cluster serves no resource.k8s.io (or DeviceTaintRules: then the slices' taints only)."""
    slices = _served_items(kube, Versioned(keys.DRA_GROUP, keys.RESOURCE_SLICES, keys.DRA_VERSIONS))
    if not slices:
        return {}
    rules_api = Versioned(keys.DRA_GROUP, keys.DEVICE_TAINT_RULES, keys.DEVICE_TAINT_RULE_VERSIONS)
    rules = [r for raw in _served_items(kube, rules_api) if (r := taint_rule(raw)) is not None]
    config = DraConfig(product_types=_AnyProduct())
    named = {str((s.get("spec") or {}).get("nodeName") or "") for s in slices}
    return {n: node_devices(n, slices, config, rules) for n in sorted(named & set(nodes))}


def _served_items(kube: KubeClient, api: Versioned) -> list[JSON]:
    try:
        served = api.served(kube)
        return _items(kube, f"/apis/{served}/{api.resource}") if served else []
    except KubeError as e:
        if e.status in (401, 403, 404):
            return []  # a user who may not read them sees no GPU health, not an error
        raise


def events_of(kube: KubeClient, kind: str, name: str, namespace: str | None) -> list[JSON]:
    """Events about one object, oldest first."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    path = f"/api/v1/namespaces/{namespace}/events" if namespace else "/api/v1/events"
    events = _items(kube, path, {"fieldSelector": selector})
    return sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def read_syncer(address: str, tls: TlsFiles | None, server_name: str = "") -> SlurmView:
    """The syncer's snapshot of Slurm (every job, every node), asked as an operator. `server_name`
    is the name the syncer's certificate carries when `address` is not it (a port-forward, a
    ClusterIP)."""
    credentials = operator_credentials("syncer", address, tls)
    view = SlurmView()
    try:
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        with grpc.secure_channel(address, credentials, options) as channel:
            stream = syncer_pb2_grpc.SyncerServiceStub(channel).WatchSlurm(
                syncer_pb2.WatchSlurmRequest(batched=True), timeout=SYNCER_TIMEOUT_S
            )
            for msg in stream:
                for change in wire.changes_of(msg):
                    if change.HasField("job"):
                        status = wire.job_from_proto(change.job)
                        view.jobs[status.job_id] = status
                    elif change.HasField("node"):
                        node, _ = wire.node_from_proto(change.node)
                        view.nodes[node.name] = node
                if msg.snapshot_done:
                    stream.cancel()
                    break
    except grpc.RpcError as e:
        hint = server_name_hint("syncer", address, server_name, e)
        raise Unreachable(
            f"cannot read Slurm from the syncer at {address}: {e.code().name}: {e.details()}{hint}"
        ) from e
    return view


def operator_credentials(service: str, address: str, tls: TlsFiles | None) -> grpc.ChannelCredentials:
    """The operator's certificate for dialling `service` ("syncer", "scheduler"): both answer only
    callers Tandem's CA certified, so without one the message says which flags give it."""
    if tls is None:
        raise Unreachable(
            f"the {service} at {address} answers only certified callers: pass --grpc-ca, --grpc-cert and "
            "--grpc-key (or set TANDEM_GRPC_CA, TANDEM_GRPC_CERT, TANDEM_GRPC_KEY) to an operator "
            "certificate from Tandem's CA (the chart's Secret <fullname>-operator-tls)"
        )
    try:
        return channel_credentials(tls)
    except OSError as e:
        raise Unreachable(f"cannot read the operator certificate: {e}") from e


def server_name_hint(service: str, address: str, server_name: str, error: grpc.RpcError) -> str:
    """Which flag is missing when `address` (a port-forward, a ClusterIP) is not a name the
    service's certificate carries: gRPC's own words for it name neither."""
    if server_name or "Hostname Verification" not in (error.details() or ""):
        return ""
    flag, env = f"--{service}-server-name", f"TANDEM_{service.upper()}_SERVER_NAME"
    return (
        f" ({address} is not a name the {service}'s certificate carries: pass {flag}"
        f" <fullname>-{service}.<namespace>.svc, or set {env})"
    )


def _items(kube: KubeClient, path: str, params: dict[str, str] | None = None) -> list[JSON]:
    return list(kube.get(path, params).get("items") or [])
