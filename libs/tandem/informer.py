"""List+watch of one kind of object into a local cache, calling back with each changed key.

Like client-go's reflector: list, then watch from the list's resourceVersion; on a watch error or
410 Gone, list again. The cache is what reconcilers read, so they never call the API to look.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from tandem.kube import JSON, KubeClient, KubeError

log = logging.getLogger(__name__)


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


class Informer:
    def __init__(
        self,
        kube: KubeClient,
        paths: list[str],
        params: Mapping[str, str],
        on_change: Callable[[str, JSON | None, JSON | None], None],
    ) -> None:
        """`paths`: one collection path per namespace watched (or one cluster-wide path)."""
        self.kube = kube
        self.paths = paths
        self.params = dict(params)
        self.on_change = on_change
        self._cache: dict[str, JSON] = {}
        self._lock = threading.Lock()
        self._synced = [threading.Event() for _ in paths]

    def get(self, key: str) -> JSON | None:
        with self._lock:
            return self._cache.get(key)

    def items(self) -> list[JSON]:
        with self._lock:
            return list(self._cache.values())

    @property
    def synced(self) -> bool:
        return all(e.is_set() for e in self._synced)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(e.wait(max(0.0, deadline - time.monotonic())) for e in self._synced)

    def start(self, stop: threading.Event) -> None:
        for i, path in enumerate(self.paths):
            threading.Thread(
                target=self._run, args=(i, path, stop), name=f"informer-{i}", daemon=True
            ).start()

    def _run(self, index: int, path: str, stop: threading.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            try:
                version = self._list(path)
                self._synced[index].set()
                backoff = 0.5
                current: str | None = version
                while current is not None and not stop.is_set():
                    current = self._watch(path, current)  # None: expired, list again
            except KubeError as e:
                log.warning("watch failed; listing again", extra={"path": path, "error": str(e)})
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception:
                log.exception("informer error", extra={"path": path})
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _list(self, path: str) -> str:
        listing = self.kube.get(path, params=self.params)
        fresh = {object_key(o): o for o in listing.get("items") or []}
        with self._lock:
            mine = {k: v for k, v in self._cache.items() if self._belongs(k, path)}
            for key in mine.keys() - fresh.keys():
                del self._cache[key]
            self._cache.update(fresh)
        for key in mine.keys() - fresh.keys():
            self.on_change(key, mine[key], None)
        for key, obj in fresh.items():
            if mine.get(key, {}).get("metadata", {}).get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self.on_change(key, mine.get(key), obj)
        return str(listing["metadata"]["resourceVersion"])

    def _belongs(self, key: str, path: str) -> bool:
        if len(self.paths) == 1:
            return True
        namespace = path.split("/namespaces/", 1)[1].split("/", 1)[0]
        return key.startswith(f"{namespace}/")

    def _watch(self, path: str, version: str) -> str | None:
        for event in self.kube.watch(path, {**self.params, "resourceVersion": version}):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    return None
                raise KubeError(
                    int(obj.get("code") or 0), str(obj.get("reason", "")), str(obj.get("message", ""))
                )
            version = str(obj["metadata"]["resourceVersion"])
            if kind == "BOOKMARK":
                continue
            key = object_key(obj)
            with self._lock:
                old = self._cache.get(key)
                if kind == "DELETED":
                    self._cache.pop(key, None)
                else:
                    self._cache[key] = obj
            self.on_change(key, old, None if kind == "DELETED" else obj)
        return version
