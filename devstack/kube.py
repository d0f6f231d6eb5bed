"""etcd, kube-apiserver and kwok on 127.0.0.1, and the cluster model: Nodes and their slurmd Pods."""

from __future__ import annotations

import ssl
import subprocess
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from devstack import audit, config, pki, resourceslices
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for
from tandem import keys
from tandem.kube import KubeClient, KubeError

KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# A test Pod carrying this annotation (a Go duration, e.g. "4s") is deleted that long after its graceful
# delete starts: how a Pod that is slow to terminate is simulated.
DELETE_DELAY_ANNOTATION = "tandem.test/delete-delay"


# A test Pod carrying this annotation (a Go duration) finishes (phase Succeeded) that long after it
# runs: how a batch Pod that completes is simulated.
COMPLETE_AFTER_ANNOTATION = "tandem.test/complete-after"


def delete_delay(seconds: float) -> dict[str, str]:
    """Annotations that make kwok take `seconds` to finish the Pod's graceful delete."""
    return {DELETE_DELAY_ANNOTATION: f"{int(seconds * 1000)}ms"}  # a Go duration


def complete_after(seconds: float) -> dict[str, str]:
    """Annotations that make kwok end the Pod successfully `seconds` after it started running."""
    return {COMPLETE_AFTER_ANNOTATION: f"{int(seconds * 1000)}ms"}


# The Workload API (PodGroups, gangs) is alpha in 1.36: on in every component that knows it.
# The Workload API, per Kubernetes minor: its gates (GangScheduling is a gate in 1.36 and a plain
# scheduler plugin in 1.37, which refuses to start on a gate it does not know) and the API
# versions to serve (none of them is on by default). 1.37: PodGroup and Workload beta in v1beta1,
# CompositePodGroup alpha in v1alpha3 (its gate needs TopologyAwareWorkloadScheduling).
WORKLOAD_GATES = {
    "v1.36": "GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true",
    "v1.37": "GenericWorkload=true,WorkloadWithJob=true,CompositePodGroup=true,TopologyAwareWorkloadScheduling=true",
}
WORKLOAD_APIS = {
    "v1.36": "scheduling.k8s.io/v1alpha2=true",
    "v1.37": "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true",
}


def _minor(cfg: StackConfig) -> str:
    return ".".join(cfg.kubernetes_version.split(".")[:2])


def feature_gates(cfg: StackConfig) -> str:
    return f"--feature-gates={WORKLOAD_GATES[_minor(cfg)]}"


# The cloud controllers have nothing to do here; 1.37 no longer has them (and refuses their names).
CONTROLLERS = {
    "v1.36": "*,-cloud-node-lifecycle-controller,-node-route-controller,-service-lb-controller",
    "v1.37": "*",
}
# Above this many Nodes the lab is a scale bench (bench/scale.py), where kwok's Lease renewals lag.
LARGE_LAB_NODES = 200
# Started once built: on a fresh machine a stack runs, and its first tests with it, while these
# are still being built (the tests that use them ask for them, tests/integration/conftest.py).
LATE_CONTROLLERS = ("lws-controller", "kueue-controller")
# In start order.
DAEMONS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    *LATE_CONTROLLERS,
)


def daemons(cfg: StackConfig) -> dict[str, Daemon]:
    return {name: Daemon(name, cfg.run_dir, cfg.log_dir) for name in DAEMONS}


def start_etcd(cfg: StackConfig, daemon: Daemon) -> None:
    p = cfg.ports
    daemon.start(
        [
            str(cfg.bin_dir / "etcd"),
            "--name",
            "default",
            "--data-dir",
            str(cfg.state_dir / "etcd"),
            "--listen-client-urls",
            f"http://127.0.0.1:{p.etcd_client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{p.etcd_client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{p.etcd_peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{p.etcd_peer}",
            "--initial-cluster",
            f"default=http://127.0.0.1:{p.etcd_peer}",
            "--listen-metrics-urls",
            "",
            "--unsafe-no-fsync",
            "--log-level",
            "warn",
        ]
    )
    wait_for("etcd health", lambda: _http_ok(f"http://127.0.0.1:{p.etcd_client}/health"), 30, daemon)


