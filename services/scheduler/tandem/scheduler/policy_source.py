"""The tenant policy as the scheduler holds it: read from its ConfigMap by an informer, so an edit
applies within seconds and without a restart (tandem.scheduler.policy says what it means).

It never reopens: a ConfigMap deleted or edited into something that does not parse leaves the
last good policy in force, and one absent from the start leaves the built-in one (no root, no
default user, priority capped). Each such state is said three ways: a Warning Event on the
ConfigMap, the gauge `tandem_policy_stale{reason}`, and `stale` (a readiness reason).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tandem.events import EventRecorder
from tandem.informer import Informer
from tandem.kube import JSON, KubeClient, KubeError
from tandem.metrics import REGISTRY
from tandem.scheduler import policy as p

log = logging.getLogger(__name__)

# Why the policy in force is not the ConfigMap's text (the gauge's `reason` label).
ABSENT = "absent"  # not found since the start: the built-in policy
DELETED = "deleted"  # deleted after a good one was read: that one stays
UNPARSABLE = "unparsable"  # its text is not a policy: the last good one stays
UNREAD = "unread"  # cannot be listed at all (RBAC, apiserver): nothing is scheduled
STALE_REASONS = (ABSENT, DELETED, UNPARSABLE, UNREAD)
EVENT_STALE = "TenantPolicyStale"
EVENT_APPLIED = "TenantPolicyApplied"
# How long the informer may take to list the ConfigMap before the source asks why itself.
UNREAD_AFTER_SECONDS = 5.0


class PolicySource:
    def __init__(
        self,
        kube: KubeClient,
        ref: str,
        on_change: Callable[[p.Policy, p.Policy], None] = lambda old, new: None,
        events: EventRecorder | None = None,
    ) -> None:
        """`ref`: `namespace/name` of the ConfigMap ("" for none: the built-in policy). `on_change`:
        told the policy in force before and after it changed (tandem.scheduler.watches.register
        sets it)."""
        self.ref = ref
        self.kube = kube
        self.on_change = on_change
        self.events = events if events is not None else EventRecorder(kube, "tandem-scheduler")
        self._policy = p.BUILTIN
        self._lock = threading.Lock()
        # (reason, what a person reads) while the policy in force is not the ConfigMap's text.
        self._stale: tuple[str, str] | None = None
        self._read_once = False
        namespace, _, name = ref.partition("/")
        self.namespace, self.name = namespace, name
        self.informer: Informer | None = None
        if ref:
            if not namespace or not name:
                raise ValueError(f"--policy-configmap must be NAMESPACE/NAME, got {ref!r}")
            self.informer = Informer(
                kube,
                [self._collection],
                {"fieldSelector": f"metadata.name={name}"},
                self._changed,
            )
        REGISTRY.gauge(
            "tandem_policy_stale",
            "1 while the tenant policy in force is not its ConfigMap's text, by why: absent (the "
            "built-in policy), deleted or unparsable (the last good one), unread (cannot be listed)",
            ["reason"],
            collect=self._gauge,
        )

    @property
    def _collection(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps"

    def start(self, stop: threading.Event) -> None:
        if self.informer is not None:
            self.informer.start(stop)
            threading.Thread(target=self._watch_sync, args=(stop,), name="policy-sync", daemon=True).start()

    @property
    def synced(self) -> bool:
        return self.informer is None or self.informer.synced

    def current(self) -> p.Policy:
        with self._lock:
            return self._policy

    @property
    def trouble(self) -> str:
        """Why it has not been read (tandem.sources): the ConfigMap's trouble, or the listing's."""
        return self.stale or (self.informer.trouble if self.informer is not None else "")

    @property
    def stale(self) -> str:
        """Why the policy in force is not the ConfigMap's text, for a person ("" when it is)."""
        with self._lock:
            return self._stale[1] if self._stale is not None else ""

    def _gauge(self) -> dict[tuple[str, ...], float]:
        with self._lock:
            reason = self._stale[0] if self._stale is not None else ""
        return {(r,): 1.0 if r == reason else 0.0 for r in STALE_REASONS}

    # -- what the informer sees ----------------------------------------------------------------

    def _changed(self, key: str, old: JSON | None, new: JSON | None) -> None:
        if new is None:
            self._deleted(old)
            return
        text = str((new.get("data") or {}).get(p.POLICY_KEY, ""))
        try:
            policy = p.parse(text)
        except p.PolicyError as e:
            with self._lock:
                kept = "the last good policy stays" if self._read_once else "the built-in policy applies"
            self._mark_stale(UNPARSABLE, f"does not parse ({e}): {kept}", new)
            return
        with self._lock:
            before = self._policy
            changed = policy != before
            recovered = self._stale is not None and self._stale[0] != UNREAD
            self._policy, self._stale, self._read_once = policy, None, True
        if recovered:
            self._event(new, "Normal", EVENT_APPLIED, f"tenant policy ConfigMap {self.ref} applied again")
        if changed:
            log.info(
                "tenant policy applied",
                extra={"configmap": self.ref, "namespaces": sorted(policy.namespaces)},
            )
            self.on_change(before, policy)

    def _deleted(self, old: JSON | None) -> None:
        with self._lock:
            read = self._read_once
        if read:
            self._mark_stale(
                DELETED, "was deleted: the last good policy stays until it is created again", old
            )
        else:
            self._absent()

    def _absent(self) -> None:
        self._mark_stale(
            ABSENT,
            "is not found: the built-in policy applies until it is created (no uid or gid 0, no "
            f"default user, priority at most {p.DEFAULT_MAX_PRIORITY})",
            None,
        )

    def _mark_stale(self, reason: str, why: str, obj: JSON | None) -> None:
        message = f"tenant policy ConfigMap {self.ref} {why}"
        with self._lock:
            if self._stale == (reason, message):
                return
            self._stale = (reason, message)
        log.error(message, extra={"configmap": self.ref, "reason": reason})
        self._event(obj, "Warning", EVENT_STALE, message)

    def _event(self, obj: JSON | None, type_: str, reason: str, message: str) -> None:
        """On the ConfigMap (a reference to it when it is gone), off the informer's thread."""
        meta = (obj or {}).get("metadata") or {}
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "namespace": self.namespace,
                "name": self.name,
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        threading.Thread(
            target=self.events.record, args=(ref, type_, reason, message), name="policy-event", daemon=True
        ).start()

    # -- the first list ------------------------------------------------------------------------

    def _watch_sync(self, stop: threading.Event) -> None:
        """Until the informer has listed the ConfigMap: say why it cannot (the informer retries
        quietly), then whether it was there at all (an empty list calls back nothing)."""
        informer = self.informer
        assert informer is not None
        while not stop.is_set() and not informer.wait_synced(UNREAD_AFTER_SECONDS):
            self._unread(self._why_unread())
        if stop.is_set():
            return
        with self._lock:
            if self._stale is not None and self._stale[0] == UNREAD:
                self._stale = None
            read = self._read_once
        if not read and not informer.items():
            self._absent()

    def _why_unread(self) -> str:
        try:
            self.kube.get(self._collection, params={"fieldSelector": f"metadata.name={self.name}"})
        except KubeError as e:
            return str(e)
        except Exception as e:  # unreachable apiserver: the informer logs it too
            return f"{type(e).__name__}: {e}"
        return "not listed yet"

    def _unread(self, why: str) -> None:
        message = (
            f"tenant policy ConfigMap {self.ref} cannot be read ({why}): no Pod is scheduled until it can"
        )
        with self._lock:
            if self._stale == (UNREAD, message):
                return
            self._stale = (UNREAD, message)
        log.error(message, extra={"configmap": self.ref, "reason": UNREAD})
