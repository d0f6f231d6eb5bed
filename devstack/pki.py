"""Certificates, keys and static tokens for the local kube-apiserver, made with openssl."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

# Identities with a static token: the person at the keyboard and kwok (standing in for every
# kubelet). Tandem's services use ServiceAccount tokens instead (devstack.identities).
USERS = {
    "admin": ("system:masters",),
    "kwok": ("system:masters",),
}


def ensure_pki(pki: Path) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    if not (pki / "ca.crt").exists():
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "3650",
            "-keyout",
            pki / "ca.key",
            "-out",
            pki / "ca.crt",
            "-subj",
            "/CN=tandem-local-ca",
        )
    if not (pki / "apiserver.crt").exists():
        ext = pki / "apiserver.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
            "extendedKeyUsage=serverAuth\n"
        )
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            pki / "apiserver.key",
            "-out",
            pki / "apiserver.csr",
            "-subj",
            "/CN=kube-apiserver",
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            pki / "apiserver.csr",
            "-CA",
            pki / "ca.crt",
            "-CAkey",
            pki / "ca.key",
            "-CAcreateserial",
            "-days",
            "3650",
            "-out",
            pki / "apiserver.crt",
            "-extfile",
            ext,
        )
    if not (pki / "sa.key").exists():
        _openssl("genrsa", "-out", pki / "sa.key", "2048")
        _openssl("rsa", "-in", pki / "sa.key", "-pubout", "-out", pki / "sa.pub")
    tokens = pki / "tokens.csv"
    if not tokens.exists():
        lines = []
        for uid, (user, groups) in enumerate(USERS.items(), start=1):
            (pki / f"{user}.token").write_text(secrets.token_hex(24))
            token = (pki / f"{user}.token").read_text()
            lines.append(f'{token},{user},{uid},"{",".join(groups)}"')
        tokens.write_text("\n".join(lines) + "\n")


def token(pki: Path, user: str) -> str:
    return (pki / f"{user}.token").read_text().strip()


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, bearer: str) -> None:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: tandem-local
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    token: {bearer}
contexts:
- name: tandem-local
  context:
    cluster: tandem-local
    user: {user}
current-context: tandem-local
"""
    )
    path.chmod(0o600)


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
