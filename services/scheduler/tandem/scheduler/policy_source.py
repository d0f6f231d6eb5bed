"""The tenant policy as the scheduler holds it: read from its ConfigMap by an informer, so an edit
applies within seconds and without a restart (tandem.scheduler.policy says what it means)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tandem.informer import Informer
from tandem.kube import JSON, KubeClient
from tandem.scheduler import policy as p

log = logging.getLogger(__name__)


class PolicySource:
    def __init__(self, kube: KubeClient, ref: str, on_change: Callable[[], None]) -> None:
        """`ref`: `namespace/name` of the ConfigMap ("" for none: the open policy)."""
        self.ref = ref
        self.on_change = on_change
        self._policy = p.OPEN
        self._lock = threading.Lock()
        self.error = ""
        namespace, _, name = ref.partition("/")
        self.informer: Informer | None = None
        if ref:
            if not namespace or not name:
                raise ValueError(f"--policy-configmap must be NAMESPACE/NAME, got {ref!r}")
            self.informer = Informer(
                kube,
                [f"/api/v1/namespaces/{namespace}/configmaps"],
                {"fieldSelector": f"metadata.name={name}"},
                self._changed,
            )

    def start(self, stop: threading.Event) -> None:
        if self.informer is not None:
            self.informer.start(stop)

    @property
    def synced(self) -> bool:
        return self.informer is None or self.informer.synced

    def current(self) -> p.Policy:
        with self._lock:
            return self._policy

    def _changed(self, key: str, old: JSON | None, new: JSON | None) -> None:
        text = str(((new or {}).get("data") or {}).get(p.POLICY_KEY, ""))
        try:
            policy = p.parse(text)
        except p.PolicyError as e:
            # The last good policy stays: a typo must not open every namespace, nor close them.
            with self._lock:
                self.error = str(e)
            log.error(
                "tenant policy not applied; the previous one stays",
                extra={"configmap": self.ref, "error": str(e)},
            )
            return
        with self._lock:
            changed = policy != self._policy
            self._policy, self.error = policy, ""
        if changed:
            log.info(
                "tenant policy applied",
                extra={"configmap": self.ref, "namespaces": sorted(policy.namespaces)},
            )
            self.on_change()
