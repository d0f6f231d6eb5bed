"""Certificates, keys and static tokens for the local kube-apiserver, made with openssl."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from devstack import files
from devstack.config import REAL_NODE_IP, SERVICE_CIDR
from tandem import mtls

# The first address of the Service range, which the apiserver gives the `kubernetes` Service.
KUBERNETES_SERVICE_IP = SERVICE_CIDR.rsplit(".", 1)[0] + ".1"

# Identities with a static token, by the short name of their token and kubeconfig files: the
# person at the keyboard, kwok (standing in for every kubelet), the control plane's controllers
# under the user names the bootstrap RBAC already binds, and the LWS and Kueue controllers (lab
# add-ons, trusted like kwok rather than given their charts' RBAC). Tandem's services use ServiceAccount
# tokens instead (devstack.identities).
USERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("admin", ("system:masters",)),
    "kwok": ("kwok", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "lws-controller": ("lws-controller", ("system:masters",)),
    "kueue-controller": ("kueue-controller", ("system:masters",)),
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
    _serving_cert(
        pki,
        "apiserver",
        # The node IP and the `kubernetes` Service's ClusterIP: with a real Node (DEPLOY=chart)
        # the apiserver binds the first and in-cluster clients dial the second.
        f"IP:127.0.0.1,IP:{REAL_NODE_IP},IP:{KUBERNETES_SERVICE_IP},DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local",
    )
    # The LWS controller's admission webhooks, which the apiserver calls on 127.0.0.1.
    _serving_cert(pki, "lws-webhook", "IP:127.0.0.1,DNS:localhost")
    _serving_cert(pki, "kueue-webhook", "IP:127.0.0.1,DNS:localhost")
    if not (pki / "sa.key").exists():
        _openssl("genrsa", "-out", pki / "sa.key", "2048")
        _openssl("rsa", "-in", pki / "sa.key", "-pubout", "-out", pki / "sa.pub")
    tokens = pki / "tokens.csv"
    # Written again whenever an identity is new (a stack made before it kept its pki).
    if not tokens.exists() or any(not (pki / f"{name}.token").exists() for name in USERS):
        lines = []
        for uid, (name, (user, groups)) in enumerate(USERS.items(), start=1):
            if not (pki / f"{name}.token").exists():
                (pki / f"{name}.token").write_text(secrets.token_hex(24))
            token = (pki / f"{name}.token").read_text()
            lines.append(f'{token},{user},{uid},"{",".join(groups)}"')
        tokens.write_text("\n".join(lines) + "\n")


# Tandem's gRPC identities (tandem.mtls): the two servers are also clients of each other; the
# gateway and the operator (grpcurl, kubectl tandem) only call.
GRPC_SERVERS = ("tandem-syncer", "tandem-scheduler")
GRPC_CLIENTS = ("tandem-hooks", "tandem-operator")


def grpc_dir(pki: Path) -> Path:
    return pki / "grpc"


def ensure_grpc_pki(pki: Path) -> None:
    """A CA of Tandem's own (not the apiserver's: it signs identities, nothing else) and a
    certificate per identity, named in its URI SAN (tandem.mtls.identity_uri; its CN too, for
    people reading it): what the chart makes in a cluster."""
    grpc = grpc_dir(pki)
    grpc.mkdir(parents=True, exist_ok=True)
    grpc.chmod(0o700)
    if not (grpc / "ca.crt").exists():
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
            "-keyout", grpc / "ca.key", "-out", grpc / "ca.crt", "-subj", "/CN=tandem-grpc-ca",
        )  # fmt: skip
    for name in GRPC_SERVERS:
        _serving_cert(
            grpc, name, f"IP:127.0.0.1,DNS:localhost,URI:{mtls.identity_uri(name)}", "serverAuth,clientAuth"
        )
    for name in GRPC_CLIENTS:
        _serving_cert(grpc, name, f"URI:{mtls.identity_uri(name)}", usage="clientAuth")


def _serving_cert(pki: Path, name: str, san: str, usage: str = "serverAuth") -> None:
    """`name`.crt and `name`.key (CN `name`) signed by the CA in `pki`: a TLS server on 127.0.0.1
    (`san`), or with `usage` clientAuth only, a client."""
    ensure_cert(pki, name, f"/CN={name}", san, usage)


def ensure_cert(pki: Path, name: str, subject: str, san: str = "", usage: str = "clientAuth") -> None:
    """`name`.crt and `name`.key for `subject` (e.g. "/O=system:nodes/CN=system:node:host-0"),
    signed by the CA in `pki`. Made again when the subject, names or usage asked for changed (a
    state dir keeps its pki across stacks, and a new SAN must not need `make clean`)."""
    ext = pki / f"{name}.ext"
    wanted = f"# {subject}\n" + (f"subjectAltName={san}\n" if san else "") + f"extendedKeyUsage={usage}\n"
    if (pki / f"{name}.crt").exists() and _same_ext(ext, wanted, subject):
        return
    ext.write_text(wanted)
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        pki / f"{name}.key",
        "-out",
        pki / f"{name}.csr",
        "-subj",
        subject,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        pki / f"{name}.csr",
        "-CA",
        pki / "ca.crt",
        "-CAkey",
        pki / "ca.key",
        "-CAcreateserial",
        "-days",
        "3650",
        "-out",
        pki / f"{name}.crt",
        "-extfile",
        ext,
    )


def _same_ext(ext: Path, wanted: str, subject: str) -> bool:
    """Whether the cert was made from `wanted`; one made before subjects were recorded in its
    .ext (plain /CN=name) counts when the rest matches."""
    try:
        have = ext.read_text()
    except FileNotFoundError:
        return False
    return have == wanted or (subject.count("=") == 1 and f"# {subject}\n" + have == wanted)


def token(pki: Path, user: str) -> str:
    return (pki / f"{user}.token").read_text().strip()


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, bearer: str) -> None:
    files.write_whole(
        path,
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
""",
    )


def write_cert_kubeconfig(path: Path, server: str, ca: Path, user: str, cert: Path, key: Path) -> None:
    """A kubeconfig that authenticates with a client certificate (the real Node's kubelet,
    kube-proxy and CoreDNS: identities by CN and O, as in a kubeadm cluster)."""
    files.write_whole(
        path,
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
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: tandem-local
  context:
    cluster: tandem-local
    user: {user}
current-context: tandem-local
""",
    )


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
