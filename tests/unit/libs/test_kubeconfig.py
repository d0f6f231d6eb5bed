"""The kubeconfig reader the services use instead of the `kubernetes` package (34 MiB each):
the forms kubectl writes, resolved as kubectl resolves them; what it does not read goes to the
package, and what no one should use is refused with the reason."""

from __future__ import annotations

import base64
import ssl
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


def test_embedded_certificates_stay_in_memory_and_no_file_is_written(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Issue 39: a key given as client-key-data is never written to a file (it was, to a
    temporary one, until the process exited)."""
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    data = base64.b64encode(pem).decode()
    user = {"client-certificate-data": data, "client-key-data": data}
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": data}
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    got = kubeconfig.load(write(tmp_path, user, cluster))
    assert got.ca_file is None and got.cert is None
    assert got.ca_data == pem and got.cert_data == (pem, pem)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_client_key_in_memory_reaches_tls_through_no_file(tmp_path: Path) -> None:
    """The client's TLS loads a certificate and key held in memory (a real pair)."""
    from tandem import kube

    keyout, out = str(tmp_path / "k.pem"), str(tmp_path / "c.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", keyout, "-out", out, "-days", "1", "-subj", "/CN=me"],
        check=True, capture_output=True,
    )  # fmt: skip
    cert, key = (tmp_path / "c.pem").read_bytes(), (tmp_path / "k.pem").read_bytes()
    before = set(Path("/tmp").iterdir())
    ctx = kube.tls_context(ca_data=cert, cert_data=(cert, key))
    assert ctx.verify_mode.name == "CERT_REQUIRED"
    assert set(Path("/tmp").iterdir()) - before == set()
    with pytest.raises(ssl.SSLError):
        kube.tls_context(cert_data=(cert, b"not a key"))


def test_a_token_file_is_named_and_read_again_as_it_rotates(tmp_path: Path) -> None:
    from tandem import kube

    (tmp_path / "token").write_text("xyz\n")
    found = kubeconfig.load(write(tmp_path, {"tokenFile": "token"}))
    assert found.token == "xyz" and found.token_file == str(tmp_path / "token")
    client = kube.KubeClient("https://127.0.0.1:1", token_file=Path(found.token_file), token_every=0.0)
    try:
        assert client._current_token() == "xyz"
        (tmp_path / "token").write_text("rotated\n")
        assert client._current_token() == "rotated"
    finally:
        client.close()


@pytest.mark.parametrize("field", ["tls-server-name", "proxy-url"])
def test_a_cluster_field_the_client_cannot_honour_is_refused_not_ignored(tmp_path: Path, field: str) -> None:
    cluster = {"server": "https://127.0.0.1:6443", field: "elsewhere.example"}
    with pytest.raises(
        kubeconfig.KubeconfigError, match=f"sets {field}, which Tandem's client does not honour"
    ):
        kubeconfig.load(write(tmp_path, {"token": "a"}, cluster))


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
