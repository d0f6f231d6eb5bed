"""What is worked out from a Pod's spec, worked out once per version of the Pod: its requests and
its validation. A reconcile judges every member of a key each time it wakes (about eight times in a
Pod's life), and parsing quantities and checking annotations was a sixth of the scheduler's CPU in
a burst (issue 40).

A Pod's uid and resourceVersion name one content; a validation also depends on the KillWait,
--reject-static-cpu and the tenant policy it was checked against (the policy source hands out one
object per policy read, so a new policy is a new object). A Pod without a uid or resourceVersion
(a test's) is worked out every time.

The memo is an object (`PodMemo`), made by each scheduler's observer: two schedulers in one
process, or two tests, share nothing. `decide` reads the validations the observation carries."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from tandem.scheduler import validation
from tandem.scheduler.policy import Policy
from tandem.scheduler.validation import Pod, Validation

# Pods remembered: more than a burst's worth of pending Pods; the oldest go first.
CAPACITY = 20_000

T = TypeVar("T")


class _Memo(Generic[T]):
    """One entry per Pod (by uid), for its latest version: an entry per version had kept each Pod's
    eight or so versions until the capacity pushed them out, the scheduler's peak memory growing
    with the Pods it had seen (issue 40's scale runs)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._entries: OrderedDict[str, tuple[str, Hashable, Any, T]] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    def get(self, pod: Pod, context: Hashable, anchor: Any, work_out: Callable[[], T]) -> T:
        """The result for this version of the Pod in this context (`anchor` too must be the very
        object it was worked out with), else `work_out()`, remembered."""
        meta = pod.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return work_out()
        uid, version = str(uid), str(version)
        with self._lock:
            found = self._entries.get(uid)
        if found is not None and found[0] == version and found[1] == context and found[2] is anchor:
            return found[3]
        result = work_out()
        with self._lock:
            self._entries[uid] = (version, context, anchor, result)
            self._entries.move_to_end(uid)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return result

    def __len__(self) -> int:
        return len(self._entries)


class PodMemo:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._requests: _Memo[dict[str, int] | str] = _Memo(capacity)
        self._validations: _Memo[Validation] = _Memo(capacity)

    def requests(self, pod: Pod) -> dict[str, int]:
        """validation.effective_requests, once per version of the Pod (a copy: callers may change
        it). Raises ValueError as it does."""

        def work_out() -> dict[str, int] | str:
            try:
                return validation.effective_requests(pod)
            except ValueError as e:
                return str(e)

        found = self._requests.get(pod, None, None, work_out)
        if isinstance(found, str):
            raise ValueError(found)
        return dict(found)

    def validate(
        self,
        pod: Pod,
        kill_wait_seconds: float,
        reject_static_cpu: bool,
        policy: Policy | None,
        kill_wait_source: str,
    ) -> Validation:
        """validation.validate, once per version of the Pod and what it is checked against."""
        return self._validations.get(
            pod,
            (kill_wait_seconds, reject_static_cpu, kill_wait_source),
            policy,
            lambda: validation.validate(pod, kill_wait_seconds, reject_static_cpu, policy, kill_wait_source),
        )
