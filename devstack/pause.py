"""The Pod sandbox image of the real Node, built from devstack/pause.c (a static binary)."""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path

from devstack import build_lock, config, host_packages, oci, progress

SOURCE = Path(__file__).with_name("pause.c")
# containerd's `pinned_images.sandbox` names it; kubelet never pulls it (no registry).
REPOSITORY = "tandem.local/pause"


def _tag() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]


def image_name() -> str:
    return f"{REPOSITORY}:{_tag()}"


def tarball() -> Path:
    return config.cache_dir() / "images" / f"pause-{_tag()}.oci.tar"


def ensure_image() -> Path:
    """The pause image's OCI layout tarball, built once per version of its source."""
    out = tarball()
    build_lock.once(out, "the pause image", lambda: _build(out))
    return out


def _build(out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    # A static binary: gcc and libc6-dev's libc.a.
    host_packages.ensure(["gcc", "libc6-dev"], "the pause image")
    with progress.step("building the pause image (once per machine)"), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        binary = root / "pause"
        subprocess.run(
            ["gcc", "-Os", "-static", "-s", "-o", str(binary), str(SOURCE)], check=True, timeout=120
        )
        layer = Path(tmp) / "layer.tar"
        oci.tar_root(root, layer)
        # Renamed into place whole: another process sees the tarball complete or not at all.
        partial = out.with_name(out.name + ".partial")
        oci.write_layout(partial, image_name(), layer, oci.ImageConfig(cmd=[], entrypoint=["/pause"]))
        partial.rename(out)
