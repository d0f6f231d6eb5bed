"""A kubeconfig file, read for what KubeClient needs: the server, the CA that signs it, and a
bearer token or a client certificate.

Read here rather than by the `kubernetes` package, whose import alone holds 34 MiB in every
service (issue 22: the syncer's budget is 200 MiB at 1,000 Nodes). The static forms are read
here; a user that authenticates through an exec plugin or an auth provider (cloud logins), or a
cluster reached without checking its certificate, is handed to the `kubernetes` package, imported
then and only then (`Unsupported`).
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import os
import tempfile
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


class KubeconfigError(ValueError):
    """The file cannot be used, with what is wrong in it."""


class Unsupported(Exception):
    """A form this reader leaves to the `kubernetes` package (an exec plugin, an auth provider)."""


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: str | None
    token: str = ""
    cert: tuple[str, str] | None = None


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
    if cluster.get("insecure-skip-tls-verify"):
        raise Unsupported("insecure-skip-tls-verify")
    if set(user) - _STATIC_USER:
        raise Unsupported(", ".join(sorted(set(user) - _STATIC_USER)))
    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise KubeconfigError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no https server")
    base = file.parent
    ca = _file(cluster, "certificate-authority", base, path)
    token = str(user.get("token") or "")
    if not token and user.get("tokenFile"):
        token = _relative(str(user["tokenFile"]), base).read_text().strip()
    cert = _file(user, "client-certificate", base, path)
    key = _file(user, "client-key", base, path)
    if bool(cert) != bool(key):
        raise KubeconfigError(
            f"kubeconfig {path}: a client certificate needs its key, and a key its certificate"
        )
    return Credentials(server, ca, token, (cert, key) if cert and key else None)


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


def _file(section: Mapping[str, Any], field: str, base: Path, path: str) -> str | None:
    """A file's path: as named, or the `<field>-data` written to a file only this user reads."""
    if section.get(f"{field}-data"):
        try:
            data = base64.b64decode(str(section[f"{field}-data"]), validate=True)
        except (binascii.Error, ValueError) as e:
            raise KubeconfigError(f"kubeconfig {path}: {field}-data is not base64: {e}") from e
        fd, name = tempfile.mkstemp(prefix="tandem-kubeconfig-", suffix=".pem")  # mode 0600
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        atexit.register(_remove, name)
        return name
    if section.get(field):
        return str(_relative(str(section[field]), base))
    return None


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name)