def start_apiserver(cfg: StackConfig, daemon: Daemon) -> None:
    k = cfg.pki_dir
    daemon.start(
        [
            str(cfg.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{cfg.ports.etcd_client}",
            *_address_flags(cfg),
            f"--secure-port={cfg.ports.apiserver}",
            f"--tls-cert-file={k / 'apiserver.crt'}",
            f"--tls-private-key-file={k / 'apiserver.key'}",
            f"--client-ca-file={k / 'ca.crt'}",
            f"--token-auth-file={k / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={k / 'sa.pub'}",
            f"--service-account-signing-key-file={k / 'sa.key'}",
            f"--service-cluster-ip-range={config.SERVICE_CIDR}",
            *_real_node_flags(cfg),
            feature_gates(cfg),
            f"--runtime-config={WORKLOAD_APIS[_minor(cfg)]}",
            *audit.flags(cfg),
            "--profiling=false",
            "-v=1",
        ]
    )
    wait_for("kube-apiserver /readyz", lambda: _apiserver_ready(cfg), 120, daemon)


def _address_flags(cfg: StackConfig) -> list[str]:
    # One address, never 0.0.0.0: the node IP with a real Node (its Pods dial it), else loopback.
    return [f"--bind-address={cfg.apiserver_host}", f"--advertise-address={cfg.apiserver_host}"]


# The apiserver's client certificate towards kubelets (logs, exec), in devstack.pki's directory.
KUBELET_CLIENT_CERT = "apiserver-kubelet-client"


def _real_node_flags(cfg: StackConfig) -> list[str]:
    """What a real kubelet (DEPLOY=chart, devstack.realnode) needs of the apiserver; kwok alone
    needs none of it."""
    if not cfg.real_node:
        return ["--authorization-mode=RBAC", "--endpoint-reconciler-type=none"]
    k = cfg.pki_dir
    return [
        # Nodes may touch only their own Node and what their Pods use, as in production.
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        # The `kubernetes` Service's endpoints follow the advertise address, for in-cluster config.
        "--endpoint-reconciler-type=lease",
        # By Hostname first, the apiserver would ask the host's resolver for "host-0".
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={k / f'{KUBELET_CLIENT_CERT}.crt'}",
        f"--kubelet-client-key={k / f'{KUBELET_CLIENT_CERT}.key'}",
        f"--kubelet-certificate-authority={k / 'ca.crt'}",
    ]


def _component_flags(cfg: StackConfig, name: str, port: int) -> list[str]:
    """What kube-controller-manager and kube-scheduler share: their identity and secure port."""
    k = kubeconfig(cfg, name)
    return [
        f"--kubeconfig={k}",
        f"--authentication-kubeconfig={k}",
        f"--authorization-kubeconfig={k}",
        "--authentication-skip-lookup=true",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cfg.state_dir / name}",
        "--leader-elect=false",
        feature_gates(cfg),
        "--profiling=false",
        "-v=1",
    ]


def start_controller_manager(cfg: StackConfig, daemon: Daemon) -> None:
    k = cfg.pki_dir
    daemon.start(
        [
            str(cfg.bin_dir / "kube-controller-manager"),
            *_component_flags(cfg, "kube-controller-manager", cfg.ports.controller_manager),
            f"--service-account-private-key-file={k / 'sa.key'}",
            f"--root-ca-file={k / 'ca.crt'}",
            f"--cluster-signing-cert-file={k / 'ca.crt'}",
            f"--cluster-signing-key-file={k / 'ca.key'}",
            f"--controllers={CONTROLLERS[_minor(cfg)]}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={config.SERVICE_CIDR}",
            *_node_monitor_flags(cfg),
        ]
    )
    wait_for("kube-controller-manager /healthz", lambda: _healthz(cfg.ports.controller_manager), 60, daemon)


def _node_monitor_flags(cfg: StackConfig) -> list[str]:
    """A lab of many kwok Nodes on two cores: kwok renews their Leases late under load (at 1,000
    Nodes and a burst of Pods, half went NotReady within minutes, and the syncer drained their
    Slurm nodes, as it should for a real NotReady). The grace is what a slow kubelet gets, not
    what Tandem is measured on; small labs keep Kubernetes' default, which the node tests use."""
    return ["--node-monitor-grace-period=10m"] if cfg.nodes > LARGE_LAB_NODES else []


def start_scheduler(cfg: StackConfig, daemon: Daemon) -> None:
    daemon.start(
        [
            str(cfg.bin_dir / "kube-scheduler"),
            *_component_flags(cfg, "kube-scheduler", cfg.ports.kube_scheduler),
        ]
    )
    wait_for("kube-scheduler /healthz", lambda: _healthz(cfg.ports.kube_scheduler), 60, daemon)


