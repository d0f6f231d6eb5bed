"""A small raw-JSON Kubernetes API client (on tandem.httpwire).

The typed `kubernetes` client deserialises slowly (lab/KUBERNETES.md: 1.2 s vs 0.07 s for 4,000
Pods) and its binding call fails to parse the reply; Tandem's hot paths speak JSON directly. The
`kubernetes` package is still what reads kubeconfig files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from tandem import httpwire, kubeconfig
from tandem.metrics import REGISTRY

log = logging.getLogger(__name__)
API_REQUESTS = REGISTRY.counter(
    "tandem_kube_requests_total",
    "Kubernetes API requests made, by verb and resource (watches included)",
    ["verb", "resource"],
)


def resource_of(path: str) -> str:
    """`pods/binding` from `/api/v1/namespaces/ns/pods/x/binding`: what a request is about, with
    no name in it (a metric label: a handful of values, never one per object)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else parts
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return "namespaces" if parts[-2:-1] == ["namespaces"] else "(root)"
    return f"{rest[0]}/{rest[2]}" if len(rest) > 2 else rest[0]


JSON = dict[str, Any]

# Where the kubelet mounts a Pod's ServiceAccount token and the cluster's CA.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The kubelet rotates a projected token before it expires (at 80% of its life, an hour by
# default): read the file again this often, as client-go does.
TOKEN_REREAD_SECONDS = 60.0
# An exec plugin (a cloud login) is run again this often: its credentials last an hour or more.
PLUGIN_REREAD_SECONDS = 300.0


