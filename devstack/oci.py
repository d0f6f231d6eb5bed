"""An OCI image layout tarball of one layer, the shape `ctr -n k8s.io images import` takes.

No registry is reachable from the lab and no Docker daemon runs in it, so every image a real Node
runs is packed here (lab/KUBELET.md): an index naming the image, one config, one gzip layer.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Every file in a layer gets this time, so the same root packs to the same digest.
EPOCH = 0


@dataclass(frozen=True)
class ImageConfig:
    """The part of an image's config the runtime reads (what a Dockerfile's USER, ENV, CMD set)."""

    cmd: list[str]
    user: str = ""
    env: list[str] = field(default_factory=lambda: ["PATH=/usr/local/bin:/usr/bin:/bin"])
    entrypoint: list[str] = field(default_factory=list)
    working_dir: str = "/"


def tar_root(root: Path, out: Path) -> None:
    """An uncompressed, reproducible layer tar of `root` (GNU tar: sorted names, numeric owners,
    one time; PAX for file capabilities in xattrs, without the access and change times it adds)."""
    subprocess.run(
        [
            "tar",
            "--create",
            "--file",
            str(out),
            "--directory",
            str(root),
            "--sort=name",
            "--numeric-owner",
            f"--mtime=@{EPOCH}",
            "--format=posix",
            "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
            "--xattrs",
            ".",
        ],
        check=True,
        timeout=600,
    )


def write_layout(out: Path, name: str, layer_tar: Path, image: ImageConfig) -> str:
    """Write the image `name` with `layer_tar` as its only layer to `out`; returns its manifest digest."""
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        blobs = Path(tmp) / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        diff_id = _sha256_file(layer_tar)
        gz = blobs / "layer.partial"
        with layer_tar.open("rb") as src, gzip.GzipFile(gz, "wb", compresslevel=6, mtime=EPOCH) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        layer_digest = _sha256_file(gz)
        gz.rename(blobs / layer_digest)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "User": image.user,
                "Env": image.env,
                "Entrypoint": image.entrypoint or None,
                "Cmd": image.cmd,
                "WorkingDir": image.working_dir,
            },
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        }
        config_desc = _blob(blobs, "application/vnd.oci.image.config.v1+json", config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": f"sha256:{layer_digest}",
                    "size": (blobs / layer_digest).stat().st_size,
                }
            ],
        }
        manifest_desc = _blob(blobs, "application/vnd.oci.image.manifest.v1+json", manifest)
        # containerd names the imported image after this annotation; the ref name is OCI's own.
        manifest_desc["annotations"] = {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
        }
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [manifest_desc],
        }
        (Path(tmp) / "index.json").write_text(json.dumps(index))
        (Path(tmp) / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w") as tar:
            for entry in ("oci-layout", "index.json", "blobs"):
                tar.add(Path(tmp) / entry, arcname=entry, filter=_reproducible)
        partial.rename(out)
        return str(manifest_desc["digest"])


def read_layout(tarball: Path) -> tuple[str, dict[str, object], list[bytes]]:
    """The image's name, its config and its layers' gzip blobs, read back from a layout tarball."""
    with tarfile.open(tarball) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return member.read()

        index_file = tar.extractfile("index.json")
        assert index_file is not None
        index = json.loads(index_file.read())
        desc = index["manifests"][0]
        manifest = json.loads(blob(desc["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layers = [blob(layer["digest"]) for layer in manifest["layers"]]
        return desc["annotations"]["io.containerd.image.name"], config, layers


def _blob(blobs: Path, media_type: str, doc: Mapping[str, object]) -> dict[str, object]:
    data = json.dumps(doc, sort_keys=True).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _reproducible(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def unpack_layer(layer_gz: bytes, rootfs: Path) -> None:
    """Unpack one gzip layer onto `rootfs` (no whiteouts: the lab's images have a single layer)."""
    rootfs.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["tar", "--extract", "--gzip", "--numeric-owner", "--same-permissions", "-C", str(rootfs)],
        input=layer_gz,
        check=True,
        timeout=300,
    )
