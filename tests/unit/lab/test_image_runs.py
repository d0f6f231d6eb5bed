"""Issue 20: Tandem's image runs each of its programs as the chart runs them: as the chart's
non-root user, on a read-only root filesystem with only /tmp writable, without capabilities.

The image is the lab's build of the production Dockerfile (`make image`); runc runs it from an
unpacked bundle, no containerd or kubelet needed (`make real-node-tools` builds runc). Skipped
until both are built, and when not root (runc makes namespaces).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack import image, oci, runc_bundle, tools
from devstack.config import REPO_ROOT

RUNC = next(t for t in tools.REAL_NODE_TOOLS if t.name == "runc").cached
ENTRY_POINTS = sorted(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"])
# The compressed image a Node pulls; a Debian base with Python and the locked dependencies.
MAX_IMAGE_MB = 120

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="runc needs root"),
    pytest.mark.skipif(not RUNC.exists(), reason="no runc: `make real-node-tools` builds it"),
    pytest.mark.skipif(image.built() is None, reason="Tandem's image is not built: `make image` builds it"),
]


def _chart_security_context() -> runc_bundle.SecurityContext:
    values: dict[str, Any] = yaml.safe_load((REPO_ROOT / "helm/tandem/values.yaml").read_text())["global"]
    pod, container = values["podSecurityContext"], values["securityContext"]
    assert container["capabilities"]["drop"] == ["ALL"]  # what the bundle applies
    return runc_bundle.SecurityContext(
        run_as_user=pod["runAsUser"],
        run_as_group=pod["runAsGroup"],
        read_only_root=container["readOnlyRootFilesystem"],
        no_new_privileges=not container["allowPrivilegeEscalation"],
    )


@pytest.fixture(scope="module")
def tarball() -> Path:
    built = image.built()
    assert built is not None
    return built


@pytest.fixture(scope="module")
def bundle(tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    where = tmp_path_factory.mktemp("bundle")
    config = runc_bundle.unpack(tarball, where)
    env: list[str] = config["config"]["Env"]  # type: ignore[index]
    return where, env


def _run(bundle: tuple[Path, list[str]], argv: list[str]) -> Any:
    where, env = bundle
    return runc_bundle.run(RUNC, where, argv, env, _chart_security_context())


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_each_entry_point_answers_help_as_the_charts_user_on_a_read_only_root(
    bundle: tuple[Path, list[str]], entry_point: str
) -> None:
    result = _run(bundle, [entry_point, "--help"])

    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout


def test_the_root_is_read_only_and_the_user_is_the_charts(bundle: tuple[Path, list[str]]) -> None:
    # The check above means something only if the container really ran that way.
    probe = (
        "import os; print(os.getuid(), os.getgid());"
        "print([l.split()[5] for l in open('/proc/self/mountinfo') if l.split()[4] == '/'][0]);"
        "open('/tmp/ok', 'w')"
    )
    result = _run(bundle, ["python3", "-c", probe])

    context = _chart_security_context()
    assert result.returncode == 0, result.stderr[-2000:]
    ids, root_options = result.stdout.splitlines()
    assert ids.split() == [str(context.run_as_user), str(context.run_as_group)]
    assert "ro" in root_options.split(","), root_options


def test_the_image_runs_as_the_user_the_dockerfile_and_the_chart_name(tarball: Path) -> None:
    name, config, _ = oci.read_layout(tarball)

    context = _chart_security_context()
    assert name == image.image_name(image.key())
    assert config["config"]["User"] == image.dockerfile_config().user  # type: ignore[index]
    assert image.dockerfile_config().user == f"{context.run_as_user}:{context.run_as_group}"


def test_the_image_is_small_enough_to_pull(tarball: Path) -> None:
    assert tarball.stat().st_size < MAX_IMAGE_MB * 2**20, f"{tarball.stat().st_size / 2**20:.0f} MB"