def start_kwok(cfg: StackConfig, daemon: Daemon) -> None:
    stages = cfg.state_dir / "kwok-stages.yaml"
    stages.write_text(KWOK_STAGES)
    # A new kwok cannot take over the node Leases of the one before it until they expire.
    core = k8s.CoreV1Api(api(cfg))
    leases = k8s.CoordinationV1Api(core.api_client)
    for node in core.list_node().items:
        try:
            leases.delete_namespaced_lease(node.metadata.name, "kube-node-lease")
        except ApiException as e:
            if e.status != 404:
                raise
    key, value = KWOK_NODE_ANNOTATION
    daemon.start(
        [
            str(cfg.bin_dir / "kwok"),
            f"--kubeconfig={kubeconfig(cfg, 'kwok')}",
            # Without Leases the node-lifecycle controller marks every Node Unknown after 50s.
            "--node-lease-duration-seconds=40",
            f"--config={stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            "--node-ip=127.0.0.1",
            "--cidr=10.128.0.0/12",
            "--server-address=127.0.0.1:0",
            "--enable-crds=",
        ]
    )


def write_kubeconfigs(cfg: StackConfig) -> None:
    for name, (user, _) in pki.USERS.items():
        pki.write_kubeconfig(
            kubeconfig(cfg, name),
            cfg.apiserver_url,
            cfg.pki_dir / "ca.crt",
            user,
            pki.token(cfg.pki_dir, name),
        )


def kubeconfig(cfg: StackConfig, name: str) -> Path:
    """The kubeconfig of a static-token identity (devstack.pki.USERS)."""
    return cfg.kubeconfig if name == "admin" else cfg.state_dir / f"kubeconfig-{name}"


