"""What a person reads of the scheduler's decisions: Events (`kubectl describe`), each Pod's
PodScheduled condition and a PodGroup's status. Events are posted off the reconcile's thread: a
slow Event never holds a bind back."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tandem.events import EventRecorder
from tandem.kube import JSON, KubeError
from tandem.scheduler import groups
from tandem.scheduler.podapi import PodApi
from tandem.scheduler.validation import Validation


class Announcer:
    def __init__(self, events: EventRecorder, pods: PodApi) -> None:
        self.events = events
        self.pods = pods
        self._background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="events")

    def event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        self._background.submit(self.events.record, obj, type_, reason, message)

    def flush(self) -> None:
        """Wait for every Event asked for so far to be posted (tests; a process stopping)."""
        self._background.shutdown(wait=True)
        self._background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="events")

    def group_event(
        self, group: groups.Group, members: tuple[JSON, ...], type_: str, reason: str, message: str
    ) -> None:
        """On the PodGroup when there is one, else on the group's first member (the LWS leader, or
        the Pod alone)."""
        self.event(group.podgroup if group.podgroup is not None else members[0], type_, reason, message)

    def group_status(
        self,
        group: groups.Group,
        scheduled: bool,
        reason: str,
        message: str,
        event: tuple[str, str] | None = None,
    ) -> None:
        if group.podgroup is None:
            return
        try:
            written = self.pods.set_group_scheduled(group.podgroup, scheduled, reason, message)
        except KubeError as e:
            if e.not_found:
                return
            raise
        if written and event is not None:
            self.event(group.podgroup, event[0], event[1], message)

    def pend(
        self,
        group: groups.Group,
        pods: tuple[JSON, ...],
        reason: str,
        message: str,
        event: str,
        of_group: bool = True,
    ) -> None:
        """Waiting, and why (a Warning Event too, named `event`, when the condition changed); the
        group's condition says it too unless not `of_group` (an elastic gang's extras: its core
        runs)."""
        for pod in pods:
            if self.pods.set_unscheduled(pod, reason, message) and event:
                self.event(pod, "Warning", event, message)
        if of_group:
            self.group_status(group, False, "Unschedulable", message)

    def refuse(self, group: groups.Group, pods: tuple[JSON, ...], reason: str, message: str) -> None:
        """Slurm said no (or never could): like a validation error, it is not retried."""
        for pod in pods:
            self.pods.set_unscheduled(pod, reason, message)
        self.group_event(group, pods, "Warning", "FailedScheduling", message)
        self.group_status(group, False, "Unschedulable", message)

    def warn_before_submit(self, pod: JSON, result: Validation) -> None:
        """What validation let through but the Pod's owner should hear."""
        for warning in result.warnings:
            self.event(pod, "Warning", "UnknownAnnotation", warning)
        if result.static_cpu:
            self.event(pod, "Warning", "StaticCPU", result.static_cpu)
