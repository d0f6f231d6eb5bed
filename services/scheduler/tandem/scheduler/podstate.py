"""What a member's own object says of where it stands: live or going, bound, nominated, refused by
this scheduler, the job it recorded."""

from __future__ import annotations

from tandem import keys, reasons
from tandem.kube import JSON, pod_finished, tolerates
from tandem.scheduler.podapi import condition


def preempted(pod: JSON) -> bool:
    """kube-scheduler evicted it to make room for a higher priority (its DisruptionTarget says so)."""
    c = condition(pod, keys.DISRUPTION_TARGET) or {}
    return c.get("status") == "True" and c.get("reason") == reasons.PREEMPTED_BY_SCHEDULER


def is_live(pod: JSON) -> bool:
    """Neither being deleted nor finished: a member its group's job is for."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and not pod_finished(pod)


def bound(pod: JSON) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def carries(pod: JSON, recorded: int | None, job_id: int, alone: bool) -> bool:
    """Whether a member is the job's: it recorded the job (`recorded`), or it is a Pod alone
    (`alone`) that recorded none and records its job at its bind. Such a Pod tolerates the lock
    already (the chart's admission policy gave it the toleration when it was created, or its
    author did): it needs no write before the bind, which records the job id (the API server copies
    a Binding's annotations onto the Pod), and its jobs are found by its uid in their names. One
    request per Pod fewer (issue 55); a Pod without it gets both in one write after the submit."""
    if recorded is not None or not alone:
        return recorded == job_id
    return tolerates(pod, keys.LOCK_KEY, keys.LOCK_TAINT_VALUE, keys.LOCK_TAINT_EFFECT)


def uid(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def nominated(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("nominatedNodeName") or "")


def says(pod: JSON, reason: str, message: str) -> bool:
    """Its PodScheduled condition is False with this reason and message already."""
    c = condition(pod, "PodScheduled") or {}
    return (c.get("status"), c.get("reason"), c.get("message")) == ("False", reason, message)


def refused(pod: JSON) -> bool:
    """This scheduler refused the Pod (invalid, or Slurm said no): it stays so until recreated."""
    c = condition(pod, "PodScheduled")
    return c is not None and c.get("status") == "False" and c.get("reason") in reasons.REFUSED_REASONS