def tls_context(
    ca_file: str | None = None,
    ca_data: bytes = b"",
    cert: tuple[str, str] | None = None,
    cert_data: tuple[bytes, bytes] | None = None,
) -> ssl.SSLContext:
    """TLS to the apiserver: its CA (a file, PEM in memory, else the system's) and the client
    certificate, from files or from memory. A certificate and key held in memory reach OpenSSL
    through anonymous in-memory files (memfd), closed once loaded: never a file on disk."""
    ctx = ssl.create_default_context(cafile=ca_file or None, cadata=ca_data.decode() if ca_data else None)
    if cert:
        ctx.load_cert_chain(*cert)
    elif cert_data:
        fds = [_memfd(data) for data in cert_data]
        try:
            ctx.load_cert_chain(*(f"/proc/self/fd/{fd}" for fd in fds))
        finally:
            for fd in fds:
                os.close(fd)
    return ctx


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("tandem-kube-credential", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def _take(path: str, kubeconfig_text: str) -> bytes:
    """A file the `kubernetes` package wrote for a credential it was given as data: read into
    memory and removed (only one of its own temporary files; a file the kubeconfig names stays)."""
    data = Path(path).read_bytes()
    ours = Path(path).parent == Path(tempfile.gettempdir()) and Path(path).name.startswith("tmp")
    if ours and path not in kubeconfig_text:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return data


def bearer_token(authorization: str) -> str:
    """The token of an Authorization value as the `kubernetes` package stores it ("Bearer x",
    or "bearer x" from its in-cluster loader)."""
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else authorization.strip()


class KubeError(RuntimeError):
    def __init__(self, status: int, reason: str, message: str, causes: tuple[str, ...] = ()) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        # The Status' details.causes[].message: e.g. which PodDisruptionBudget refused an eviction.
        self.causes = causes

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


class KubeClient:
    def __init__(
        self,
        host: str,
        token: str = "",
        ca_file: str | None = None,
        cert: tuple[str, str] | None = None,
        timeout: float = 30.0,
        token_file: Path | None = None,
        ca_data: bytes = b"",
        cert_data: tuple[bytes, bytes] | None = None,
        token_source: Callable[[], str] | None = None,
        token_every: float = TOKEN_REREAD_SECONDS,
    ) -> None:
        """`token_file`: a token that rotates (a Pod's projected ServiceAccount token), read again
        every `token_every` seconds; `token_source` the same for any source (an exec plugin run
        again). `ca_data`, `cert_data`: PEM held in memory, never written to a file."""
        self._token = token
        if token_file is not None:
            token_source = token_file.read_text
        self._token_source = token_source
        self._token_every = token_every
        self._token_read_at = -token_every
        self._token_lock = threading.Lock()
        self._http = httpwire.Client(
            host,
            ssl_context=tls_context(ca_file, ca_data, cert, cert_data),
            timeout=timeout,
            headers={"Accept": "application/json"},
        )
        self.host = host

    @classmethod
    def from_kubeconfig(cls, path: str = "", context: str | None = None, timeout: float = 30.0) -> KubeClient:
        """From a kubeconfig file (its current context unless one is named), or in-cluster from
        the ServiceAccount when `path` is empty; `timeout` bounds each request but watches."""
        if not path:
            return cls.in_cluster(timeout=timeout)
        try:
            found = kubeconfig.load(path, context)
        except kubeconfig.Unsupported:
            return cls._from_plugin_kubeconfig(path, context, timeout)
        return cls(
            found.server,
            token=found.token,
            ca_file=found.ca_file,
            cert=found.cert,
            timeout=timeout,
            token_file=Path(found.token_file) if found.token_file else None,
            ca_data=found.ca_data,
            cert_data=found.cert_data,
        )

    @classmethod
    def _from_plugin_kubeconfig(cls, path: str, context: str | None, timeout: float) -> KubeClient:
        """A user of an exec plugin or auth provider: the `kubernetes` package runs it (imported
        only here: it costs every service 34 MiB), and runs it again every PLUGIN_REREAD_SECONDS
        (its credentials expire). The client certificate it may give is read into memory and the
        package's temporary copy removed."""

        def loaded() -> tuple[Any, str]:
            from kubernetes import client as k8s_client
            from kubernetes import config as k8s_config

            cfg = k8s_client.Configuration()
            k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
            auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken") or ""
            return cfg, bearer_token(auth)

        cfg, token = loaded()
        named = Path(path).read_text()
        cert_data = None
        if cfg.cert_file and cfg.key_file:
            cert_data = (_take(cfg.cert_file, named), _take(cfg.key_file, named))
        ca_data = _take(cfg.ssl_ca_cert, named) if cfg.ssl_ca_cert else b""
        return cls(
            cfg.host,
            token=token,
            timeout=timeout,
            ca_data=ca_data,
            cert_data=cert_data,
            token_source=lambda: loaded()[1],
            token_every=PLUGIN_REREAD_SECONDS,
        )

    @classmethod
    def in_cluster(
        cls,
        timeout: float = 30.0,
        account_dir: Path = SERVICE_ACCOUNT_DIR,
        env: Mapping[str, str] = os.environ,
    ) -> KubeClient:
        """As a Pod's ServiceAccount: the apiserver behind the `kubernetes` Service, the token the
        kubelet keeps fresh in the mounted file (re-read, not read once: it expires)."""
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise RuntimeError(
                "no --kubeconfig and not in a Pod (KUBERNETES_SERVICE_HOST/PORT unset): "
                "give --kubeconfig outside a cluster"
            )
        address = f"[{host}]" if ":" in host else host
        return cls(
            f"https://{address}:{port}",
            ca_file=str(account_dir / "ca.crt"),
            timeout=timeout,
            token_file=account_dir / "token",
        )

    def close(self) -> None:
        self._http.close()

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        token = self._current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _current_token(self) -> str:
        if self._token_source is None:
            return self._token
        with self._token_lock:
            now = time.monotonic()
            if now - self._token_read_at >= self._token_every or not self._token:
                try:
                    self._token = self._token_source().strip()
                    self._token_read_at = now
                except Exception as e:  # a file, an exec plugin: the last token may still be good
                    log.warning("cannot read the API token again", extra={"error": str(e)})
            return self._token

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> JSON:
        return self._request(method, path, params, body, content_type, timeout, None)

    def get_as(self, path: str, accept: str) -> JSON:
        """GET a JSON document served only as another media type (the JWKS's)."""
        return self._request("GET", path, None, None, "application/json", None, accept)

    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        timeout: float | None,
        accept: str | None,
    ) -> JSON:
        content = json.dumps(body).encode() if body is not None else None
        API_REQUESTS.inc(verb=method, resource=resource_of(path))
        headers = self._headers({"Content-Type": content_type} if content is not None else None)
        if accept is not None:
            headers["Accept"] = accept
        try:
            r = self._http.request(
                method,
                path,
                params=params,
                content=content,
                headers=headers,
                timeout=timeout,
            )
        except httpwire.HttpError as e:
            raise KubeError(0, "Unreachable", f"{method} {path}: {e}") from e
        if r.status_code >= 400:
            try:
                status = r.json()
                causes = (
                    ((status.get("details") or {}).get("causes") or []) if isinstance(status, dict) else []
                )
                raise KubeError(
                    r.status_code,
                    str(status.get("reason", "")),
                    str(status.get("message", r.text)),
                    tuple(str(c.get("message", "")) for c in causes if isinstance(c, dict)),
                )
            except ValueError:
                raise KubeError(r.status_code, "", r.text[:300]) from None
        return r.json() if r.content else {}

    def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any, params: Mapping[str, str] | None = None) -> JSON:
        return self.request("POST", path, body=body, params=params)

    def merge_patch(self, path: str, body: Any) -> JSON:
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def strategic_patch(self, path: str, body: Any) -> JSON:
        return self.request("PATCH", path, body=body, content_type="application/strategic-merge-patch+json")

    def json_patch(self, path: str, ops: list[JSON]) -> JSON:
        return self.request("PATCH", path, body=ops, content_type="application/json-patch+json")

    def delete(self, path: str, body: Any = None) -> JSON:
        return self.request("DELETE", path, body=body)

    def watch(self, path: str, params: Mapping[str, str], timeout_seconds: int = 300) -> Iterator[JSON]:
        """Stream watch events ({"type", "object"}) until the server closes the watch."""
        API_REQUESTS.inc(verb="WATCH", resource=resource_of(path))
        query = {
            **params,
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        try:
            r = self._http.request(
                "GET",
                path,
                params=query,
                headers=self._headers(),
                timeout=timeout_seconds + 30,
                connect_timeout=10.0,
                stream=True,
            )
        except httpwire.HttpError as e:
            raise KubeError(0, "Unreachable", f"WATCH {path}: {e}") from e
        with r:
            if r.status_code >= 400:
                raise KubeError(r.status_code, "", r.text[:300])
            try:
                for line in r.iter_lines():
                    if line:
                        yield orjson.loads(line)  # a third of json.loads's CPU (issue 40)
            except httpwire.HttpError as e:
                raise KubeError(0, "Unreachable", f"WATCH {path}: {e}") from e

    def reachable(self) -> bool:
        try:
            self.get("/version")
        except KubeError:
            return False
        return True


def rfc3339(micro: bool = False, at: dt.datetime | None = None) -> str:
    """A Kubernetes timestamp: metav1.Time (seconds) or, with `micro`, metav1.MicroTime."""
    t = at or dt.datetime.now(dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object) -> dt.datetime | None:
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None


# Pod phases after which no container of the Pod runs again.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def pod_finished(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def slim_identity(obj: JSON) -> JSON:
    """What every slim copy an informer caches keeps of an object's metadata: who it is, which
    version, its labels (the rest of each copy is its reader's own)."""
    meta = obj.get("metadata") or {}
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
        "labels": meta.get("labels") or {},
    }


def object_key(obj: JSON) -> str:
    """namespace/name (name alone for cluster objects): how caches and work queues name an object."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def tolerates(pod: JSON, key: str, value: str, effect: str) -> bool:
    """Whether one of the Pod's tolerations matches the taint for good (the kubelet's matching
    rules). A NoExecute toleration with `tolerationSeconds` only delays the taint manager's
    eviction: such a Pod does not stay, so it does not count."""
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") and t["effect"] != effect:
            continue
        if effect == "NoExecute" and t.get("tolerationSeconds") is not None:
            continue
        operator = t.get("operator", "Equal")
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t["key"] != key:
            continue
        if operator == "Exists" or t.get("value", "") == value:
            return True
    return False
