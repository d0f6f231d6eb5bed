"""A kubeconfig file, read for what KubeClient needs: the server, the CA that signs it, and a
bearer token or a client certificate.

Read here rather than by the `kubernetes` package, whose import alone holds 34 MiB in every
service (issue 22: the syncer's budget is 200 MiB at 1,000 Nodes). The static forms are read
here; a user that authenticates through an exec plugin or an auth provider (cloud logins), or a
cluster reached without checking its certificate, is handed to the `kubernetes` package, imported
then and only then (`Unsupported`).

Embedded certificates and keys (`*-data`) stay in memory: KubeClient hands them to TLS through
anonymous in-memory files (memfd), never a file on disk. A `tokenFile` is named, not read once:
the client reads it again as it rotates. A cluster field the client cannot honour (`tls-server-name`,
`proxy-url`) is refused with the reason rather than ignored: ignoring it would dial another host
or check another name than the one the operator wrote.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The user fields read here; any other way to authenticate goes to the `kubernetes` package.
_STATIC_USER = {
    "token",
    "tokenFile",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
}


# Cluster fields KubeClient does not honour: refused, never silently dropped.
_REFUSED_CLUSTER = {
    "tls-server-name": "it would check the apiserver's certificate against another name than the server's",
    "proxy-url": "it would dial the apiserver through a proxy",
}


class KubeconfigError(ValueError):
    """The file cannot be used, with what is wrong in it."""


class Unsupported(Exception):
    """A form this reader leaves to the `kubernetes` package (an exec plugin, an auth provider)."""


@dataclass(frozen=True)
class Credentials:
    server: str
    # The CA: a file, or PEM held in memory (certificate-authority-data).
    ca_file: str | None
    token: str = ""
    # A client certificate and its key: files, or PEM held in memory (*-data).
    cert: tuple[str, str] | None = None
    ca_data: bytes = b""
    cert_data: tuple[bytes, bytes] | None = None
    # A token read again as it rotates (tokenFile); `token` is its first reading.
    token_file: str = ""


def load(path: str, context: str | None = None) -> Credentials:
    """The credentials of `context` (else the file's current context) in the kubeconfig at `path`."""
    file = Path(path)
    try:
        doc = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise KubeconfigError(f"kubeconfig {path}: {e}") from e
    if not isinstance(doc, Mapping):
        raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig (no mapping at its top)")
    name = context or doc.get("current-context")
    if not name:
        raise KubeconfigError(f"kubeconfig {path}: no context named and no current-context")
    ctx = _named(doc, "contexts", "context", str(name), path)
    cluster = _named(doc, "clusters", "cluster", str(ctx.get("cluster") or ""), path)
    user = _named(doc, "users", "user", str(ctx.get("user") or ""), path) if ctx.get("user") else {}
    for field, why in _REFUSED_CLUSTER.items():
        if cluster.get(field):
            raise KubeconfigError(
                f"kubeconfig {path}: cluster {ctx.get('cluster')!r} sets {field}, which Tandem's client does"
                f" not honour ({why}); reach the apiserver at a server its certificate names, directly"
            )
    if cluster.get("insecure-skip-tls-verify"):
        raise Unsupported("insecure-skip-tls-verify")
    if set(user) - _STATIC_USER:
        raise Unsupported(", ".join(sorted(set(user) - _STATIC_USER)))
    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise KubeconfigError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no https server")
    base = file.parent
    ca, ca_data = _file(cluster, "certificate-authority", base, path)
    token, token_file = str(user.get("token") or ""), ""
    if not token and user.get("tokenFile"):
        token_file = str(_relative(str(user["tokenFile"]), base))
        try:
            token = Path(token_file).read_text().strip()
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path}: tokenFile {token_file}: {e}") from e
    cert, cert_data = _file(user, "client-certificate", base, path)
    key, key_data = _file(user, "client-key", base, path)
    if bool(cert or cert_data) != bool(key or key_data):
        raise KubeconfigError(
            f"kubeconfig {path}: a client certificate needs its key, and a key its certificate"
        )
    if (cert and key_data) or (cert_data and key):
        raise KubeconfigError(
            f"kubeconfig {path}: give the client certificate and its key both as files or both as *-data"
        )
    return Credentials(
        server,
        ca,
        token,
        (cert, key) if cert and key else None,
        ca_data,
        (cert_data, key_data) if cert_data and key_data else None,
        token_file,
    )


def _named(doc: Mapping[str, Any], section: str, field: str, name: str, path: str) -> Mapping[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            found = entry.get(field) or {}
            if not isinstance(found, Mapping):
                break
            return found
    raise KubeconfigError(f"kubeconfig {path}: no {field} named {name!r} in {section}")


def _relative(value: str, base: Path) -> Path:
    # kubectl resolves a relative path against the kubeconfig's own directory.
    p = Path(value)
    return p if p.is_absolute() else base / p


def _file(section: Mapping[str, Any], field: str, base: Path, path: str) -> tuple[str | None, bytes]:
    """A file's path as named, or the `<field>-data` as bytes (kept in memory, never written)."""
    if section.get(f"{field}-data"):
        try:
            return None, base64.b64decode(str(section[f"{field}-data"]), validate=True)
        except (binascii.Error, ValueError) as e:
            raise KubeconfigError(f"kubeconfig {path}: {field}-data is not base64: {e}") from e
    if section.get(field):
        return str(_relative(str(section[field]), base)), b""
    return None, b""
