"""The kubeconfig reader the services use instead of the `kubernetes` package (34 MiB each):
the forms kubectl writes, resolved as kubectl resolves them; what it does not read goes to the
package, and what no one should use is refused with the reason."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem import kubeconfig


def write(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None, **top: Any) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": cluster or {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"},
            },
            {
                "name": "other",
                "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority": "/etc/ca.crt"},
            },
        ],
        "users": [{"name": "me", "user": user}],
        "contexts": [
            {"name": "lab", "context": {"cluster": "lab", "user": "me"}},
            {"name": "far", "context": {"cluster": "other", "user": "me"}},
        ],
        "current-context": "lab",
        **top,
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_a_token_and_a_ca_relative_to_the_file(tmp_path: Path) -> None:
    got = kubeconfig.load(write(tmp_path, {"token": "abc"}))
    assert got == kubeconfig.Credentials("https://127.0.0.1:6443", str(tmp_path / "ca.crt"), "abc", None)
    assert kubeconfig.load(write(tmp_path, {"token": "abc"}), "far").server == "https://10.0.0.1:6443"


def test_embedded_certificates_become_files_only_their_owner_reads(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    data = base64.b64encode(pem).decode()
    user = {"client-certificate-data": data, "client-key-data": data}
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": data}
    got = kubeconfig.load(write(tmp_path, user, cluster))
    assert got.ca_file and got.cert
    for name in (got.ca_file, *got.cert):
        assert Path(name).read_bytes() == pem
        assert Path(name).stat().st_mode & 0o077 == 0


def test_a_token_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("xyz\n")
    assert kubeconfig.load(write(tmp_path, {"tokenFile": "token"})).token == "xyz"


def test_an_exec_plugin_or_an_unchecked_cluster_goes_to_the_kubernetes_package(tmp_path: Path) -> None:
    with pytest.raises(kubeconfig.Unsupported, match="exec"):
        kubeconfig.load(write(tmp_path, {"exec": {"command": "aws"}}))
    insecure = {"server": "https://x", "insecure-skip-tls-verify": True}
    with pytest.raises(kubeconfig.Unsupported, match="insecure-skip-tls-verify"):
        kubeconfig.load(write(tmp_path, {"token": "a"}, insecure))


@pytest.mark.parametrize(
    ("user", "cluster", "top", "why"),
    [
        ({"token": "a"}, {"server": "http://127.0.0.1:8080"}, {}, "no https server"),
        ({"client-certificate": "c.crt"}, None, {}, "needs its key"),
        ({"token": "a"}, None, {"current-context": "gone"}, "no context named 'gone'"),
        ({"token": "a"}, None, {"current-context": ""}, "no current-context"),
        ({"token": "a"}, {"server": "https://x", "certificate-authority-data": "%%%"}, {}, "not base64"),
    ],
    ids=["plain http", "cert without key", "unknown context", "no context", "bad base64"],
)
def test_what_cannot_be_used_says_why(
    tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None, top: dict[str, Any], why: str
) -> None:
    with pytest.raises(kubeconfig.KubeconfigError, match=why):
        kubeconfig.load(write(tmp_path, user, cluster, **top))


def test_not_yaml_says_so(tmp_path: Path) -> None:
    (tmp_path / "config").write_text("- just\n- a list\n")
    with pytest.raises(kubeconfig.KubeconfigError, match="not a kubeconfig"):
        kubeconfig.load(str(tmp_path / "config"))


def test_no_service_imports_the_kubernetes_package() -> None:
    """34 MiB in each service for a kubeconfig it reads once (issue 22)."""
    code = (
        "import sys, tandem.scheduler.main, tandem.syncer.main, tandem.hooks.main;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
