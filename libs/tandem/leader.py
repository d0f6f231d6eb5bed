"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go's leaderelection does it:
the holder renews the Lease every few seconds; a candidate takes it over once the holder has not
renewed it for a whole lease duration. Losing the Lease ends the process (controller-runtime's
choice too): a fresh start is simpler to reason about than a half-stopped leader."""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from tandem.kube import JSON, KubeClient, KubeError, parse_rfc3339, rfc3339
from tandem.metrics import REGISTRY

log = logging.getLogger(__name__)

# Summed over a component's replicas it is 1 when someone leads, 0 when nobody does (the alert).
LEADING = REGISTRY.gauge("tandem_leader", "1 while this replica holds its Lease (leads), else 0", ["lease"])


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def pod_namespace(default: str = "default") -> str:
    """The namespace this process runs in (in a Pod), else `default`."""
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or default
    except OSError:
        return default


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class LeaderElector:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_seconds: float = 15.0,
        renew_seconds: float = 10.0,
        retry_seconds: float = 2.0,
    ) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.identity = identity or default_identity()
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.leading = threading.Event()
        LEADING.set(0, lease=name)

    def run(self, stop: threading.Event, on_started: Callable[[], None], on_lost: Callable[[], None]) -> None:
        """Block until leading, call `on_started`, keep renewing; call `on_lost` if that fails."""
        while not stop.is_set() and not self._try_acquire_or_renew():
            stop.wait(self.retry_seconds)
        if stop.is_set():
            return
        self.leading.set()
        LEADING.set(1, lease=self.name)
        log.info("became leader", extra={"lease": self.name, "identity": self.identity})
        # On its own thread: a start may take longer than the lease (the syncer waits for its
        # first Slurm poll), and the lease must be renewed meanwhile or a second leader starts.
        threading.Thread(target=on_started, name="leader-start", daemon=True).start()
        last_renewed = time.monotonic()
        while not stop.wait(self.retry_seconds):
            if self._try_acquire_or_renew():
                last_renewed = time.monotonic()
            elif time.monotonic() - last_renewed > self.renew_seconds:
                self.leading.clear()
                LEADING.set(0, lease=self.name)
                log.error("lost the lease", extra={"lease": self.name, "identity": self.identity})
                on_lost()
                return
        self._release()

    def _try_acquire_or_renew(self) -> bool:
        now = _now()
        try:
            lease = self.kube.get(self.path)
        except KubeError as e:
            if not e.not_found:
                log.warning("cannot read lease", extra={"lease": self.name, "error": str(e)})
                return False
            return self._create(now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = parse_rfc3339(spec.get("renewTime")) or parse_rfc3339(spec.get("acquireTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder and holder != self.identity and not expired:
            return False
        new_spec = dict(spec)
        new_spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "renewTime": rfc3339(micro=True, at=now),
            }
        )
        if holder != self.identity:
            new_spec["acquireTime"] = rfc3339(micro=True, at=now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if holder else 0)
        body = {**lease, "spec": new_spec}
        try:
            self.kube.request("PUT", self.path, body=body)  # resourceVersion in body: optimistic
        except KubeError as e:
            if e.status != 409:
                log.warning("cannot update lease", extra={"lease": self.name, "error": str(e)})
            return False
        return True

    def _create(self, now: dt.datetime) -> bool:
        body: JSON = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": rfc3339(micro=True, at=now),
                "renewTime": rfc3339(micro=True, at=now),
                "leaseTransitions": 0,
            },
        }
        try:
            self.kube.post(self.collection, body)
        except KubeError as e:
            if e.status != 409:
                log.warning("cannot create lease", extra={"lease": self.name, "error": str(e)})
            return False
        return True

    def _release(self) -> None:
        """Hand over at once on a clean stop, instead of making the next leader wait."""
        try:
            lease = self.kube.get(self.path)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = None
                self.kube.request("PUT", self.path, body=lease)
        except KubeError:
            pass
