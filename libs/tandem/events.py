"""Kubernetes Events a person reads in `kubectl describe`: one per distinct thing that happened,
never a storm of repeats."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict

from tandem.kube import JSON, KubeClient, KubeError, rfc3339

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, kube: KubeClient, component: str, remember: int = 20_000) -> None:
        self.kube = kube
        self.component = component
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._remember = remember
        self._lock = threading.Lock()

    def record(self, obj: JSON, type_: str, reason: str, message: str) -> bool:
        """Post an Event about `obj` unless this exact one was already posted. True if posted."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid", "")), reason, message)
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = None
            if len(self._seen) > self._remember:
                self._seen.popitem(last=False)
        namespace = meta.get("namespace") or "default"
        now = rfc3339(micro=True)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", "v1"),
                "kind": obj.get("kind", "Pod"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": None,
            "count": 1,
        }
        try:
            self.kube.post(f"/api/v1/namespaces/{namespace}/events", event)
        except KubeError as e:
            with self._lock:
                self._seen.pop(key, None)
            log.warning("could not record event", extra={"reason": reason, "error": str(e)})
            return False
        return True