def run_kubectl(
    cfg: StackConfig, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl against the stack, as admin unless another kubeconfig is given."""
    return subprocess.run(
        [str(cfg.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or cfg.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
    )


def kubectl(cfg: StackConfig, *args: str, stdin: str | None = None, kubeconfig: Path | None = None) -> str:
    """Its output; a failure raises with kubectl's own message."""
    out = run_kubectl(cfg, *args, stdin=stdin, kubeconfig=kubeconfig)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def api(cfg: StackConfig) -> k8s.ApiClient:
    return k8s_config.new_client_from_config(config_file=str(cfg.kubeconfig))


def ensure_namespace(core: k8s.CoreV1Api, name: str) -> None:
    """Make a namespace unless it exists, and wait until Pods may be created in it."""
    _create_ignore_exists(
        lambda: core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    )
    wait_for_default_service_account(core, name)


def ensure_cluster_model(cfg: StackConfig) -> None:
    """N kwok Nodes, each hosting one slurmd Pod named after its Slurm node (a SUNK NodeSet)."""
    core = k8s.CoreV1Api(api(cfg))
    # The tests' node agents run in OPS_NAMESPACE, which the lab lets share held Nodes.
    for ns in (config.SLURM_NAMESPACE, config.TANDEM_NAMESPACE, config.OPS_NAMESPACE, "default"):
        _create_ignore_exists(
            lambda ns=ns: core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        )
    wait_for_default_service_account(core, config.SLURM_NAMESPACE)
    existing_nodes = _names(cfg, "/api/v1/nodes")
    existing_pods = _names(cfg, f"/api/v1/namespaces/{config.SLURM_NAMESPACE}/pods")
    for i in range(cfg.nodes):
        node = config.kube_node_name(i)
        if node not in existing_nodes:
            core.create_node(_node_manifest(i))
        slurm_node = config.slurm_node_name(i)
        if slurm_node not in existing_pods:
            core.create_namespaced_pod(config.SLURM_NAMESPACE, slurmd_pod_manifest(i))
    ensure_gpu_devices(cfg)


def _names(cfg: StackConfig, path: str) -> set[str]:
    """The names of what `path` lists. Not through the generated client: it deserialises every
    field of every object, minutes for a 1,000-node lab's slurmd Pods."""
    kube = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    try:
        return {item["metadata"]["name"] for item in kube.get(path).get("items") or []}
    finally:
        kube.close()


def ensure_gpu_devices(cfg: StackConfig) -> None:
    """What NVIDIA's DRA driver would publish: its DeviceClasses and each GPU Node's ResourceSlice,
    from the facts gres.conf is written from (devstack.resourceslices)."""
    kube = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    try:
        base = f"/apis/{keys.DRA_GROUP}/{keys.DRA_VERSIONS[0]}"
        for path, objects in (
            (f"{base}/{keys.DEVICE_CLASSES}", resourceslices.device_classes()),
            (f"{base}/{keys.RESOURCE_SLICES}", resourceslices.resource_slices(cfg.nodes)),
        ):
            for obj in objects:
                try:
                    kube.post(path, obj)
                except KubeError as e:
                    if e.status != 409:
                        raise
    finally:
        kube.close()


def wait_for_default_service_account(core: k8s.CoreV1Api, namespace: str, timeout: float = 30) -> None:
    """The ServiceAccount admission plugin refuses Pods in a namespace until the controller-manager
    made its `default` ServiceAccount (a fraction of a second after the namespace)."""

    def made() -> bool:
        try:
            core.read_namespaced_service_account("default", namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    wait_for(f"the default ServiceAccount of namespace {namespace}", made, timeout)


def cluster_ready(cfg: StackConfig) -> bool:
    core = k8s.CoreV1Api(api(cfg))
    nodes = core.list_node().items
    ready = [
        n for n in nodes if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    ]
    key, value = config.SLURMD_POD_LABEL
    pods = core.list_namespaced_pod(config.SLURM_NAMESPACE, label_selector=f"{key}={value}").items
    running = [p for p in pods if p.status.phase == "Running"]
    if len(ready) >= cfg.nodes and len(running) >= cfg.nodes:
        return True
    _nudge_stuck_pods(core, [p for p in pods if p.status.phase == "Pending"])
    # Raised, not returned: the wait reports the last one when it gives up.
    raise NotReadyYet(
        f"{len(ready)}/{cfg.nodes} Nodes Ready, {len(running)}/{cfg.nodes} slurmd Pods Running "
        f"(of {len(nodes)} Nodes and {len(pods)} slurmd Pods; phases "
        f"{sorted({str(p.status.phase) for p in pods})}; not Running: "
        f"{[f'{p.metadata.name} on {p.spec.node_name}' for p in pods if p.status.phase != 'Running']})"
    )


class NotReadyYet(Exception):
    """What is still missing, for the message of a wait that timed out."""


NUDGE_ANNOTATION = "tandem.test/kwok-nudge"
NUDGE_AFTER_S = 10


def _nudge_stuck_pods(core: k8s.CoreV1Api, pending: list[k8s.V1Pod]) -> None:
    """Touch a Pod kwok left Pending: kwok skips a Pod event while the Pod's Node is read-only to
    it (its Lease not yet taken), and the list it runs once it takes the Lease can race that, so
    the Pod waits for a change that never comes (one slurmd Pod of 8, twice in CI). A changed
    annotation is that change; its value moves every NUDGE_AFTER_S, so one patch per interval."""
    now = datetime.now(UTC)
    bucket = str(int(now.timestamp()) // NUDGE_AFTER_S)
    for pod in pending:
        age = (now - pod.metadata.creation_timestamp).total_seconds()
        if age < NUDGE_AFTER_S or (pod.metadata.annotations or {}).get(NUDGE_ANNOTATION) == bucket:
            continue
        print(f"kwok left Pod {pod.metadata.name} Pending for {age:.0f}s; touching it", flush=True)
        try:
            core.patch_namespaced_pod(
                pod.metadata.name,
                pod.metadata.namespace,
                {"metadata": {"annotations": {NUDGE_ANNOTATION: bucket}}},
            )
        except ApiException as e:
            if e.status != 404:
                raise


# Every kwok Node carries it, and hosts a slurmd Pod: the syncer's admission policy lets it lock
# only Nodes with it (chart value syncer.slurmNodeLabels).
SLURM_HOST_LABEL = ("type", "kwok")


def _node_manifest(i: int) -> dict[str, object]:
    labels = {
        "kubernetes.io/hostname": config.kube_node_name(i),
        "kubernetes.io/os": "linux",
        SLURM_HOST_LABEL[0]: SLURM_HOST_LABEL[1],
    }
    capacity: dict[str, str] = {
        "cpu": str(config.CPUS_PER_NODE),
        "memory": f"{config.MEMORY_MB_PER_NODE}Mi",
        "pods": "110",
    }
    if config.is_gpu_node(i):
        labels["gpu.nvidia.com/model"] = config.GPU_MODEL
        labels["gpu.nvidia.com/class"] = config.GPU_MODEL
        capacity["nvidia.com/gpu"] = str(config.GPUS_PER_NODE)
    key, value = KWOK_NODE_ANNOTATION
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": config.kube_node_name(i), "labels": labels, "annotations": {key: value}},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def slurmd_pod_manifest(i: int, kube_node: str | None = None) -> dict[str, object]:
    """The slurmd Pod of Slurm node `i`, on its own Node unless `kube_node` says otherwise."""
    key, value = config.SLURMD_POD_LABEL
    slurm_node = config.slurm_node_name(i)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": slurm_node,
            "namespace": config.SLURM_NAMESPACE,
            "labels": {key: value, "app.kubernetes.io/component": "compute"},
            "annotations": {keys.LOCK_KEY: keys.LockState.FALSE.value},
        },
        "spec": {
            "nodeName": kube_node or config.kube_node_name(i),
            "hostname": slurm_node,
            "containers": [
                {
                    "name": "slurmd",
                    "image": "slurmd:local",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
            # slurmd must survive its own Node's lock.
            "tolerations": [{"key": keys.LOCK_KEY, "operator": "Exists"}],
        },
    }


def _create_ignore_exists(create: object) -> None:
    try:
        create()  # type: ignore[operator]
    except ApiException as e:
        if e.status != 409:
            raise


def _healthz(port: int) -> bool:
    """A control-plane component's own /healthz (self-signed serving cert, anonymous allowed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=ctx) as r:
        return bool(r.status == 200)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:
        return bool(r.status == 200)


def _apiserver_ready(cfg: StackConfig) -> bool:
    ctx = ssl.create_default_context(cafile=str(cfg.pki_dir / "ca.crt"))
    req = urllib.request.Request(
        f"{cfg.apiserver_url}/readyz",
        headers={"Authorization": f"Bearer {pki.token(cfg.pki_dir, 'admin')}"},
    )
    with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
        return bool(r.status == 200)


# kwok's behaviour: Nodes become Ready; Pods bound to them run; gracefully deleted Pods go away
# (after the DELETE_DELAY_ANNOTATION duration if set).
KWOK_STAGES = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      {{{{ range NodeConditions }}}}
      - lastHeartbeatTime: {{{{ $now | Quote }}}}
        lastTransitionTime: {{{{ $now | Quote }}}}
        message: {{{{ .message | Quote }}}}
        reason: {{{{ .reason | Quote }}}}
        status: {{{{ .status | Quote }}}}
        type: {{{{ .type | Quote }}}}
      {{{{ end }}}}
      addresses:
      - address: 127.0.0.1
        type: InternalIP
      - address: {{{{ NodeName | Quote }}}}
        type: Hostname
      allocatable:
      {{{{ YAML .status.allocatable 1 }}}}
      capacity:
      {{{{ YAML .status.capacity 1 }}}}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: kwok-{{{{ Version }}}}
        containerRuntimeVersion: kwok-{{{{ Version }}}}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.podIP'
      operator: 'DoesNotExist'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "True"
        type: Ready
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "True"
        type: ContainersReady
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      hostIP: {{{{ NodeIPWith .spec.nodeName | Quote }}}}
      podIP: {{{{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}}}
      phase: Running
      startTime: {{{{ $now | Quote }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["{COMPLETE_AFTER_ANNOTATION}"]'
      operator: 'Exists'
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["{COMPLETE_AFTER_ANNOTATION}"]'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $root := . }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: Ready
        reason: PodCompleted
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: ContainersReady
        reason: PodCompleted
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{{{ $now | Quote }}}}
            reason: Completed
            startedAt: {{{{ $root.status.startTime | Quote }}}}
      {{{{ end }}}}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["{DELETE_DELAY_ANNOTATION}"]'
  next:
    finalizers:
      empty: true
    delete: true
"""


def podgroup_api(cfg: StackConfig) -> tuple[str, str]:
    """(group, version) of the PodGroups this stack's apiserver serves, found as the scheduler
    finds it (tandem.discovery): for tests and benchmarks that write PodGroups."""
    from tandem.discovery import Versioned
    from tandem.kube import KubeClient

    podgroups = Versioned(keys.PODGROUP_GROUP, keys.PODGROUP_RESOURCE, keys.PODGROUP_VERSIONS)
    served = podgroups.served(KubeClient.from_kubeconfig(str(cfg.kubeconfig)))
    if served is None:
        raise RuntimeError(f"the apiserver serves no PodGroups (Kubernetes {cfg.kubernetes_version})")
    group, version = served.split("/")
    return group, version
