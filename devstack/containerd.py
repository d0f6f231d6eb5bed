"""containerd for the lab's real Node: its configuration, and starting and stopping it by PID.

The configuration carries what running here showed (lab/KUBELET.md): with `version = 4` a
top-level `[grpc] address` is silently ignored, so the sockets go under the server plugins; this
sandbox has no CAP_SYS_RESOURCE, so runc may not lower oom_score_adj (`restrict_oom_score_adj`);
no AppArmor, cgroupfs (the kubelet takes its cgroup driver from containerd's answer), no NRI, and
the sandbox image is the lab's own pause image, pinned, since no registry can be reached.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Kubernetes' containerd namespace: the kubelet only sees images imported there.
K8S_NAMESPACE = "k8s.io"


@dataclass(frozen=True)
class Layout:
    """Where one containerd keeps everything of its own; one directory per lab."""

    home: Path

    @property
    def root(self) -> Path:
        return self.home / "root"

    @property
    def state(self) -> Path:
        return self.home / "state"

    @property
    def socket(self) -> Path:
        return self.home / "containerd.sock"

    @property
    def config(self) -> Path:
        return self.home / "config.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.home / "cni" / "net.d"

    @property
    def runc_root(self) -> Path:
        """runc's own state (else /run/containerd/runc/<namespace>, outside the lab's dirs)."""
        return self.home / "runc"


def config_toml(layout: Layout, runc: Path, cni_bin_dir: Path, sandbox_image: str) -> str:
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    return "\n".join(
        [
            "version = 4",
            f"root = {_quote(layout.root)}",
            f"state = {_quote(layout.state)}",
            "",
            # Not a top-level [grpc]: version 4 ignores it and serves on /run/containerd.
            "[plugins.'io.containerd.server.v1.grpc']",
            f"  address = {_quote(layout.socket)}",
            "[plugins.'io.containerd.server.v1.ttrpc']",
            f"  address = {_quote(layout.socket.with_name(layout.socket.name + '.ttrpc'))}",
            "[plugins.'io.containerd.nri.v1.nri']",
            "  disable = true",
            "",
            f"[{cri}]",
            "  disable_apparmor = true",
            # No CAP_SYS_RESOURCE here: every sandbox fails in runc init without it.
            "  restrict_oom_score_adj = true",
            # Pods' network namespaces under `state`, not /var/run/netns: unmounted with the rest.
            "  netns_mounts_under_state_dir = true",
            f"[{cri}.containerd]",
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            f"  BinaryName = {_quote(runc)}",
            f"  Root = {_quote(layout.runc_root)}",
            "  SystemdCgroup = false",
            f"[{cri}.cni]",
            f"  bin_dirs = [{_quote(cni_bin_dir)}]",
            f"  conf_dir = {_quote(layout.cni_conf_dir)}",
            "",
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"  sandbox = {_quote(sandbox_image)}",
            "",
        ]
    )


def write_config(layout: Layout, runc: Path, cni_bin_dir: Path, sandbox_image: str) -> Path:
    layout.home.mkdir(parents=True, exist_ok=True)
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(config_toml(layout, runc, cni_bin_dir, sandbox_image))
    return layout.config


def argv(containerd: Path, layout: Layout) -> list[str]:
    return [str(containerd), "--config", str(layout.config)]


def env(bin_dir: Path) -> dict[str, str]:
    # The shim (containerd-shim-runc-v2) is found on containerd's PATH.
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def answers(ctr: Path, layout: Layout) -> bool:
    """Whether containerd serves on its socket."""
    return layout.socket.exists() and _ctr(ctr, layout, "version").returncode == 0


def start(containerd: Path, layout: Layout, bin_dir: Path, log: Path, timeout: float = 30) -> int:
    """Start containerd from `layout.config`; returns its PID once its socket answers."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv(containerd, layout),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env(bin_dir),
            start_new_session=True,
        )
    ctr = containerd.with_name("ctr")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"containerd exited with {proc.returncode}; see {log}")
        if answers(ctr, layout):
            return proc.pid
        time.sleep(0.2)
    stop(proc.pid)
    raise RuntimeError(f"containerd did not answer on {layout.socket} within {timeout:.0f}s; see {log}")


def stop(pid: int, timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL after `timeout`; reaps it when it is our child."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    while _alive(pid):
        time.sleep(0.1)


def import_image(ctr: Path, layout: Layout, tarball: Path, timeout: float = 300) -> str:
    """Import an OCI layout tarball into Kubernetes' namespace; returns ctr's answer."""
    out = _ctr(ctr, layout, "images", "import", "--local", str(tarball), timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"ctr images import {tarball} failed: {out.stderr.strip()}")
    return out.stdout


def image_names(ctr: Path, layout: Layout) -> list[str]:
    out = _ctr(ctr, layout, "images", "list", "--quiet")
    if out.returncode != 0:
        raise RuntimeError(f"ctr images list failed: {out.stderr.strip()}")
    return out.stdout.split()


def remove_all_containers(ctr: Path, layout: Layout) -> list[str]:
    """Kill and delete every task and container of Kubernetes' namespace, Pod sandboxes
    included; returns their ids. A shim outlives containerd by design and exits only when its
    tasks are deleted: what the kubelet has not removed yet would outlive the lab."""
    listed = _ctr(ctr, layout, "containers", "list", "--quiet")
    if listed.returncode != 0:
        raise RuntimeError(f"ctr containers list failed: {listed.stderr.strip()}")
    ids = listed.stdout.split()
    for cid in ids:
        _ctr(ctr, layout, "tasks", "kill", "--signal", "SIGKILL", cid)
    for cid in ids:
        # `tasks delete` waits for the kill to land only with --force on a running task.
        _ctr(ctr, layout, "tasks", "delete", "--force", cid)
        _ctr(ctr, layout, "containers", "delete", cid)
    return ids


def _ctr(ctr: Path, layout: Layout, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ctr), "--address", str(layout.socket), "--namespace", K8S_NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _alive(pid: int) -> bool:
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    return reaped == 0


def _quote(path: Path | str) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'
