"""The lab's OCI layout tarballs: what `ctr images import` reads back from them (devstack/oci.py)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import time
from pathlib import Path

from devstack import oci


def _pack(tmp_path: Path, content: bytes) -> Path:
    root = tmp_path / f"root-{len(content)}"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/hello").write_bytes(content)
    layer = tmp_path / "layer.tar"
    oci.tar_root(root, layer)
    out = tmp_path / f"image-{len(content)}.oci.tar"
    oci.write_layout(out, "tandem.local/hello:1", layer, oci.ImageConfig(cmd=["hello"], user="65532:65532"))
    return out


def test_the_image_is_named_for_containerd_and_keeps_user_and_command(tmp_path: Path) -> None:
    name, config, layers = oci.read_layout(_pack(tmp_path, b"hi"))

    assert name == "tandem.local/hello:1"
    assert config["config"]["User"] == "65532:65532"  # type: ignore[index]
    assert config["config"]["Cmd"] == ["hello"]  # type: ignore[index]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layers[0]))) as tar:
        member = tar.extractfile("./usr/bin/hello")
        assert member is not None and member.read() == b"hi"


def test_the_config_names_the_uncompressed_layer_by_its_digest(tmp_path: Path) -> None:
    # containerd refuses a layer whose uncompressed digest is not the config's diff_id.
    _, config, layers = oci.read_layout(_pack(tmp_path, b"hi"))

    diff_id = "sha256:" + hashlib.sha256(gzip.decompress(layers[0])).hexdigest()
    assert config["rootfs"] == {"type": "layers", "diff_ids": [diff_id]}


def test_every_blob_is_stored_under_its_own_digest(tmp_path: Path) -> None:
    with tarfile.open(_pack(tmp_path, b"hi")) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile() and m.name.startswith("blobs/")]
        for name in names:
            data = tar.extractfile(name).read()  # type: ignore[union-attr]
            assert name == "blobs/sha256/" + hashlib.sha256(data).hexdigest()
        assert json.loads(tar.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}  # type: ignore[union-attr]
    assert len(names) == 3  # config, manifest, layer


def test_the_same_root_packs_to_the_same_image(tmp_path: Path) -> None:
    # The image's cache key is its inputs: a rebuild from the same inputs must not change its digest.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _pack(tmp_path / "a", b"same")
    time.sleep(1.1)  # a later build: file times differ
    second = _pack(tmp_path / "b", b"same")
    assert first.read_bytes() == second.read_bytes()
