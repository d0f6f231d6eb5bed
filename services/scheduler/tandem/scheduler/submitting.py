"""The Submit step: a placeholder job for a Pod alone or one job for a whole group, submitted as
the Pods' user, its id recorded on every member; Slurm's answer sorted into retried (not reached,
or its topology being rewritten) and refused for good (the Pod's or group's Event says why)."""

from __future__ import annotations

import dataclasses
import logging
import time

from tandem import keys, reasons, tracing
from tandem.kube import JSON, object_key
from tandem.metrics import REGISTRY
from tandem.runner import NotYet
from tandem.scheduler import actions, groups, jobspec, podstate
from tandem.scheduler.hands import Hands
from tandem.scheduler.observe import extra_owner, owner
from tandem.slurm.dialects import UnsupportedBySlurm
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmApiError, refused_its_features, waits_for_topology
from tandem.transient import unreachable

log = logging.getLogger(__name__)

PODS_VALIDATED = REGISTRY.counter(
    "tandem_pods_validated_total",
    "Pods checked before a job is made, by result and failing field (once per Pod)",
    ["result", "reason"],
)
JOBS_SUBMITTED = REGISTRY.counter("tandem_jobs_submitted_total", "placeholder job submissions", ["result"])
SUBMIT_SECONDS = REGISTRY.histogram("tandem_submit_seconds", "time to submit a placeholder job")


def submit(
    h: Hands,
    placeholder: jobspec.PlaceholderConfig,
    group: groups.Group,
    action: actions.Submit,
    kill_wait: float,
) -> None:
    attributes = (
        {"k8s.pod": group.key} if group.alone else {"k8s.group": group.key, "members": len(action.members)}
    )
    with tracing.span(
        "submit placeholder job" if group.alone else "submit group job", attributes=attributes
    ) as span:
        for pod, result in zip(action.members, action.validations, strict=True):
            h.announce.warn_before_submit(pod, result)
        spec = jobspec.with_trace_context(
            job_spec(placeholder, group, action, kill_wait), tracing.current_traceparent()
        )
        started = time.monotonic()
        try:
            # Root submits on the Pod user's behalf (as SUNK does over RPC): uid, gid and priority
            # all apply.
            job_id = h.writers.slurm.submit_job(spec)
        except (SlurmApiError, UnsupportedBySlurm) as e:
            _not_submitted(h, group, action, e)
            return
        JOBS_SUBMITTED.inc(result="ok")
        for _ in action.members:
            PODS_VALIDATED.inc(result="valid", reason="")
        span.set_attribute("slurm.job_id", job_id)
        SUBMIT_SECONDS.observe(time.monotonic() - started)
        _submitted(h, group, action.members, spec, job_id)


def submit_extras(
    h: Hands,
    placeholder: jobspec.PlaceholderConfig,
    group: groups.Group,
    action: actions.SubmitExtras,
    kill_wait: float,
) -> None:
    """A job for each extra member of an elastic gang; one Slurm refuses is refused alone (the
    core and the other extras run on), one Slurm cannot be reached for is tried again."""
    cfg = _told(placeholder, kill_wait)
    for pod, result in zip(action.members, action.validations, strict=True):
        with tracing.span(
            "submit extra member job", attributes={"k8s.group": group.key, "k8s.pod": object_key(pod)}
        ):
            spec = jobspec.with_trace_context(
                jobspec.build_extra_job_spec(
                    group.ref,
                    pod,
                    cfg,
                    result.requests,
                    result.job_annotations,
                    action.taken,
                    action.domain,
                    action.of_core,
                ),
                tracing.current_traceparent(),
            )
            try:
                job_id = h.writers.slurm.submit_job(spec)
            except (SlurmApiError, UnsupportedBySlurm) as e:
                one = actions.Submit((pod,), (result,))
                _not_submitted(h, group, one, e, extra=True)
                continue
        JOBS_SUBMITTED.inc(result="ok")
        h.assumed.submitted.assume(extra_owner(group.key, str(pod["metadata"]["uid"])), job_id)
        h.jobs.announce(job_id, spec.name)
        log.info(
            "extra member job submitted",
            extra={"pod": group.key, "member": object_key(pod), "job": job_id, "core": action.core_job_id},
        )
        h.record(pod, job_id)
        said = (
            f"job {job_id} for this member of {group.title} within its minCount submitted, linked to"
            f" its core (Slurm job {action.core_job_id}, which runs and cannot grow), at the core's"
            " priority"
            if action.of_core
            else f"job {job_id} for this extra member of {group.title} submitted (its core, Slurm job "
            f"{action.core_job_id}, runs; Slurm takes extras back first)"
        )
        h.announce.event(pod, "Normal", "SlurmJobSubmitted", said)


def _told(placeholder: jobspec.PlaceholderConfig, kill_wait: float) -> jobspec.PlaceholderConfig:
    """`kill_wait`: the KillWait the members were validated against, which the placeholder script
    is told (TANDEM_KILL_WAIT) so it leaves before Slurm's SIGKILL."""
    return dataclasses.replace(
        placeholder, environment={**placeholder.environment, "TANDEM_KILL_WAIT": str(int(kill_wait))}
    )


