"""List+watch of one kind of object into a local cache, calling back with each changed key.

Like client-go's reflector: list, then watch from the list's resourceVersion; on a watch error or
410 Gone, list again. The cache is what reconcilers read, so they never call the API to look.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from tandem.discovery import Versioned
from tandem.kube import JSON, KubeClient, KubeError, object_key

log = logging.getLogger(__name__)


# How often an optional kind the cluster does not serve is looked for again.
ABSENT_RETRY_SECONDS = 60.0
# Objects per page of a list (client-go's pager: 500): a list of 10,000 Pods is never decoded
# whole, only a page at a time before it is slimmed (`transform`).
LIST_PAGE = 500

# An index: the values an object is filed under (client-go's IndexFunc).
IndexFunc = Callable[[JSON], list[str]]


class Informer:
    def __init__(
        self,
        kube: KubeClient,
        paths: list[str],
        params: Mapping[str, str],
        on_change: Callable[[str, JSON | None, JSON | None], None] = lambda key, old, new: None,
        indexes: Mapping[str, IndexFunc] | None = None,
        transform: Callable[[JSON], JSON] | None = None,
        optional: bool = False,
        api: Versioned | None = None,
        same: Callable[[JSON, JSON], bool] | None = None,
    ) -> None:
        """`paths`: one collection path per namespace watched (or one cluster-wide path).
        `indexes`: name -> what each object is filed under, for `by_index`. `transform`: what of
        each object to keep (the cache holds every object of the kind: keep only what is read).
        `optional`: a kind the cluster may not serve (an alpha API): a 404 counts as synced and
        empty, and the list is tried again now and then. `api`: the group whose served version
        fills `{api}` in the paths, discovered again at each list (a cluster upgraded under a
        running informer is followed); while none serves it, the kind counts as absent. `same`:
        whether a kept object shows nothing new against the cached one (e.g. only its
        resourceVersion moved): the cached object then stays, the very same object, and the
        cache's generation does not move (snapshots and what was worked out from them hold)."""
        self.optional = optional or api is not None
        self.api = api
        self.kube = kube
        self.paths = paths
        self.params = dict(params)
        self.on_change = on_change
        self.transform = transform
        self._indexers = dict(indexes or {})
        self._indexes: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._cache: dict[str, JSON] = {}
        self.same = same
        # Moves on every change of the cache: a snapshot is copied once per generation.
        self._generation = 0
        self._snapshot: tuple[int, Mapping[str, JSON]] = (-1, MappingProxyType({}))
        # Notified on every change: waiters (`wait_for`) wake on changes instead of polling.
        self._lock = threading.RLock()
        self._synced = [threading.Event() for _ in paths]
        # Why the last list or watch failed ("" once a list succeeds): what readiness quotes.
        self.trouble = ""
        # With `api`: the "group/version" listed last ("" while the cluster serves none), what a
        # writer of the kind writes to.
        self.served = ""

    def get(self, key: str) -> JSON | None:
        with self._lock:
            return self._cache.get(key)

    def items(self) -> list[JSON]:
        with self._lock:
            return list(self._cache.values())

    def snapshot(self) -> Mapping[str, JSON]:
        """Key -> object, read-only: for a caller about to read many keys. Copied once per
        generation of the cache and shared until it changes (kube-scheduler's UpdateSnapshot, in
        the small): a burst of Pods judged against 1,000 Nodes copies them once, not once a Pod."""
        with self._lock:
            generation, shared = self._snapshot
            if generation != self._generation:
                shared = MappingProxyType(dict(self._cache))
                self._snapshot = (self._generation, shared)
            return shared

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def by_index(self, index: str, value: str) -> list[JSON]:
        with self._lock:
            return [self._cache[k] for k in self._indexes[index].get(value, ())]

    def _put(self, key: str, obj: JSON | None) -> JSON | None:
        """Store (or with None, drop) an object and keep the indexes. Lock held."""
        cached = self._cache.get(key)
        if cached is not None and obj is not None and self.same is not None and self.same(cached, obj):
            return cached
        self._generation += 1
        old = self._cache.pop(key, None)
        if old is not None:
            for name, index_of in self._indexers.items():
                for value in index_of(old):
                    keys = self._indexes[name].get(value)
                    if keys is not None:
                        keys.discard(key)
                        if not keys:
                            del self._indexes[name][value]
        if obj is not None:
            self._cache[key] = obj
            for name, index_of in self._indexers.items():
                for value in index_of(obj):
                    self._indexes[name].setdefault(value, set()).add(key)
        return old

    @property
    def synced(self) -> bool:
        return all(e.is_set() for e in self._synced)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(e.wait(max(0.0, deadline - time.monotonic())) for e in self._synced)

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """One thread per path, until `stop`."""
        threads = [
            threading.Thread(target=self._run, args=(i, path, stop), name=f"informer-{i}", daemon=True)
            for i, path in enumerate(self.paths)
        ]
        for t in threads:
            t.start()
        return threads

    def run(self, stop: threading.Event) -> None:
        """`start`, and return once every thread has ended (what a manager waits for on a stop)."""
        for t in self.start(stop):
            t.join()

    def _run(self, index: int, template: str, stop: threading.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            path = template
            try:
                path = self._concrete(template)
                version = self._list(path)
                self._synced[index].set()
                self.trouble = ""
                backoff = 0.5
                current: str | None = version
                while current is not None and not stop.is_set():
                    current = self._watch(path, current)  # None: expired, list again
            except KubeError as e:
                if self.optional and e.status == 404:
                    self.served = ""
                    if not self._synced[index].is_set():
                        log.info("not served by this cluster; looking again later", extra={"path": path})
                    self._synced[index].set()
                    stop.wait(ABSENT_RETRY_SECONDS)
                    continue
                log.warning("watch failed; listing again", extra={"path": path, "error": str(e)})
                self.trouble = f"{path}: {e}"
                stop.wait(backoff)  # a stop ends the wait: a shutdown never sits out a backoff
                backoff = min(backoff * 2, 10.0)
            except Exception as e:
                log.exception("informer error", extra={"path": path})
                self.trouble = f"{path}: {type(e).__name__}: {e}"
                stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _concrete(self, template: str) -> str:
        """The path to list and watch: with `api`, in the version the cluster serves now."""
        if self.api is None:
            return template
        served = self.api.served(self.kube)
        if served is None:
            raise KubeError(404, "NotFound", f"no version of {self.api.group} serves {self.api.resource}")
        self.served = served
        return template.format(api=served)

    def _list(self, path: str) -> str:
        fresh, version = self._pages(path)
        with self._lock:
            mine = {k: v for k, v in self._cache.items() if self._belongs(k, path)}
            for key in mine.keys() - fresh.keys():
                self._put(key, None)
            for key, obj in fresh.items():
                self._put(key, obj)
        for key in mine.keys() - fresh.keys():
            self.on_change(key, mine[key], None)
        for key, obj in fresh.items():
            if mine.get(key, {}).get("metadata", {}).get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self.on_change(key, mine.get(key), obj)
        return version

    def _pages(self, path: str) -> tuple[dict[str, JSON], str]:
        """Every object at `path`, kept (`transform`), by key, and the list's resourceVersion; read
        a page at a time. A page token that expired (410) starts one whole list instead."""
        fresh: dict[str, JSON] = {}
        params = {**self.params, "limit": str(LIST_PAGE)}
        while True:
            try:
                listing = self.kube.get(path, params=params)
            except KubeError as e:
                if e.status != 410 or "continue" not in params:
                    raise
                fresh, params = {}, dict(self.params)
                continue
            # A list's items lack apiVersion and kind (the list carries them); the cache's objects
            # name them, as watched ones do, so that a write or an Event can name what it is about.
            kind = str(listing.get("kind") or "").removesuffix("List")
            for o in listing.get("items") or []:
                o.setdefault("apiVersion", listing.get("apiVersion"))
                if kind:
                    o.setdefault("kind", kind)
                fresh[object_key(o)] = self._keep(o)
            token = (listing.get("metadata") or {}).get("continue")
            if not token or "limit" not in params:
                return fresh, str(listing["metadata"]["resourceVersion"])
            params = {**self.params, "limit": str(LIST_PAGE), "continue": str(token)}

    def _keep(self, obj: JSON) -> JSON:
        return self.transform(obj) if self.transform is not None else obj

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
            new = None if kind == "DELETED" else self._keep(obj)
            with self._lock:
                old = self._put(key, new)
            self.on_change(key, old, new)
        return version
