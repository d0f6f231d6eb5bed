"""The Prometheus Operator's CRDs, so the chart's PodMonitors and PrometheusRule meet their real
schemas in a server-side dry run. No operator runs: nothing acts on those objects here.

The CRDs come from the pinned Go module (its example/prometheus-operator-crd/ holds the generated
manifests) and are cached by version, so `go` is asked once per machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from devstack import config, kube, progress
from devstack.config import StackConfig

MODULE = "github.com/prometheus-operator/prometheus-operator"
GROUP = "monitoring.coreos.com"
# The kinds the chart renders; the operator's other CRDs are large and nothing here uses them.
CRDS = ("podmonitors", "prometheusrules")


def cached_dir() -> Path:
    return config.cache_dir() / "crds" / f"prometheus-operator-{config.PROMETHEUS_OPERATOR_VERSION}"


def crd_files() -> list[Path]:
    """The CRD manifests, copied from the module into the cache the first time."""
    cached = cached_dir()
    files = [cached / f"{GROUP}_{name}.yaml" for name in CRDS]
    if all(f.exists() for f in files):
        return files
    with progress.step(
        f"fetching the Prometheus Operator {config.PROMETHEUS_OPERATOR_VERSION} CRDs (once per machine)"
    ):
        source = module_dir() / "example" / "prometheus-operator-crd"
        cached.parent.mkdir(parents=True, exist_ok=True)
        # Filled beside the cache and renamed into place: an interrupted copy is never taken for one.
        partial = Path(tempfile.mkdtemp(prefix=cached.name + ".", dir=cached.parent))
        partial.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
        try:
            for f in files:
                shutil.copyfile(source / f.name, partial / f.name)
            shutil.rmtree(cached, ignore_errors=True)
            partial.rename(cached)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return files


def module_dir() -> Path:
    """The pinned module as `go mod download` left it in the module cache."""
    version = config.PROMETHEUS_OPERATOR_VERSION
    # Outside any module: inside one, `go mod download` may record the module in its go.sum.
    with tempfile.TemporaryDirectory() as outside:
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
            cwd=outside,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if out.returncode != 0:
        raise RuntimeError(f"go mod download {MODULE}@{version} failed: {out.stderr.strip() or out.stdout}")
    return Path(json.loads(out.stdout)["Dir"])


def ensure_installed(cfg: StackConfig) -> None:
    """Applied server-side (too large for client-side apply's annotation); idempotent."""
    files = [arg for f in crd_files() for arg in ("-f", str(f))]
    kube.kubectl(cfg, "apply", "--server-side", "--force-conflicts", *files)
    # A custom resource is refused until its CRD is established.
    kube.kubectl(
        cfg, "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}.{GROUP}" for n in CRDS)
    )
