"""A small raw-JSON Kubernetes API client on httpx.

The typed `kubernetes` client deserialises slowly (lab/KUBERNETES.md: 1.2 s vs 0.07 s for 4,000
Pods) and its binding call fails to parse the reply; Tandem's hot paths speak JSON directly. The
`kubernetes` package is still what reads kubeconfig files.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import ssl
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from tandem.metrics import REGISTRY

log = logging.getLogger(__name__)
API_REQUESTS = REGISTRY.counter(
    "tandem_kube_requests_total", "Kubernetes API requests made, by verb (watches included)", ["verb"]
)

JSON = dict[str, Any]


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
    ) -> None:
        verify: ssl.SSLContext | bool = True
        if ca_file:
            verify = ssl.create_default_context(cafile=ca_file)
            if cert:
                verify.load_cert_chain(*cert)
        self._token = token
        self._http = httpx.Client(
            base_url=host.rstrip("/"),
            verify=verify,
            timeout=timeout,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
            headers={"Accept": "application/json"},
        )
        self.host = host

    @classmethod
    def from_kubeconfig(cls, path: str = "", context: str | None = None, timeout: float = 30.0) -> KubeClient:
        """From a kubeconfig file (its current context unless one is named), or in-cluster from
        the ServiceAccount when `path` is empty; `timeout` bounds each request but watches."""
        cfg = k8s_client.Configuration()
        if path:
            k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        else:
            k8s_config.load_incluster_config(client_configuration=cfg)
        auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken") or ""
        token = auth.removeprefix("Bearer ").strip()
        cert = (cfg.cert_file, cfg.key_file) if cfg.cert_file and cfg.key_file else None
        return cls(cfg.host, token=token, ca_file=cfg.ssl_ca_cert, cert=cert, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

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
        content = json.dumps(body).encode() if body is not None else None
        API_REQUESTS.inc(verb=method)
        headers = self._headers({"Content-Type": content_type} if content is not None else None)
        try:
            r = self._http.request(
                method,
                path,
                params=params,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as e:
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
        API_REQUESTS.inc(verb="WATCH")
        query = {
            **params,
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        with self._http.stream(
            "GET",
            path,
            params=query,
            headers=self._headers(),
            timeout=httpx.Timeout(10.0, read=timeout_seconds + 30),
        ) as r:
            if r.status_code >= 400:
                r.read()
                raise KubeError(r.status_code, "", r.text[:300])
            for line in r.iter_lines():
                if line:
                    yield json.loads(line)

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
