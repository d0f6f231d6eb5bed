"""Issue 20: containerd for the lab's real Node (devstack/containerd.py).

The configuration is checked for the traps running here met (lab/KUBELET.md). The smoke test
starts containerd alone with its own root, state and socket, imports the pause image and, when
built, Tandem's image, stops it by PID and checks nothing of it is left. It needs root and
`make real-node-tools` (and `make image` for Tandem's image); skipped without.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import containerd, image, pause, tools

BIN = {t.name: t.cached for t in tools.REAL_NODE_TOOLS}
NEEDED = ("containerd", "ctr", "containerd-shim-runc-v2", "runc")


def _config(home: Path) -> dict[str, object]:
    layout = containerd.Layout(home)
    return tomllib.loads(
        containerd.config_toml(layout, Path("/x/runc"), Path("/x/cni"), "tandem.local/pause:1")
    )


def test_the_socket_is_set_where_version_4_reads_it() -> None:
    # A top-level [grpc] address is silently ignored with version 4: containerd would then serve
    # on /run/containerd/containerd.sock, shared with anything else on the host.
    config = _config(Path("/lab/ctd"))

    assert config["version"] == 4
    assert "grpc" not in config
    plugins: dict[str, dict[str, object]] = config["plugins"]  # type: ignore[assignment]
    assert plugins["io.containerd.server.v1.grpc"]["address"] == "/lab/ctd/containerd.sock"
    assert plugins["io.containerd.server.v1.ttrpc"]["address"] == "/lab/ctd/containerd.sock.ttrpc"
    assert (config["root"], config["state"]) == ("/lab/ctd/root", "/lab/ctd/state")


def test_sandboxes_can_start_without_cap_sys_resource_and_without_a_registry() -> None:
    plugins: dict[str, dict[str, object]] = _config(Path("/lab/ctd"))["plugins"]  # type: ignore[assignment]
    runtime: dict[str, object] = plugins["io.containerd.cri.v1.runtime"]

    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["disable_apparmor"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]  # type: ignore[index]
    assert runc["options"] == {"BinaryName": "/x/runc", "Root": "/lab/ctd/runc", "SystemdCgroup": False}
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["cni"] == {"bin_dirs": ["/x/cni"], "conf_dir": "/lab/ctd/cni/net.d"}
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"] == {"sandbox": "tandem.local/pause:1"}
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True


@pytest.fixture
def home() -> Iterator[Path]:
    # Short: a unix socket path has at most 107 bytes.
    where = Path(tempfile.mkdtemp(prefix="tandem-ctd-"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="containerd needs root")
@pytest.mark.skipif(
    not all(BIN[n].exists() for n in NEEDED) or not pause.tarball().exists(),
    reason="no containerd or pause image: `make real-node-tools` builds them",
)
def test_containerd_alone_imports_the_labs_images_and_leaves_nothing_when_stopped(home: Path) -> None:
    layout = containerd.Layout(home)
    run_containerd_existed = Path("/run/containerd").exists()
    bin_dir = home / "bin"
    bin_dir.mkdir()
    for name in NEEDED:
        (bin_dir / name).symlink_to(BIN[name])
    containerd.write_config(layout, bin_dir / "runc", home / "cni-bin", pause.image_name())
    pid = containerd.start(bin_dir / "containerd", layout, bin_dir, home / "containerd.log")
    try:
        containerd.import_image(bin_dir / "ctr", layout, pause.tarball())
        expected = [pause.image_name()]
        tandem = image.built()
        if tandem is not None:
            containerd.import_image(bin_dir / "ctr", layout, tandem)
            expected.append(image.image_name(image.key()))
        names = containerd.image_names(bin_dir / "ctr", layout)
    finally:
        containerd.stop(pid)

    assert all(name in names for name in expected), names
    assert not Path(f"/proc/{pid}").exists()
    assert not [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(home) in line]
    # It served where its config said, not on the host's default socket.
    assert Path("/run/containerd").exists() == run_containerd_existed
