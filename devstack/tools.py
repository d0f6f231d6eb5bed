"""The binaries the stack needs, built from Go modules and npm once per machine and cached by version."""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from devstack import build_lock, config, host_packages, progress

TOOLS_SRC = config.REPO_ROOT / "tools"


@dataclass(frozen=True)
class Tool:
    name: str
    version: str
    # Either a Go package to `go install`, or a package built inside one of our tool modules.
    go_install: str | None = None
    module_dir: str | None = None
    build_pkg: str | None = None
    npm_package: str | None = None
    # runc links libseccomp (cgo, build tag `seccomp`); everything else is a static Go binary.
    cgo: bool = False
    tags: str = ""
    # CNI plugins live in a directory of their own (containerd's `bin_dirs`), not on the PATH.
    subdir: str = ""
    # Debian packages the host needs to build it (checked only when it is built) and to run it
    # (checked every time, also when the binary comes from the cache).
    build_debs: tuple[str, ...] = ()
    run_debs: tuple[str, ...] = ()

    @property
    def cached(self) -> Path:
        return config.cache_dir() / "bin" / self.subdir / f"{self.name}-{self.version}"


def _kubernetes(name: str, version: str) -> Tool:
    """A command of the kubernetes module, built in the wrapper module of its minor version
    (tools/kubernetes-v1.37: lab/KUBERNETES.md)."""
    minor = ".".join(version.split(".")[:2])
    return Tool(name, version, module_dir=f"kubernetes-{minor}", build_pkg=f"k8s.io/kubernetes/cmd/{name}")


def kubernetes_tools(version: str = config.DEFAULT_KUBERNETES_VERSION) -> list[Tool]:
    """The control plane of one Kubernetes version, and one kubectl for both (a client one minor
    newer than the apiserver is supported: a fresh machine builds one kubectl less)."""
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    kubectl = _kubernetes("kubectl", config.DEFAULT_KUBERNETES_VERSION)
    return [*(_kubernetes(name, version) for name in names), kubectl]


def lab_tools(version: str = config.DEFAULT_KUBERNETES_VERSION, late: bool = True) -> list[Tool]:
    """What every stack runs, with the control plane of its Kubernetes version; `late=False`: not
    the controllers a stack may take on after it started (LATE_CONTROLLERS)."""
    return [
        *kubernetes_tools(version),
        *(t for t in OTHER_TOOLS if late or t.name not in LATE_CONTROLLERS),
    ]


# The workload controllers only their own tests use (Kueue, LWS; ~4 of a fresh machine's 13
# minutes of builds): a stack can start before they are built and take them on later
# (devstack.stack.start_late_controllers, issue 51).
LATE_CONTROLLERS = ("lws-controller", "kueue-controller")


def late_controller_tools() -> list[Tool]:
    return [t for t in OTHER_TOOLS if t.name in LATE_CONTROLLERS]


OTHER_TOOLS = [
    Tool("lws-controller", config.LWS_VERSION, module_dir="lws", build_pkg="sigs.k8s.io/lws/cmd"),
    Tool(
        "kueue-controller", config.KUEUE_VERSION, module_dir="kueue", build_pkg="sigs.k8s.io/kueue/cmd/kueue"
    ),
    Tool("etcd", config.ETCD_VERSION, module_dir="etcd", build_pkg="."),
    Tool("kwok", config.KWOK_VERSION, go_install="sigs.k8s.io/kwok/cmd/kwok"),
    Tool("helm", config.HELM_VERSION, go_install="helm.sh/helm/v3/cmd/helm"),
    Tool("grpcurl", config.GRPCURL_VERSION, go_install="github.com/fullstorydev/grpcurl/cmd/grpcurl"),
    Tool("buf", config.BUF_VERSION, npm_package="@bufbuild/buf"),
]
TOOLS = lab_tools()
# What `make lint` needs (buf lint, helm lint): built first alone, so lint and the unit tests run in
# minutes on a fresh machine and the rest is built when a stack first starts (issue 51).
LINT_TOOLS = [t for t in OTHER_TOOLS if t.name in ("helm", "buf")]

# What a real Node runs (lab/KUBELET.md): built only when asked for (`python -m devstack
# real-node-tools`, DEPLOY=chart), so plain `make up` and CI's other legs never wait for them.
CNI_SUBDIR = "cni"
# kube-proxy programs Services with iptables and flushes conntrack entries; the kubelet makes its
# own canary and firewall chains. Neither binary is in Debian's base system.
_NETFILTER = ("iptables", "conntrack")


def real_node_tools(version: str = config.DEFAULT_KUBERNETES_VERSION) -> list[Tool]:
    """The real Node's kubelet and kube-proxy of one Kubernetes version, and the rest."""
    return [
        replace(_kubernetes("kubelet", version), run_debs=_NETFILTER),
        replace(_kubernetes("kube-proxy", version), run_debs=_NETFILTER),
        *CONTAINER_TOOLS,
    ]


