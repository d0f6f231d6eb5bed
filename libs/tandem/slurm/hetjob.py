"""A heterogeneous job seen as one. Slurm lists each component as a job of its own (job id = the
het job's id + its offset; squeue shows `12+0`, `12+1`), runs each component's prolog under its
own id, and allocates, starts and cancels them together: the batch script runs once, in the first
component, with the het job's id. Tandem submits a group whose members differ in shape as one
het job (tandem.scheduler.groups) and acts on it as on any job, by the het job's id: this module
folds the components into that one view, and nothing else needs to know there are several."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from tandem.slurm.models import HetComponent, Job, JobStatus


def het_job_id(status: JobStatus) -> int:
    """The id the whole job goes by: the het job's for a component, the job's own for any other."""
    return status.job.het_job_id or status.job_id


def is_component(status: JobStatus) -> bool:
    return status.job.het_job_id != 0


def merged(components: Iterable[JobStatus]) -> JobStatus | None:
    """The het job as one: the first component's state, name and flags (the script runs there and
    marks it started; Slurm moves every component together), every component's nodes in offset
    order, their node counts summed, and the components themselves. None until every component
    Slurm names (het_job_id_set) is there: a part of the job would be taken for all of it (its
    node count too small, its members bound to part of their nodes)."""
    parts = sorted(components, key=lambda s: s.job.het_job_offset)
    if not parts or parts[0].job.het_job_offset != 0:
        return None
    wanted = parts[0].job.het_job_ids
    if wanted and {p.job_id for p in parts} != set(wanted):
        return None
    first = parts[0]
    members = tuple(HetComponent(p.job_id, p.job.node_count, p.job.nodes) for p in parts)
    nodes = tuple(n for p in parts for n in p.job.nodes)
    job = replace(
        first.job,
        job_id=first.job.het_job_id or first.job_id,
        nodes=nodes,
        node_count=sum(p.job.node_count for p in parts),
        excluded_nodes=tuple(sorted({n for p in parts for n in p.job.excluded_nodes})),
        components=members,
        gres_detail=tuple(g for p in parts for g in _per_node(p.job)),
    )
    return replace(
        first,
        job=job,
        started=any(p.started for p in parts),
        terminating=any(p.terminating for p in parts),
        # Purged together; a component still known keeps the job known.
        gone=all(p.gone for p in parts),
    )


def _per_node(job: Job) -> tuple[str, ...]:
    """A component's GRES per node, "" for each node when it holds none (or Slurm listed fewer):
    the merged list stays aligned with the merged nodes."""
    if len(job.gres_detail) == len(job.nodes):
        return job.gres_detail
    return ("",) * len(job.nodes)
