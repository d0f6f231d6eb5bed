"""Issue 20: what `make real-node-tools` builds.

The Go packages are checked against the module layouts they were built from here (the CNI
plugins' commands are under `plugins/` in their module; `main/bridge` alone does not exist).
"""

from __future__ import annotations

from devstack import tools

BY_NAME = {t.name: t for t in tools.REAL_NODE_TOOLS}


def test_the_cni_plugins_are_named_by_their_path_inside_the_plugins_module() -> None:
    for name, kind in (("bridge", "main"), ("host-local", "ipam"), ("loopback", "main"), ("portmap", "meta")):
        tool = BY_NAME[name]
        assert tool.go_install == f"github.com/containernetworking/plugins/plugins/{kind}/{name}"
        assert tool.subdir == tools.CNI_SUBDIR