CONTAINER_TOOLS = [
    *(
        Tool(
            name,
            config.CONTAINERD_VERSION,
            go_install=f"github.com/containerd/containerd/v2/cmd/{name}",
            tags="no_btrfs",
        )
        for name in ("containerd", "ctr", "containerd-shim-runc-v2")
    ),
    Tool(
        "runc",
        config.RUNC_VERSION,
        go_install="github.com/opencontainers/runc",
        cgo=True,
        tags="seccomp",
        # cgo finds libseccomp through pkg-config; the binary links libseccomp.so.2 dynamically.
        build_debs=("gcc", "libc6-dev", "pkg-config", "libseccomp-dev"),
        run_debs=("libseccomp2",),
    ),
    *(
        Tool(
            path.rsplit("/", 1)[1],
            config.CNI_PLUGINS_VERSION,
            # The module keeps its commands under plugins/ (main/, ipam/, meta/ are inside it).
            go_install=f"github.com/containernetworking/plugins/plugins/{path}",
            subdir=CNI_SUBDIR,
        )
        for path in ("main/bridge", "ipam/host-local", "main/loopback", "meta/portmap")
    ),
    Tool("coredns", config.COREDNS_VERSION, go_install="github.com/coredns/coredns"),
]
REAL_NODE_TOOLS = real_node_tools()


def ensure_tools(bin_dir: Path, tools: list[Tool] = TOOLS) -> None:
    """Build what is missing from the cache, then link every tool into `bin_dir` by its plain name."""
    run_debs = [deb for tool in tools for deb in tool.run_debs]
    if run_debs:
        host_packages.ensure(run_debs, "running " + ", ".join(t.name for t in tools if t.run_debs))
    for tool in tools:
        build_lock.once(tool.cached, f"{tool.name} {tool.version}", functools.partial(_build_logged, tool))
        link = bin_dir / tool.subdir / tool.name
        link.parent.mkdir(parents=True, exist_ok=True)
        if (link.is_symlink() or link.exists()) and link.resolve() == tool.cached.resolve():
            continue
        # Replaced in one rename: a background build may link the same tool at the same moment.
        staged = link.with_name(f".{tool.name}.{secrets.token_hex(4)}")
        staged.unlink(missing_ok=True)
        staged.symlink_to(tool.cached)
        staged.replace(link)


def _build_logged(tool: Tool) -> None:
    if tool.build_debs:
        host_packages.ensure(tool.build_debs, f"building {tool.name}")
    with progress.step(f"building {tool.name} {tool.version} (once per machine)"):
        _build(tool)


def _build(tool: Tool) -> None:
    tool.cached.parent.mkdir(parents=True, exist_ok=True)
    partial = tool.cached.with_name(tool.cached.name + ".partial")
    if tool.npm_package:
        prefix = config.cache_dir() / "npm" / f"{tool.name}-{tool.version}"
        subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(prefix),
                f"{tool.npm_package}@{tool.version}",
            ],
            check=True,
        )
        # The npm wrapper only locates the platform binary; link the binary itself.
        candidates = sorted(prefix.glob("node_modules/@bufbuild/buf-linux-*/bin/buf"))
        target = candidates[0] if candidates else prefix / "node_modules" / ".bin" / "buf"
        tool.cached.unlink(missing_ok=True)
        tool.cached.symlink_to(target)
        return
    env = {**os.environ, "CGO_ENABLED": "1" if tool.cgo else "0"}
    if tool.go_install:
        tags = ["-tags", tool.tags] if tool.tags else []
        with tempfile.TemporaryDirectory() as gobin:
            subprocess.run(
                ["go", "install", *tags, *_STRIPPED, f"{tool.go_install}@{tool.version}"],
                check=True,
                env={**env, "GOBIN": gobin},
            )
            shutil.move(str(Path(gobin) / tool.name), partial)
    else:
        assert tool.module_dir and tool.build_pkg
        subprocess.run(
            [
                "go",
                "build",
                "-trimpath",
                "-ldflags",
                _version_ldflags(tool),
                "-o",
                str(partial),
                tool.build_pkg,
            ],
            check=True,
            env=env,
            cwd=TOOLS_SRC / tool.module_dir,
        )
    partial.rename(tool.cached)


# No symbol table, no DWARF, no build paths: binaries a third smaller (kwok 91 -> 64 MB), linked a
# little faster (kwok from an empty build cache: 86 s instead of 90 s here).
_STRIPPED = ("-trimpath", "-ldflags=-s -w")


def _version_ldflags(tool: Tool) -> str:
    """Stamp the Kubernetes version, which `go build` of the module alone leaves at v0.0.0-master."""
    if not tool.version.startswith("v1."):
        return "-s -w"
    major, minor = tool.version[1:].split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return (
        " ".join(
            f"-X {pkg}.{key}={value}"
            for key, value in (
                ("gitVersion", tool.version),
                ("gitMajor", major),
                ("gitMinor", minor),
                ("gitTreeState", "clean"),
            )
        )
        + " -s -w"
    )
