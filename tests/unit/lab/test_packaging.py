"""The wheel a platform team builds (or a container image installs) from a clean checkout holds
everything the services need: the gRPC stubs, which are generated, never committed, and the
scripts the chart and the scheduler ship."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SERVICES = ("tandem-scheduler", "tandem-syncer", "tandem-hooks")
BUILT_FROM = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from the files git would commit, as a fresh clone has them (no generated stubs)."""
    work = tmp_path_factory.mktemp("packaging")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    src = work / "src"
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    assert not list(src.rglob("*_pb2.py"))
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
            str(work),
            str(src),
        ],
        check=True,
        # What an image's build is told (Dockerfile ARGs): its context has no .git.
        env={**os.environ, "TANDEM_COMMIT": BUILT_FROM, "TANDEM_DIRTY": "false"},
    )
    (built,) = work.glob("tandem-*.whl")
    return built


def test_the_wheel_holds_the_generated_stubs_and_the_scripts(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for proto in ("lock", "slurm", "syncer", "scheduler"):
        assert f"tandem/v1/{proto}_pb2.py" in names
        assert f"tandem/v1/{proto}_pb2_grpc.py" in names
    for script in ("common.sh", "prolog.sh", "epilog.sh", "placeholder.sh"):
        assert f"tandem/scripts/{script}" in names
    assert "tandem/_build.json" in names


def test_each_service_starts_from_the_installed_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    # A bare environment: the wheel, plus the dependencies this venv has (a path in a .pth file
    # adds them, but not the editable install that would otherwise shadow the wheel).
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
    )
    where = subprocess.run(
        [str(python), "-c", "import tandem.v1.syncer_pb2_grpc as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(site))
    # Which code it runs, as /metrics says: the commit the wheel was built from.
    metrics = subprocess.run(
        [str(python), "-c", "from tandem.metrics import REGISTRY; print(REGISTRY.render())"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert f'tandem_build_info{{commit="{BUILT_FROM}",dirty="false",' in metrics
    for service in (*SERVICES, "kubectl-tandem"):
        out = subprocess.run(
            [str(python), str(site / "bin" / service), "--help"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert "usage:" in out.stdout
