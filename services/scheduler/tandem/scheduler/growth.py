"""A group whose size (a PodGroup's minCount, an LWS's size) grew past the nodes its job holds: a
pending job is replaced by one of the new size, a running one cannot grow (Slurm cannot add nodes
to a job), so the members past its nodes wait and say why."""

from __future__ import annotations

from tandem.scheduler import groups
from tandem.slurm.models import JobStatus


def outgrown(group: groups.Group, job: JobStatus) -> bool:
    """The group's minCount grew past the nodes its job asks for (or holds), as Slurm says them;
    for a het job, some component's past the nodes of its own."""
    if group.alone:
        return False
    if job.job.components and len(job.job.components) == len(group.components):
        return any(
            0 < c.node_count < g.min_count for c, g in zip(job.job.components, group.components, strict=True)
        )
    return 0 < job.job.node_count < group.min_count


def outgrown_before_it_ran(group: groups.Group, job: JobStatus) -> bool:
    """Ended without ever running, on fewer nodes than minCount asks now: the job decide cancels
    when minCount grows while it is pending. Its members wait for the new job, not deleted."""
    return job.ended and not job.started and not job.job.nodes and outgrown(group, job)


def size_name(group: groups.Group) -> str:
    return "minCount" if group.podgroup is not None else "size"


def outgrown_message(group: groups.Group, job: JobStatus) -> str:
    """Why members past a running job's nodes wait, when minCount grew after it started."""
    size, wanted, held = size_name(group), group.min_count, job.job.node_count
    if group.elastic:
        return (
            f"{group.title}'s {size} grew to {wanted} after Slurm job {job.job_id} was given {held} nodes:"
            " a Slurm job cannot grow, so once it runs, each member beyond its nodes gets a Slurm job of"
            " its own, linked to it (in its domain, at its priority)"
        )
    return (
        f"{group.title}'s {size} grew to {wanted} after Slurm job {job.job_id} started on {held} nodes: "
        "a running Slurm job cannot grow, so the members on its nodes keep running and this one waits "
        f"for one of them to free; set {size} back to {held}, or recreate the group to place all {wanted} "
        "as one job"
    )
