"""DEPLOY=chart's real Node, `host-0`, beside the kwok ones: the lab bridge, containerd, kubelet,
kube-proxy and CoreDNS on this machine, and taking every trace of them away again.

What running here showed (lab/KUBELET.md) shapes it: the node IP cannot be loopback and this
kernel has no dummy links, so the node IP is the CNI bridge's own address, made before the
apiserver binds it; the kubelet refuses cgroup v1 unless told; no registry exists, so the pause and
Tandem images are imported from the lab's tarballs; and the kubelet, kube-proxy and the CNI plugins
change the host (sysctls, iptables chains, mounts, cgroups, directories outside any configured
root), which `stop` and `release_host` undo from a record `prepare_host` takes before the first
start. Every daemon is known by its PID file (devstack.procs), never found by name.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import config, containerd, image, kube, pause, pki, tools
from devstack.config import REAL_NODE_BRIDGE, REAL_NODE_IP, StackConfig
from devstack.procs import Daemon, wait_for

NODE = config.REAL_NODE_NAME
# Pods for the real Node select it by this label and tolerate this taint, so the tests' Pods,
# bound by the default scheduler onto "any Node", never land on it.
LABEL = ("tandem.lab/real-node", "true")
TAINT = {"key": LABEL[0], "value": LABEL[1], "effect": "NoSchedule"}
# In start order.
DAEMONS = ("containerd", "kubelet", "kube-proxy", "coredns")
CNI_NETWORK = "tandem"
COREDNS_USER = "tandem:coredns"
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
# First Pod address; .1 is the bridge (the node IP, and every Pod's gateway).
POD_RANGE_START = config.POD_CIDR.rsplit(".", 1)[0] + ".10"

# Everything the kubelet (its kernel tunables), the CNI bridge plugin (ip_forward) and kube-proxy
# (route_localnet, conntrack) may change, saved before the first start and restored on down.
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
)
# Directories outside the state dir that the kubelet, containerd (shim sockets) and libcni (its
# result cache) make whatever their configuration says; removed on down when the lab made them.
HOST_DIRS = (
    "/run/containerd",
    "/var/lib/cni",
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/netns",
)
# iptables chains of the kubelet (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, which
# `kube-proxy --cleanup` leaves), of kube-proxy, and of the CNI portmap plugin (CNI-HOSTPORT-*,
# which stay after the last Pod's DEL).
CHAIN_PREFIXES = ("KUBE-", "CNI-")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Paths:
    """Where the real Node keeps everything, all under one directory of the state dir."""

    home: Path

    @property
    def containerd(self) -> containerd.Layout:
        return containerd.Layout(self.home / "containerd")

    @property
    def kubelet_root(self) -> Path:
        return self.home / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.home / "pod-logs"

    @property
    def volume_plugins(self) -> Path:
        return self.home / "volume-plugins"

    @property
    def ipam(self) -> Path:
        return self.home / "cni-ipam"

    @property
    def cni_conflist(self) -> Path:
        return self.containerd.cni_conf_dir / f"10-{CNI_NETWORK}.conflist"

    @property
    def resolv_conf(self) -> Path:
        return self.home / "resolv.conf"

    @property
    def kubelet_config(self) -> Path:
        return self.home / "kubelet.yaml"

    @property
    def kube_proxy_config(self) -> Path:
        return self.home / "kube-proxy.yaml"

    @property
    def corefile(self) -> Path:
        return self.home / "Corefile"

    @property
    def host_state(self) -> Path:
        """What the host was like before the first start: sysctls, directories."""
        return self.home / "host-state.json"

    @property
    def tandem_image(self) -> Path:
        """The name of the Tandem image imported into containerd."""
        return self.home / "tandem-image"

    def kubeconfig(self, who: str) -> Path:
        return self.home / f"kubeconfig-{who}"


def paths(cfg: StackConfig) -> Paths:
    return Paths(cfg.state_dir / "node")


def daemons(cfg: StackConfig) -> dict[str, Daemon]:
    return {name: Daemon(name, cfg.run_dir, cfg.log_dir) for name in DAEMONS}


def started(cfg: StackConfig) -> bool:
    """Whether a real Node was (perhaps partly) set up in this state dir and is not yet cleaned."""
    return paths(cfg).host_state.exists()


def tandem_image(cfg: StackConfig) -> str:
    """The Tandem image the real Node has (pull policy Never: no registry)."""
    return paths(cfg).tandem_image.read_text().strip()


# ---- certificates (devstack.pki's CA): identities by CN and O, as kubeadm makes them


def cert(cfg: StackConfig, name: str) -> tuple[Path, Path]:
    return cfg.pki_dir / f"{name}.crt", cfg.pki_dir / f"{name}.key"


CERTS: dict[str, tuple[str, str, str]] = {
    # name: (subject, subjectAltName, extendedKeyUsage)
    "kubelet-client": (f"/O=system:nodes/CN=system:node:{NODE}", "", "clientAuth"),
    "kubelet-serving": (f"/CN=system:node:{NODE}", f"IP:{REAL_NODE_IP},DNS:{NODE}", "serverAuth"),
    # The bootstrap `system:node-proxier` binding names this user.
    "kube-proxy": ("/CN=system:kube-proxy", "", "clientAuth"),
    "coredns": (f"/CN={COREDNS_USER}", "", "clientAuth"),
    # The apiserver towards the kubelet (logs, exec); RBAC below gives it system:kubelet-api-admin.
    kube.KUBELET_CLIENT_CERT: (f"/CN={KUBELET_CLIENT_USER}", "", "clientAuth"),
}


def ensure_certs(cfg: StackConfig) -> None:
    for name, (subject, san, usage) in CERTS.items():
        pki.ensure_cert(cfg.pki_dir, name, subject, san, usage)


# ---- rendered configuration (pure: unit-tested)


def cni_conflist(p: Paths) -> dict[str, Any]:
    """Bridge on the lab bridge (whose address is every Pod's gateway), host-local addresses from
    .10 up with their state under the lab's dir, portmap for hostPorts. No IP masquerade: Pods
    only talk to this host and each other. The loopback plugin containerd runs by itself."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": REAL_NODE_BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                # A Pod reaching itself through a Service comes back through the bridge.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [
                            {
                                "subnet": config.POD_CIDR,
                                "rangeStart": POD_RANGE_START,
                                "gateway": REAL_NODE_IP,
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(p.ipam),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(cfg: StackConfig, p: Paths) -> dict[str, Any]:
    serving_crt, serving_key = cert(cfg, "kubelet-serving")
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This host mounts cgroup v1 (v2 only for systemd): the kubelet exits at once otherwise.
        "failCgroupV1": False,
        # containerd answers cgroupfs (SystemdCgroup = false); the two must agree.
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{p.containerd.socket}",
        "address": REAL_NODE_IP,
        "port": cfg.ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": cfg.ports.kubelet_healthz,
        "tlsCertFile": str(serving_crt),
        "tlsPrivateKeyFile": str(serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(cfg.pki_dir / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [REAL_NODE_IP],
        "clusterDomain": config.CLUSTER_DOMAIN,
        # No upstream resolver exists: Pods get CoreDNS and the cluster's search path only.
        "resolvConf": str(p.resolv_conf),
        "podLogsDir": str(p.pod_logs),
        "volumePluginDir": str(p.volume_plugins),
        # true makes the kubelet refuse to start on this host's values (kernel.panic=1 among
        # them) instead of setting them; it sets them, and down restores what host-state.json saved.
        "protectKernelDefaults": False,
        "registerWithTaints": [TAINT],
        # No registry can give an image back once collected, and a full host disk must not
        # evict the lab's Pods: image GC off, eviction only at the very end.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
            "imagefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }


def kubelet_argv(cfg: StackConfig, p: Paths) -> list[str]:
    return [
        str(cfg.bin_dir / "kubelet"),
        f"--config={p.kubelet_config}",
        f"--kubeconfig={p.kubeconfig('kubelet')}",
        f"--root-dir={p.kubelet_root}",
        f"--node-ip={REAL_NODE_IP}",
        f"--hostname-override={NODE}",
        f"--node-labels={LABEL[0]}={LABEL[1]}",
        "-v=1",
    ]


def kube_proxy_config(cfg: StackConfig, p: Paths) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(p.kubeconfig("kube-proxy"))},
        "hostnameOverride": NODE,
        "bindAddress": REAL_NODE_IP,
        "healthzBindAddress": f"127.0.0.1:{cfg.ports.kube_proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{cfg.ports.kube_proxy_metrics}",
        "mode": "iptables",
        "clusterCIDR": config.POD_CIDR,
        # NodePorts only on the node IP; not on 127.0.0.1, which would need route_localnet=1.
        "nodePortAddresses": [f"{REAL_NODE_IP}/32"],
        "iptables": {"localhostNodePorts": False},
        # 0: leave the host's conntrack table size and timeouts as they are.
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(cfg: StackConfig, p: Paths) -> str:
    """cluster.local from the apiserver, on the node IP only; nothing else is served (there is no
    upstream), so any other name is refused at once rather than timing out."""
    return (
        f"{config.CLUSTER_DOMAIN}:53 {{\n"
        f"    bind {REAL_NODE_IP}\n"
        "    errors\n"
        f"    ready 127.0.0.1:{cfg.ports.coredns_ready}\n"
        f"    kubernetes {config.CLUSTER_DOMAIN} {{\n"
        f"        kubeconfig {p.kubeconfig('coredns')} tandem-local\n"
        "    }\n"
        "}\n"
    )


def rbac_manifest() -> list[dict[str, Any]]:
    """CoreDNS reads Services, EndpointSlices and Namespaces; the apiserver may use the kubelet's
    API (kubeadm binds the same role). The kubelet and kube-proxy need none: the Node authorizer
    and the bootstrap `system:node-proxier` binding cover them."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": COREDNS_USER},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        _binding(COREDNS_USER, COREDNS_USER),
        _binding(f"tandem:{KUBELET_CLIENT_USER}", "system:kubelet-api-admin", KUBELET_CLIENT_USER),
    ]


def _binding(name: str, role: str, user: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user or name}],
    }


def write_files(cfg: StackConfig) -> None:
    p = paths(cfg)
    for d in (p.home, p.kubelet_root, p.pod_logs, p.volume_plugins, p.ipam):
        d.mkdir(parents=True, exist_ok=True)
    containerd.write_config(
        p.containerd, cfg.bin_dir / "runc", cfg.bin_dir / tools.CNI_SUBDIR, pause.image_name()
    )
    _write(p.cni_conflist, json.dumps(cni_conflist(p), indent=2) + "\n")
    _write(p.resolv_conf, "# The lab has no upstream resolver; Pods use CoreDNS (clusterDNS).\n")
    _write(p.kubelet_config, yaml.safe_dump(kubelet_config(cfg, p), sort_keys=False))
    _write(p.kube_proxy_config, yaml.safe_dump(kube_proxy_config(cfg, p), sort_keys=False))
    _write(p.corefile, corefile(cfg, p))
    for who, name, user in (
        ("kubelet", "kubelet-client", f"system:node:{NODE}"),
        ("kube-proxy", "kube-proxy", "system:kube-proxy"),
        ("coredns", "coredns", COREDNS_USER),
    ):
        crt, key = cert(cfg, name)
        pki.write_cert_kubeconfig(
            p.kubeconfig(who), cfg.apiserver_url, cfg.pki_dir / "ca.crt", user, crt, key
        )


def _write(path: Path, text: str) -> None:
    """Write `text` unless the file has it already, in one rename. A running kube-proxy exits
    as soon as its config file is written to ("content of the proxy server's configuration file
    was updated"), even with the same content, and containerd reloads the CNI config on every
    write, which a half-written file fails: `make up` on a running stack must touch neither."""
    if path.exists() and path.read_text() == text:
        return
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.rename(path)


# ---- the host: bridge, route, sysctls, directories


def _sysctl(name: str) -> Path:
    return Path("/proc/sys") / name


def snapshot_host(p: Paths) -> None:
    """Record the sysctls and which host directories exist, once: a second `up` after a crash
    must not take the kubelet's values for the host's own."""
    if p.host_state.exists():
        return
    p.home.mkdir(parents=True, exist_ok=True)
    state = {
        "sysctls": {name: _sysctl(name).read_text().strip() for name in SYSCTLS if _sysctl(name).exists()},
        "absent_dirs": [d for d in HOST_DIRS if not os.path.lexists(d)],
    }
    partial = p.host_state.with_name(p.host_state.name + ".partial")
    partial.write_text(json.dumps(state, indent=2) + "\n")
    partial.rename(p.host_state)


def ensure_bridge() -> None:
    """The lab bridge with the node IP, and the Service range routed into it so a ClusterIP
    that no rule matches never takes the host's default route."""
    if not Path(f"/sys/class/net/{REAL_NODE_BRIDGE}").exists():
        _ip("link", "add", REAL_NODE_BRIDGE, "type", "bridge")
    addrs = _ip("-4", "-o", "addr", "show", "dev", REAL_NODE_BRIDGE).stdout
    if f" {REAL_NODE_IP}/" not in addrs:
        _ip("addr", "add", f"{REAL_NODE_IP}/{config.POD_CIDR.split('/')[1]}", "dev", REAL_NODE_BRIDGE)
    _ip("link", "set", REAL_NODE_BRIDGE, "up")
    _ip("route", "replace", config.SERVICE_CIDR, "dev", REAL_NODE_BRIDGE, "src", REAL_NODE_IP)


def build(cfg: StackConfig) -> None:
    """The real Node's tools and images, built once per machine (cached by version)."""
    tools.ensure_tools(cfg.bin_dir, tools.real_node_tools(cfg.kubernetes_version))
    pause.ensure_image()
    image.ensure_image()


def prepare_host(cfg: StackConfig) -> None:
    """What must exist before the apiserver starts, once `build` made the real Node's tools and
    images: its certificates, the host's record, and the bridge whose address the apiserver binds."""
    ensure_certs(cfg)
    p = paths(cfg)
    snapshot_host(p)
    ensure_bridge_netfilter()
    ensure_bridge()


BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def ensure_bridge_netfilter() -> None:
    """A Pod's reply to another Pod that reached it through a Service crosses the bridge only:
    without br_netfilter iptables never sees it to undo the Service's NAT, and the call hangs.
    Loaded here already; on a machine where it is not, load it (the value is restored on down)."""
    if not BRIDGE_NF.exists():
        subprocess.run(["modprobe", "br_netfilter"], capture_output=True, timeout=30)
    if not BRIDGE_NF.exists():
        raise RuntimeError(
            "the real Node needs the br_netfilter kernel module (Pod -> Service -> Pod traffic): "
            "`modprobe br_netfilter` failed; load it on the host, then `DEPLOY=chart make up` again"
        )
    if BRIDGE_NF.read_text().strip() != "1":
        BRIDGE_NF.write_text("1\n")


# ---- up


class Startup:
    """Bringing the real Node up, in three steps `stack.up` interleaves with the rest: containerd
    and the image imports (no apiserver needed; Tandem's image takes seconds of unpacking, done
    meanwhile), then the kubelet, kube-proxy and CoreDNS (once the apiserver serves), then the
    wait until all of it serves (once Slurm is up)."""

    def __init__(self, cfg: StackConfig, d: Mapping[str, Daemon], need: Callable[[str], bool]) -> None:
        self.cfg, self.d, self.need = cfg, d, need
        p = self.p = paths(cfg)
        write_files(cfg)
        ctr = cfg.bin_dir / "ctr"
        if need("containerd"):
            d["containerd"].start(
                containerd.argv(cfg.bin_dir / "containerd", p.containerd), env=containerd.env(cfg.bin_dir)
            )
            wait_for(
                "containerd to answer", lambda: containerd.answers(ctr, p.containerd), 30, d["containerd"]
            )
        # The kubelet's first sandbox needs the pause image (a few hundred KB); Tandem's can follow.
        _import(ctr, p, pause.image_name(), pause.ensure_image())
        self.tandem_image = image.image_name(image.key())
        tarball = image.tarball(image.key())
        self.importing = _Background(lambda: _import(ctr, p, self.tandem_image, tarball))
        self.kubelet_started = time.monotonic()

    def start_node(self) -> None:
        """The kubelet, kube-proxy and CoreDNS, and CoreDNS's and the apiserver's RBAC."""
        cfg, d, need, p = self.cfg, self.d, self.need, self.p
        kube.kubectl(cfg, "apply", "-f", "-", stdin=yaml.safe_dump_all(rbac_manifest()))
        self.kubelet_started = time.monotonic()
        if need("kubelet"):
            d["kubelet"].start(kubelet_argv(cfg, p))
        if need("kube-proxy"):
            d["kube-proxy"].start(
                [str(cfg.bin_dir / "kube-proxy"), f"--config={p.kube_proxy_config}", "-v=1"]
            )
        if need("coredns"):
            d["coredns"].start([str(cfg.bin_dir / "coredns"), "-conf", str(p.corefile)])

    def wait(self) -> None:
        """Until `host-0` is Ready, kube-proxy healthy, CoreDNS serving and Tandem's image in."""
        cfg, d = self.cfg, self.d
        core = k8s.CoreV1Api(kube.api(cfg))
        wait_for(f"Node {NODE} Ready", lambda: node_ready(core), 60, d["kubelet"])
        ready = time.monotonic() - self.kubelet_started
        wait_for(
            "kube-proxy healthz",
            lambda: _http_ok(f"http://127.0.0.1:{cfg.ports.kube_proxy_healthz}/healthz"),
            30,
            d["kube-proxy"],
        )
        wait_for(
            "CoreDNS ready",
            lambda: _http_ok(f"http://127.0.0.1:{cfg.ports.coredns_ready}/ready"),
            30,
            d["coredns"],
        )
        self.importing.join()
        self.p.tandem_image.write_text(self.tandem_image + "\n")
        print(f"real Node {NODE}: Ready {ready:.1f}s after its kubelet started", flush=True)


def _import(ctr: Path, p: Paths, name: str, tarball: Path) -> None:
    """Import an image's tarball unless containerd has it (a restarted containerd keeps its root)."""
    if name in containerd.image_names(ctr, p.containerd):
        return
    if not tarball.exists():
        raise RuntimeError(f"no tarball of {name} at {tarball}: `make image` builds it")
    started = time.monotonic()
    containerd.import_image(ctr, p.containerd, tarball)
    print(f"  imported {name} into containerd in {time.monotonic() - started:.1f}s", flush=True)


class _Background:
    """A function run on a thread; `join` waits for it and raises what it raised."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                fn()
            except BaseException as e:
                self._error = e

        self._thread = threading.Thread(target=run, name="real-node-import", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def node_ready(core: k8s.CoreV1Api) -> bool:
    node = core.read_node(NODE)
    conditions = {c.type: c.status for c in node.status.conditions or []}
    if conditions.get("Ready") != "True":
        raise kube.NotReadyYet(f"{NODE}: {conditions}")
    return True


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:
        return bool(r.status == 200)


# ---- down


def stop(cfg: StackConfig) -> list[str]:
    """Everything of the real Node but the bridge (which the apiserver and slurmrestd still bind):
    its Pods first, so CNI DEL removes their veths, namespaces and addresses; then the daemons by
    PID, kube-proxy's and the kubelet's iptables chains, mounts and cgroups."""
    d = daemons(cfg)
    p = paths(cfg)
    stopped: list[str] = []
    if d["kubelet"].alive() and d["containerd"].alive():
        with contextlib.suppress(Exception):
            _drain(cfg)
    for name in ("kube-proxy", "coredns", "kubelet"):
        if d[name].stop():
            stopped.append(name)
    kube_proxy = cfg.bin_dir / "kube-proxy"
    if kube_proxy.exists():
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, timeout=60)
    with contextlib.suppress(Exception):
        k8s.CoreV1Api(kube.api(cfg)).delete_node(NODE, _request_timeout=5)
    ctr = cfg.bin_dir / "ctr"
    if not d["containerd"].alive() and _shims_left(p):
        # containerd died with Pods running: their shims and containers outlive it by design, and
        # a containerd started again takes them back (its restart path), so it can remove them.
        d["containerd"].start(
            containerd.argv(cfg.bin_dir / "containerd", p.containerd), env=containerd.env(cfg.bin_dir)
        )
        with contextlib.suppress(RuntimeError):
            wait_for(
                "containerd to answer", lambda: containerd.answers(ctr, p.containerd), 30, d["containerd"]
            )
    if d["containerd"].alive():
        # What the kubelet did not remove (it was stopped, or died): a shim outlives containerd.
        containerd.remove_all_containers(ctr, p.containerd)
    if d["containerd"].stop(timeout=20):
        stopped.append("containerd")
    for argv in iptables_cleanup_commands():
        subprocess.run(argv, capture_output=True, timeout=30)
    unmount_under(p.home)
    remove_cgroups(CGROUP_ROOT)
    return stopped


def _shims_left(p: Paths) -> bool:
    """Whether containerd's state holds a task (each has a directory with its shim's PID)."""
    tasks = p.containerd.state / "io.containerd.runtime.v2.task" / containerd.K8S_NAMESPACE
    return tasks.is_dir() and any(tasks.iterdir())


def _drain(cfg: StackConfig) -> None:
    """Cordon the Node (a ReplicaSet's replacement stays Pending rather than landing here again)
    and delete its Pods, waiting until the kubelet has torn them down."""
    core = k8s.CoreV1Api(kube.api(cfg))
    core.patch_node(NODE, {"spec": {"unschedulable": True}})
    selector = f"spec.nodeName={NODE}"
    for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=1)
    with contextlib.suppress(RuntimeError):
        wait_for(
            f"the Pods on {NODE} to be gone",
            lambda: not core.list_pod_for_all_namespaces(field_selector=selector).items,
            60,
        )


def release_host(cfg: StackConfig) -> None:
    """After every daemon stopped: the route and the bridge, the sysctls as they were, the host
    directories the lab made, and the real Node's directory."""
    p = paths(cfg)
    if Path(f"/sys/class/net/{REAL_NODE_BRIDGE}").exists():
        subprocess.run(
            ["ip", "route", "del", config.SERVICE_CIDR, "dev", REAL_NODE_BRIDGE], capture_output=True
        )
        _ip("link", "del", REAL_NODE_BRIDGE)
    try:
        state = json.loads(p.host_state.read_text())
    except FileNotFoundError:
        state = {"sysctls": {}, "absent_dirs": []}
    for name, value in state["sysctls"].items():
        if _sysctl(name).exists() and _sysctl(name).read_text().strip() != value:
            _sysctl(name).write_text(value + "\n")
    for d in state["absent_dirs"]:
        unmount_under(Path(d))
        shutil.rmtree(d, ignore_errors=True)
    if mounts_under(p.home):
        # Never rmtree across a mount: it would delete whatever is mounted there.
        raise RuntimeError(f"still mounted under {p.home}: {mounts_under(p.home)}")
    shutil.rmtree(p.home, ignore_errors=True)


def iptables_cleanup_commands(
    save: Callable[[str], str] | None = None, prefixes: tuple[str, ...] = CHAIN_PREFIXES
) -> list[list[str]]:
    """The iptables and ip6tables commands that remove every chain named with `prefixes` and
    every rule jumping to one: delete the jumps, flush the chains, then delete them."""
    save = save or _iptables_save
    commands: list[list[str]] = []
    for family in ("iptables", "ip6tables"):
        for table, chains, rules in parse_iptables_save(save(family)):
            ours = [c for c in chains if c.startswith(prefixes)]
            if not ours:
                continue
            for rule in rules:
                words = shlex.split(rule)
                chain = words[1]
                target = _jump_target(words)
                if chain not in ours and target in ours:
                    commands.append([family, "-w", "-t", table, "-D", *words[1:]])
            commands += [[family, "-w", "-t", table, "-F", c] for c in ours]
            commands += [[family, "-w", "-t", table, "-X", c] for c in ours]
    return commands


def parse_iptables_save(text: str) -> list[tuple[str, list[str], list[str]]]:
    """(table, chains, "-A ..." rules) for each table of iptables-save's output."""
    tables: list[tuple[str, list[str], list[str]]] = []
    for line in text.splitlines():
        if line.startswith("*"):
            tables.append((line[1:].strip(), [], []))
        elif line.startswith(":") and tables:
            tables[-1][1].append(line[1:].split()[0])
        elif line.startswith("-A ") and tables:
            tables[-1][2].append(line)
    return tables


def _jump_target(words: list[str]) -> str | None:
    for flag in ("-j", "--jump", "-g", "--goto"):
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return None


def _iptables_save(family: str) -> str:
    out = subprocess.run([f"{family}-save"], capture_output=True, text=True, timeout=30)
    return out.stdout if out.returncode == 0 else ""


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below `root`, deepest first (the order to unmount them in)."""
    root = root.resolve() if root.exists() else root
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # Field 5 is the mount point, with spaces and the like octal-escaped.
        point = Path(line.split()[4].encode().decode("unicode_escape"))
        if point == root or root in point.parents:
            found.append(point)
    return sorted(found, key=lambda m: len(m.parts), reverse=True)


def unmount_under(root: Path) -> None:
    # The kubelet's root dir is bind-mounted onto itself, and shared: what is below it shows up
    # more than once, so unmount until nothing is left (a lazy unmount as the last resort).
    for _ in range(5):
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", str(point)], capture_output=True, timeout=30)
    for point in mounts_under(root):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)


def cgroup_removal_order(dirs: list[Path]) -> list[Path]:
    """Children before parents."""
    return sorted(dirs, key=lambda d: len(d.parts), reverse=True)


def remove_cgroups(cgroup_root: Path, name: str = "kubepods") -> None:
    """The kubelet's `kubepods` tree in every hierarchy, bottom-up (rmdir, the only way to
    remove a cgroup; it fails while a process is in it, which then stays to be seen)."""
    tops = [cgroup_root / name, *(h / name for h in cgroup_root.iterdir() if h.is_dir())]
    for top in tops:
        if not top.is_dir():
            continue
        tree = [Path(dirpath) for dirpath, _, _ in os.walk(top)]
        for d in cgroup_removal_order(tree):
            for _ in range(20):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        break
                    time.sleep(0.1)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {out.stderr.strip()}")
    return out