def job_spec(
    placeholder: jobspec.PlaceholderConfig, group: groups.Group, action: actions.Submit, kill_wait: float
) -> JobSpec:
    """`kill_wait`: see `_told`."""
    cfg = _told(placeholder, kill_wait)
    return jobspec.build_group_job_spec(
        group.ref,
        action.members,
        cfg,
        [v.requests for v in action.validations],
        action.excluded,
        action.validations[0].job_annotations,  # the members agree (validation.disagreements)
        action.components,
        [v.gpu_type for v in action.validations],
        action.domains,
    )


def _not_submitted(
    h: Hands,
    group: groups.Group,
    action: actions.Submit,
    e: SlurmApiError | UnsupportedBySlurm,
    extra: bool = False,
) -> None:
    """Retried (raises for the runner's backoff) or refused for good. `extra`: the job of an
    elastic gang's extra member (its refusal is its own; the group runs on)."""
    members = action.members
    what = "the placeholder job" if group.alone else "an extra member's job" if extra else "the group's job"
    if isinstance(e, UnsupportedBySlurm):
        JOBS_SUBMITTED.inc(result="refused")
        who = "this Pod" if group.alone or extra else group.title
        _refuse(h, group, members, f"Slurm cannot run {who}: {e}", extra)
        return
    if unreachable(e.status):
        JOBS_SUBMITTED.inc(result="error")
        h.announce.pend(
            group,
            members,
            reasons.REASON_SLURM_UNAVAILABLE,
            f"cannot submit {what}, retrying: {e.summary}",
            reasons.REASON_SLURM_UNAVAILABLE,
            not extra,
        )
        raise e
    waiting = _topology_not_ready(e, action, what)
    if waiting:
        # Not the Pod's fault, and over with the next topology change: refused for good, it would
        # stay Pending with no job for ever.
        JOBS_SUBMITTED.inc(result="error")
        h.announce.pend(
            group,
            members,
            reasons.REASON_UNSCHEDULABLE,
            f"{waiting}, retrying: {e.summary}",
            "FailedScheduling",
            not extra,
        )
        raise NotYet(waiting) from e
    JOBS_SUBMITTED.inc(result="refused")
    refused = what if group.alone or extra else f"the job of {group.title}"
    _refuse(h, group, members, f"Slurm refused {refused}: {e}", extra)


def _refuse(h: Hands, group: groups.Group, members: tuple[JSON, ...], message: str, extra: bool) -> None:
    if not extra:
        h.announce.refuse(group, members, reasons.REASON_SUBMIT_FAILED, message)
        return
    for pod in members:  # the core runs: the group's condition and Events stay its own
        h.writers.pods.set_unscheduled(pod, reasons.REASON_SUBMIT_FAILED, message)
        h.announce.event(pod, "Warning", "FailedScheduling", message)


def _topology_not_ready(e: SlurmApiError, action: actions.Submit, what: str) -> str:
    """Why Slurm refused the job for its topology as it is now ("" when it refused it otherwise):
    its topology does not join the nodes (being rewritten, say), or the job names only the domain
    features the syncer gives nodes and Slurm has not taken them yet (its reconfigure drops them
    until they are set again, issue 53). A feature of the Pods' own constraints may be a typo: that
    refusal stands."""
    if waits_for_topology(e):
        return f"Slurm cannot place {what} on its topology as it is now"
    own = action.validations[0].job_annotations.get(keys.CONSTRAINTS, "") if action.validations else ""
    if refused_its_features(e) and any(action.domains) and not own:
        return (
            f"Slurm does not know the topology domains {what} asks for yet (its nodes' features are"
            " being set again)"
        )
    return ""


def _submitted(h: Hands, group: groups.Group, members: tuple[JSON, ...], spec: JobSpec, job_id: int) -> None:
    """Remembered until the job stream shows it, recorded on every member, and (for a group) said."""
    h.assumed.submitted.assume(owner(group.target, members), job_id)
    h.remember_excludes(job_id, spec.excluded_nodes)
    h.jobs.announce(job_id, spec.name)
    log.info(
        "placeholder job submitted",
        extra={
            "pod": group.key,
            "job": job_id,
            "nodes": len(members),
            "uid": spec.user_id,
            "gid": spec.group_id,
        },
    )
    for pod in members:
        if not podstate.carries(pod, None, job_id, group.alone):  # else its bind records it
            h.record(pod, job_id)
    if group.alone:
        # No Event: a Pod alone reads its job in its PodScheduled condition while the job pends
        # and in its Scheduled Event once bound, as kube-scheduler's Pods do; one Event more was a
        # quarter of the API requests Tandem made per Pod (issue 22).
        return
    where = f" to partition {spec.partition}" if spec.partition else ""
    if spec.components:
        parts = ", ".join(
            f"{c.nodes} for {g.name}" for c, g in zip(spec.components, group.components, strict=False)
        )
        message = (
            f"heterogeneous job {job_id} for {group.title} ({len(members)} nodes, one per member: "
            f"{parts}; each sized for its own members) submitted{where}"
        )
    else:
        message = f"job {job_id} for {group.title} ({spec.nodes} nodes, one per member) submitted{where}"
    h.announce.group_event(group, members, "Normal", "SlurmJobSubmitted", message)
