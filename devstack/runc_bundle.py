"""Run one command from an image with runc alone, as a Pod's container would run it.

No containerd or kubelet: the image's layer is unpacked into an OCI bundle whose config takes
the Pod's securityContext (user, read-only root, no capabilities, no privilege escalation) and
the volumes a chart mounts (an empty /tmp), so an image can be checked before any Node runs it.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from devstack import oci


@dataclass(frozen=True)
class SecurityContext:
    """The parts of a Pod's (merged) securityContext the bundle applies."""

    run_as_user: int
    run_as_group: int
    read_only_root: bool = True
    no_new_privileges: bool = True


def unpack(tarball: Path, bundle: Path) -> dict[str, object]:
    """Unpack the image in `tarball` into `bundle`/rootfs; returns the image's config."""
    _, image_config, layers = oci.read_layout(tarball)
    for layer in layers:
        oci.unpack_layer(layer, bundle / "rootfs")
    return image_config


def run(
    runc: Path,
    bundle: Path,
    argv: list[str],
    env: list[str],
    context: SecurityContext,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """`argv` in the bundle's root, in its own namespaces; runc removes the container when it ends."""
    (bundle / "config.json").write_text(json.dumps(_spec(argv, env, context)))
    container = f"tandem-check-{uuid.uuid4().hex[:8]}"
    state = bundle / "runc-state"
    try:
        return subprocess.run(
            [str(runc), "--root", str(state), "run", "--bundle", str(bundle), container],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    finally:
        # Only left behind when runc itself was interrupted (a timeout): never leave a container.
        subprocess.run(
            [str(runc), "--root", str(state), "delete", "--force", container],
            capture_output=True,
            timeout=30,
        )


def _spec(argv: list[str], env: list[str], context: SecurityContext) -> dict[str, object]:
    no_caps: list[str] = []
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": context.run_as_user, "gid": context.run_as_group},
            "args": argv,
            "env": env,
            "cwd": "/",
            # capabilities: drop [ALL]
            "capabilities": {
                k: no_caps for k in ("bounding", "effective", "inheritable", "permitted", "ambient")
            },
            "noNewPrivileges": context.no_new_privileges,
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        },
        "root": {"path": "rootfs", "readonly": context.read_only_root},
        "hostname": "tandem-check",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
            },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
            # The chart's emptyDir on /tmp, the one writable place under a read-only root.
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", "size=65536k"],
            },
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }
