"""Issue 20: DEPLOY=chart's real Node (devstack/realnode.py) and the switch that brings it.

What is checked is what running a real kubelet here showed (lab/KUBELET.md): the node IP is the
lab bridge's (never loopback, never 0.0.0.0), the kubelet's settings this host needs, kube-proxy
leaving the host's conntrack settings alone, CoreDNS serving cluster.local only, and a clean-up
plan that removes every chain and cgroup it made and nothing else. The switch leaves plain
`make up` exactly as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devstack import kube, realnode, slurm, stack
from devstack.config import REAL_NODE_IP, StackConfig


def _cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deploy: str | None) -> StackConfig:
    monkeypatch.setenv("TANDEM_STATE_DIR", str(tmp_path))
    for name in ("NODES", "REPLICAS", "SLURM_VERSION"):
        monkeypatch.delenv(name, raising=False)
    if deploy is None:
        monkeypatch.delenv("DEPLOY", raising=False)
    else:
        monkeypatch.setenv("DEPLOY", deploy)
    return StackConfig.from_env()


def _apiserver_argv(cfg: StackConfig, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[list[str]] = []

    class Recorder:
        def start(self, argv: list[str]) -> None:
            seen.append(argv)

    monkeypatch.setattr(kube, "wait_for", lambda *a, **k: None)
    kube.start_apiserver(cfg, Recorder())  # type: ignore[arg-type]
    return seen[0]


def test_plain_make_up_is_the_stack_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(tmp_path, monkeypatch, None)

    assert cfg.deploy == "venv" and not cfg.real_node
    assert cfg.apiserver_url == f"https://127.0.0.1:{cfg.ports.apiserver}"
    argv = _apiserver_argv(cfg, monkeypatch)
    assert "--bind-address=127.0.0.1" in argv and "--advertise-address=127.0.0.1" in argv
    assert "--authorization-mode=RBAC" in argv and "--endpoint-reconciler-type=none" in argv
    assert not [a for a in argv if a.startswith("--kubelet-")]
    # No real Node's process is started, listed or stopped.
    assert not set(realnode.DAEMONS) & set(stack.all_daemons(cfg))


def test_chart_binds_the_apiserver_to_the_node_ip_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, monkeypatch, "chart")

    assert cfg.apiserver_host == REAL_NODE_IP
    assert cfg.apiserver_url == f"https://{REAL_NODE_IP}:{cfg.ports.apiserver}"
    assert cfg.slurmrestd_url_for_pods == f"http://{REAL_NODE_IP}:{cfg.ports.slurmrestd}"
    argv = _apiserver_argv(cfg, monkeypatch)
    binds = [a for a in argv if a.startswith(("--bind-address=", "--advertise-address="))]
    assert binds == [f"--bind-address={REAL_NODE_IP}", f"--advertise-address={REAL_NODE_IP}"]
    assert "--authorization-mode=Node,RBAC" in argv
    assert "--enable-admission-plugins=NodeRestriction" in argv
    assert "--endpoint-reconciler-type=lease" in argv
    assert "--kubelet-preferred-address-types=InternalIP" in argv
    # The real Node's daemons start right after the control plane's (and its add-ons').
    after_kube = len(kube.DAEMONS)
    assert list(stack.all_daemons(cfg))[after_kube : after_kube + len(realnode.DAEMONS)] == list(
        realnode.DAEMONS
    )


def test_slurmrestd_listens_on_the_node_ip_too_for_pods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm, "wait_for", lambda *a, **k: None)

    def argv(deploy: str) -> list[str]:
        seen: list[list[str]] = []

        class Recorder:
            def start(self, argv: list[str], env: object = None) -> None:
                seen.append(argv)

        slurm.start_slurmrestd(_cfg(tmp_path / deploy, monkeypatch, deploy), Recorder())  # type: ignore[arg-type]
        return seen[0]

    port = StackConfig.from_env().ports.slurmrestd
    assert f"127.0.0.1:{port}" in argv("venv") and f"{REAL_NODE_IP}:{port}" not in argv("venv")
    assert {f"127.0.0.1:{port}", f"{REAL_NODE_IP}:{port}"} <= set(argv("chart"))


def test_deploy_is_saved_and_a_running_stack_refuses_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cfg(tmp_path, monkeypatch, "chart").save()

    assert _cfg(tmp_path, monkeypatch, None).deploy == "chart"
    with pytest.raises(SystemExit, match="run `make down` before asking for DEPLOY=venv"):
        _cfg(tmp_path, monkeypatch, "venv")
    with pytest.raises(SystemExit, match="DEPLOY must be one of"):
        _cfg(tmp_path / "other", monkeypatch, "helm")


def test_kubelet_config_has_what_this_host_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(tmp_path, monkeypatch, "chart")
    p = realnode.paths(cfg)
    kc = realnode.kubelet_config(cfg, p)

    assert kc["failCgroupV1"] is False  # else it exits at once on this cgroup v1 host
    assert (kc["cgroupDriver"], kc["failSwapOn"], kc["readOnlyPort"]) == ("cgroupfs", False, 0)
    assert kc["containerRuntimeEndpoint"] == f"unix://{p.containerd.socket}"
    assert (kc["address"], kc["healthzBindAddress"]) == (REAL_NODE_IP, "127.0.0.1")
    assert kc["clusterDNS"] == [REAL_NODE_IP] and kc["clusterDomain"] == "cluster.local"
    assert kc["protectKernelDefaults"] is False  # it would refuse this host's kernel.panic=1
    assert kc["authentication"]["anonymous"] == {"enabled": False}
    assert kc["authorization"] == {"mode": "Webhook"}
    assert kc["registerWithTaints"] == [
        {"key": "tandem.lab/real-node", "value": "true", "effect": "NoSchedule"}
    ]
    assert kc["imageGCHighThresholdPercent"] == 100  # nothing could pull a collected image back
    for key in ("resolvConf", "podLogsDir", "volumePluginDir"):
        assert Path(kc[key]).is_relative_to(tmp_path), key
    argv = realnode.kubelet_argv(cfg, p)
    assert f"--root-dir={p.kubelet_root}" in argv and p.kubelet_root.is_relative_to(tmp_path)
    assert f"--node-ip={REAL_NODE_IP}" in argv and "--hostname-override=host-0" in argv
    assert "--node-labels=tandem.lab/real-node=true" in argv


def test_kube_proxy_and_coredns_stay_on_the_lab_addresses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, monkeypatch, "chart")
    p = realnode.paths(cfg)
    kp = realnode.kube_proxy_config(cfg, p)

    assert kp["mode"] == "iptables" and kp["clusterCIDR"] == "10.88.0.0/24"
    assert kp["healthzBindAddress"].startswith("127.0.0.1:")
    assert kp["metricsBindAddress"].startswith("127.0.0.1:")
    assert kp["nodePortAddresses"] == ["10.88.0.1/32"]
    # Otherwise it turns route_localnet on and rewrites the host's conntrack settings.
    assert kp["iptables"] == {"localhostNodePorts": False}
    assert kp["conntrack"] == {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    corefile = realnode.corefile(cfg, p)
    assert corefile.startswith("cluster.local:53 {")
    assert f"bind {REAL_NODE_IP}" in corefile and "forward" not in corefile
    assert corefile.count("{") == 2  # one server block: no other zone, no upstream


def test_cni_network_is_the_lab_bridge_from_dot_ten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = realnode.paths(_cfg(tmp_path, monkeypatch, "chart"))
    bridge, portmap = realnode.cni_conflist(p)["plugins"]

    assert (bridge["type"], bridge["bridge"], bridge["ipMasq"]) == ("bridge", "tandem0", False)
    (pool,) = bridge["ipam"]["ranges"][0]
    assert pool == {"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10", "gateway": "10.88.0.1"}
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(tmp_path)  # not /var/lib/cni/networks
    assert portmap["type"] == "portmap"


def test_coredns_may_read_only_what_it_serves() -> None:
    role, *bindings = realnode.rbac_manifest()

    verbs = {
        (g, r): rule["verbs"] for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert verbs == {
        ("", "services"): ["list", "watch"],
        ("", "namespaces"): ["list", "watch"],
        ("discovery.k8s.io", "endpointslices"): ["list", "watch"],
    }
    assert {b["roleRef"]["name"] for b in bindings} == {"tandem:coredns", "system:kubelet-api-admin"}


SAVED = """\
# Generated by iptables-save v1.8.9 (nf_tables)
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:SOMEONE-ELSE - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -s 10.1.0.0/16 -j SOMEONE-ELSE
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
COMMIT
"""


def test_cleanup_removes_every_kube_and_cni_chain_and_the_jumps_to_them_only() -> None:
    commands = realnode.iptables_cleanup_commands(lambda family: SAVED if family == "iptables" else "")

    assert commands == [
        ["iptables", "-w", "-t", "filter", "-D", "INPUT", "-j", "KUBE-FIREWALL"],
        [
            "iptables", "-w", "-t", "filter", "-D", "OUTPUT", "-m", "comment", "--comment",
            "kubernetes service portals", "-j", "KUBE-FIREWALL",
        ],
        ["iptables", "-w", "-t", "filter", "-F", "KUBE-FIREWALL"],
        ["iptables", "-w", "-t", "filter", "-F", "KUBE-KUBELET-CANARY"],
        ["iptables", "-w", "-t", "filter", "-X", "KUBE-FIREWALL"],
        ["iptables", "-w", "-t", "filter", "-X", "KUBE-KUBELET-CANARY"],
        ["iptables", "-w", "-t", "nat", "-D", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL",
         "-j", "CNI-HOSTPORT-DNAT"],
        ["iptables", "-w", "-t", "nat", "-F", "CNI-HOSTPORT-DNAT"],
        ["iptables", "-w", "-t", "nat", "-X", "CNI-HOSTPORT-DNAT"],
    ]  # fmt: skip
    assert not realnode.iptables_cleanup_commands(lambda family: "")


def test_cgroups_go_children_first(tmp_path: Path) -> None:
    # rmdir is the only way to remove a cgroup, and only an empty one goes.
    top = tmp_path / "memory" / "kubepods"
    for sub in ("besteffort/pod1/abc", "burstable/pod2", "pod3"):
        (top / sub).mkdir(parents=True)
    (tmp_path / "memory" / "other").mkdir()

    realnode.remove_cgroups(tmp_path)

    assert not top.exists() and (tmp_path / "memory" / "other").exists()
    order = realnode.cgroup_removal_order([top, top / "besteffort", top / "besteffort" / "pod1"])
    assert order[-1] == top and order[0] == top / "besteffort" / "pod1"


def test_host_state_is_recorded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A second `up` after a crash would otherwise take the kubelet's values for the host's own.
    p = realnode.Paths(tmp_path / "node")
    proc = tmp_path / "proc"
    (proc / "kernel").mkdir(parents=True)
    (proc / "kernel" / "panic").write_text("1\n")
    monkeypatch.setattr(realnode, "_sysctl", lambda name: proc / name)
    monkeypatch.setattr(realnode, "HOST_DIRS", (str(tmp_path / "made-by-kubelet"), str(tmp_path)))

    realnode.snapshot_host(p)
    (proc / "kernel" / "panic").write_text("10\n")
    realnode.snapshot_host(p)

    state = json.loads(p.host_state.read_text())
    assert state["sysctls"] == {"kernel/panic": "1"}
    assert state["absent_dirs"] == [str(tmp_path / "made-by-kubelet")]


def test_mounts_are_unmounted_deepest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "30 1 0:1 / / rw - ext4 /dev/vda rw\n"
        "40 30 0:1 /x /lab/node/kubelet rw shared:5 - ext4 /dev/vda rw\n"
        "41 40 0:9 / /lab/node/kubelet/pods/u/volumes/kube\\040api rw - tmpfs tmpfs rw\n"
        "42 30 0:1 /y /lab/nodeother rw - ext4 /dev/vda rw\n"
    )
    real_read = Path.read_text
    monkeypatch.setattr(
        Path,
        "read_text",
        lambda self, *a, **k: real_read(info if str(self) == "/proc/self/mountinfo" else self),
    )

    assert realnode.mounts_under(Path("/lab/node")) == [
        Path("/lab/node/kubelet/pods/u/volumes/kube api"),
        Path("/lab/node/kubelet"),
    ]


def test_make_up_again_leaves_the_watched_files_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A running kube-proxy exits when its config file is written to, same content or not, and
    # containerd reloads the CNI config on every write.
    cfg = _cfg(tmp_path, monkeypatch, "chart")
    p = realnode.paths(cfg)
    realnode.write_files(cfg)
    watched = [p.kube_proxy_config, p.cni_conflist, p.corefile, p.kubelet_config]
    before = {f: f.stat().st_mtime_ns for f in watched}

    realnode.write_files(cfg)

    assert {f: f.stat().st_mtime_ns for f in watched} == before
    assert not list(p.home.rglob("*.partial"))
