"""Issue 20: what `make real-node-tools` builds, and the Debian packages it installs on the host.

The Go packages are checked against the module layouts they were built from here (the CNI
plugins' commands are under `plugins/` in their module; `main/bridge` alone does not exist),
and runc's cgo build asks for libseccomp's headers and pkg-config before `go install` runs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from devstack import host_packages, tools

BY_NAME = {t.name: t for t in tools.REAL_NODE_TOOLS}


def test_the_cni_plugins_are_named_by_their_path_inside_the_plugins_module() -> None:
    for name, kind in (("bridge", "main"), ("host-local", "ipam"), ("loopback", "main"), ("portmap", "meta")):
        tool = BY_NAME[name]
        assert tool.go_install == f"github.com/containernetworking/plugins/plugins/{kind}/{name}"
        assert tool.subdir == tools.CNI_SUBDIR


def test_runc_is_built_with_seccomp_and_asks_for_what_cgo_needs_first() -> None:
    runc = BY_NAME["runc"]

    assert (runc.cgo, runc.tags) == (True, "seccomp")
    assert {"libseccomp-dev", "pkg-config", "gcc"} <= set(runc.build_debs)
    assert "libseccomp2" in runc.run_debs
    # Static Go binaries need nothing from the host to build.
    assert not [t.name for t in tools.REAL_NODE_TOOLS if not t.cgo and t.build_debs]


def test_kube_proxy_gets_iptables_and_conntrack() -> None:
    assert {"iptables", "conntrack"} <= set(BY_NAME["kube-proxy"].run_debs)


def test_a_cached_build_still_installs_what_the_binary_runs_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    runc = BY_NAME["runc"]
    runc.cached.parent.mkdir(parents=True)
    runc.cached.write_text("")  # "already built"
    asked: list[tuple[list[str], str]] = []
    monkeypatch.setattr(host_packages, "ensure", lambda debs, why: asked.append((list(debs), why)))

    tools.ensure_tools(tmp_path / "bin", [runc])

    assert asked == [(["libseccomp2"], "running runc")]
    assert (tmp_path / "bin" / "runc").resolve() == runc.cached.resolve()


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian host")
def test_missing_names_only_what_dpkg_has_not_installed() -> None:
    assert host_packages.missing(["dpkg"]) == []
    assert host_packages.missing(["tandem-no-such-package", "dpkg"]) == ["tandem-no-such-package"]


def test_ensure_does_not_call_apt_when_nothing_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_packages, "missing", lambda packages: [])

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(subprocess, "run", refuse)

    host_packages.ensure(["iptables"], "a test")
