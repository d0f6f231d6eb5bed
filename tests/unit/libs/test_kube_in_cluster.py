"""In a Pod (the chart's install), the services authenticate with the ServiceAccount token the
kubelet mounts and rotates. Found by `helm install` on the lab's real Node (issue 20): every call
was refused 401, because the `kubernetes` package's in-cluster loader stores the token as
"bearer <jwt>" (lower case) and the client sent "Bearer bearer <jwt>"; and a token read once
would be refused again once the kubelet rotates it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tandem import kube
from tandem.kube import KubeClient, bearer_token

SYSTEM_CAS = Path("/etc/ssl/certs/ca-certificates.crt")


def _account(tmp_path: Path, token: str) -> Path:
    shutil.copy(SYSTEM_CAS, tmp_path / "ca.crt")
    (tmp_path / "token").write_text(token + "\n")
    return tmp_path


ENV = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.mark.parametrize(
    ("stored", "token"),
    [("bearer eyJ.a.b", "eyJ.a.b"), ("Bearer eyJ.a.b", "eyJ.a.b"), ("eyJ.a.b", "eyJ.a.b"), ("", "")],
)
def test_the_token_is_taken_whatever_case_the_scheme_has(stored: str, token: str) -> None:
    assert bearer_token(stored) == token


def test_a_pod_dials_the_kubernetes_service_with_its_mounted_token(tmp_path: Path) -> None:
    client = KubeClient.in_cluster(account_dir=_account(tmp_path, "first"), env=ENV)
    assert client.host == "https://10.0.0.1:443"
    assert client._headers()["Authorization"] == "Bearer first"
    ipv6 = KubeClient.in_cluster(account_dir=tmp_path, env={**ENV, "KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert ipv6.host == "https://[fd00::1]:443"


def test_a_token_the_kubelet_rotated_is_used_within_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr("tandem.kube.time.monotonic", lambda: now[0])
    client = KubeClient.in_cluster(account_dir=_account(tmp_path, "first"), env=ENV)
    assert client._headers()["Authorization"] == "Bearer first"
    (tmp_path / "token").write_text("rotated\n")
    now[0] += 10
    assert client._headers()["Authorization"] == "Bearer first"  # not a file read per request
    now[0] += kube.TOKEN_REREAD_SECONDS
    assert client._headers()["Authorization"] == "Bearer rotated"


def test_outside_a_pod_without_a_kubeconfig_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="--kubeconfig"):
        KubeClient.in_cluster(account_dir=tmp_path, env={})
