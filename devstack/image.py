"""Tandem's image, built as the production Dockerfile builds it, without a Docker daemon.

No registry is reachable from the lab, so the base is a Debian root the lab makes from Debian's
archive (as it makes the Slurm roots): bookworm, whose Python is the 3.11 that requirements.lock
is made for. Into a copy of it go the lock's packages (hashes checked) and Tandem's wheel; the
user, environment and command are the Dockerfile's own, read from it, so the two cannot drift.
The result is an OCI layout tarball for `ctr -n k8s.io images import`, cached by a hash of every
input: a second build with nothing changed costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from devstack import build_lock, config, oci, progress, slurm_root
from tandem import buildinfo

DOCKERFILE = config.REPO_ROOT / "Dockerfile"
REPOSITORY = "tandem.local/tandem"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ["python3", "python3-pip", "ca-certificates"]
# What the Dockerfile copies into its build, plus how this module builds: a change to any of them
# is a new image.
INPUTS = [
    "Dockerfile",
    "pyproject.toml",
    "hatch_build.py",
    "requirements.lock",
    "proto",
    "libs",
    "services",
    "cli",
    "devstack/image.py",
    "devstack/oci.py",
]
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Nothing the services read at run time; dropped to keep the image small.
SLIM = [
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/lib/apt/lists",
    "var/cache",
]


def input_files() -> list[str]:
    """The inputs as a fresh clone has them: tracked or new files, never ignored or generated ones."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *INPUTS],
        cwd=config.REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and (config.REPO_ROOT / name).is_file())


def key() -> str:
    h = hashlib.sha256(f"{BASE_SUITE} {' '.join(BASE_PACKAGES)}\n".encode())
    for name in input_files():
        h.update(name.encode() + b"\0" + (config.REPO_ROOT / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def image_name(image_key: str) -> str:
    return f"{REPOSITORY}:{image_key}"


def tarball(image_key: str) -> Path:
    return config.cache_dir() / "images" / f"tandem-{image_key}.oci.tar"


def built() -> Path | None:
    """The image of the current inputs if it has been built, else None."""
    out = tarball(key())
    return out if out.exists() else None


def ensure_image() -> Path:
    """The image's OCI layout tarball for the current inputs, built if missing."""
    image_key = key()
    out = tarball(image_key)
    build_lock.once(out, f"the image {image_name(image_key)}", lambda: _build(image_key, out))
    return out


def _build(image_key: str, out: Path) -> None:
    started = time.monotonic()
    base = ensure_base_root()
    work = config.cache_dir() / "images" / f"build-{image_key}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        root = work / "root"
        with progress.step("copying the base root"):
            subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(root)], check=True, timeout=600)
        with progress.step("building Tandem's wheel"):
            wheel = _build_wheel(work)
        with progress.step("installing requirements.lock (hashes checked) and the wheel"):
            _install(root, wheel)
        _slim(root)
        with progress.step("packing the image"):
            layer = work / "layer.tar"
            oci.tar_root(root, layer)
            # Renamed into place whole: another process sees the tarball complete or not at all.
            partial = work / "image.oci.tar"
            oci.write_layout(partial, image_name(image_key), layer, dockerfile_config())
            partial.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"  {image_name(image_key)} in {out} ({time.monotonic() - started:.0f}s)", flush=True)


def base_root() -> Path:
    tag = hashlib.sha256(" ".join(BASE_PACKAGES).encode()).hexdigest()[:8]
    return config.cache_dir() / "image-base" / f"{BASE_SUITE}-{tag}"


def ensure_base_root() -> Path:
    """Debian `BASE_SUITE` with Python and pip, debootstrapped once per machine."""
    root = base_root()
    build_lock.once(root, "the image's base root", lambda: _build_base_root(root))
    return root


def _build_base_root(root: Path) -> None:
    slurm_root.ensure_debootstrap()
    building = root.with_name(root.name + ".partial")
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    with progress.step(f"debootstrapping Debian {BASE_SUITE} for the image's base (once per machine)"):
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                BASE_SUITE,
                str(building),
                slurm_root.MIRROR,
            ],
            check=True,
            capture_output=True,
            timeout=1200,
        )
    building.rename(root)


def dockerfile_config() -> oci.ImageConfig:
    """USER, ENV and CMD of the Dockerfile's final stage (the one image the chart runs)."""
    user, env, cmd = "", {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, []
    final_stage: list[str] = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("FROM "):
            final_stage = []
        final_stage.append(line)
    for line in final_stage:
        instruction, _, rest = line.partition(" ")
        if instruction == "USER":
            user = rest.strip()
        elif instruction == "ENV":
            for pair in rest.split():
                name, _, value = pair.partition("=")
                env[name] = value
        elif instruction == "CMD":
            cmd = json.loads(rest)
    return oci.ImageConfig(cmd=cmd, user=user, env=[f"{k}={v}" for k, v in env.items()])


def _build_wheel(work: Path) -> Path:
    """Tandem's wheel from a copy of what a clone has, as `COPY` then `pip wheel` in the Dockerfile."""
    src = work / "src"
    commit = buildinfo.for_build(config.REPO_ROOT / "libs" / "tandem")
    for name in input_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(config.REPO_ROOT / name, src / name)
    wheels = work / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        timeout=600,
        # The Dockerfile's build args: the copy has no .git to ask. An image is keyed by its inputs,
        # so a later commit with the same inputs runs this one's code, and says so.
        env={**os.environ, "TANDEM_COMMIT": commit.commit, "TANDEM_DIRTY": commit.dirty},
    )
    (wheel,) = wheels.glob("tandem-*.whl")
    return wheel


def _install(root: Path, wheel: Path) -> None:
    inside = root / "tmp" / "tandem-build"
    inside.mkdir(parents=True)
    shutil.copy2(config.REPO_ROOT / "requirements.lock", inside / "requirements.lock")
    shutil.copy2(wheel, inside / wheel.name)
    # The host's CAs, which may include a proxy's the root's Debian bundle does not have; only for
    # the build, never in the image.
    shutil.copy2(HOST_CA_BUNDLE, inside / "ca.crt")
    # Debian marks its Python externally managed; this root is the image, so pip owns /usr/local.
    env = {
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_FIND_LINKS"},
        "PIP_CERT": "/tmp/tandem-build/ca.crt",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LC_ALL": "C.UTF-8",
        "PIP_BREAK_SYSTEM_PACKAGES": "1",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_ROOT_USER_ACTION": "ignore",
    }
    pip = ["chroot", str(root), "python3", "-m", "pip", "install", "-q"]
    for args in (
        ["--require-hashes", "-r", "/tmp/tandem-build/requirements.lock"],
        ["--no-deps", f"/tmp/tandem-build/{wheel.name}"],
    ):
        subprocess.run([*pip, *args], check=True, env=env, timeout=900)
    shutil.rmtree(inside)


def _slim(root: Path) -> None:
    for rel in SLIM:
        target = root / rel
        if target.is_dir():
            shutil.rmtree(target)
            target.mkdir()
    # The build host's, which debootstrap copied in: emptied, kept as the runtime's mount points.
    for name in ("etc/resolv.conf", "etc/hostname"):
        (root / name).unlink(missing_ok=True)
        (root / name).write_text("")
    # Device nodes debootstrap made: the runtime mounts its own /dev.
    dev = root / "dev"
    shutil.rmtree(dev)
    dev.mkdir()
