"""Who a hook call speaks for, checked by the syncer itself (the gateway screens only the form):
a placeholder's credential (tandem.jobtoken) speaks for its own Slurm job on its own nodes, read
again from Slurm; a node's credential (tandem.nodetoken) for its own slurmd Pod's Slurm node."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from tandem import jobtoken, keys, placeholder
from tandem.nodetoken import ReviewUnavailable, TokenReviewer
from tandem.slurm.models import JobStatus
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.calls import CallContext, abort, require
from tandem.syncer.cluster import ClusterView
from tandem.syncer.mirror import SlurmMirror

A_PLACEHOLDERS_CALL = (
    "job_id and placeholder (the reference whose credential the caller presented) are required"
)


class Callers:
    def __init__(
        self,
        mirror: SlurmMirror,
        cluster: ClusterView,
        job_keys: Callable[[], list[bytes]] = list,
        node_tokens: TokenReviewer | None = None,
        accept_unbound_tokens: bool = False,
    ) -> None:
        self.mirror = mirror
        self.cluster = cluster
        # The job key ring (tandem.jobtoken): a placeholder's credential is checked here only (the
        # gateway screens its form and holds no key), so taking the gateway mints no token.
        self.job_keys = job_keys
        # A node's credential (tandem.nodetoken) is reviewed here, not taken from the gateway's
        # word: the gateway cannot check its signature. None refuses every lock and unlock.
        self.node_tokens = node_tokens
        # Tokens of version 1, bound to no job (tandem.jobtoken): only while an upgrade from a
        # Tandem that made them still has such jobs running.
        self.accept_unbound_tokens = accept_unbound_tokens

    def placeholder(
        self, context: CallContext, job_id: int, reference: str, slurm_node: str, job_token: str
    ) -> JobStatus:
        """The job as Slurm has it now, if it is the placeholder whose credential the caller
        presented, that credential is the job's own (under the job key, bound to the binding in
        its AdminComment), the job has not ended, and it is allocated the node the caller speaks
        for; otherwise the call is refused. A push is a hint: what it claims is read again from
        slurmrestd, never taken on its word."""
        require(context, job_id and placeholder.parse_job_name(reference), A_PLACEHOLDERS_CALL)
        # The token's own mac first, under the ring (the gateway holds no key: it screens the
        # form only): a forgery costs no read of Slurm.
        if not jobtoken.verifies(self.job_keys(), reference, job_token):
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the credential presented is not one of placeholder {reference}: no job key made it",
            )
        if not jobtoken.binding_of(job_token) and not self.accept_unbound_tokens:
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "an unbound job token (of a job submitted before credentials were bound to their job)"
                " is refused unless the syncer runs with --accept-unbound-job-tokens",
            )
        try:
            status = self.mirror.refresh_job(job_id)
        except SlurmApiError as e:
            abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot read job {job_id} from Slurm: {e}")
        if status is None or placeholder.reference_of(status.job.admin_comment) != reference:
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id} is not the placeholder {reference}: "
                "a placeholder's credential speaks for its own job only",
            )
        if placeholder.is_revoked(status.job.admin_comment):
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id}'s credential was revoked (its AdminComment says token-revoked)",
            )
        if jobtoken.binding_of(job_token) != placeholder.binding_of(status.job.admin_comment):
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the credential presented is not Slurm job {job_id}'s own: a job's token speaks for"
                " the one job it was made for (the binding in its AdminComment), not a later job of"
                " the same placeholder, and not once revoked",
            )
        if status.ended and "COMPLETING" not in status.job.flags:
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id} has ended ({status.state_name}): its credential ended with it",
            )
        if slurm_node and status.job.nodes and slurm_node not in status.job.nodes:
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id} is not allocated {slurm_node}: "
                "a placeholder speaks for its own nodes only",
            )
        return status

    def node(self, context: CallContext, slurm_node: str, node_token: str) -> None:
        """Refuses the call unless `node_token` is the credential of `slurm_node` itself: a token
        the API server vouches for (TokenReview, audience tandem-hooks), bound to the slurmd Pod
        this syncer sees for that node now (same uid: a deleted Pod's token is refused at once)."""
        if self.node_tokens is None or not node_token:
            abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                f"a lock or unlock of {slurm_node} needs that node's own credential: the token of its"
                f" slurmd Pod for the audience {keys.HOOKS_TOKEN_AUDIENCE}",
            )
        try:
            bound = self.node_tokens.bound_pod(node_token)
        except ReviewUnavailable as e:
            abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot review the node credential: {e}")
        if bound is None:
            abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "the node credential was refused by the API server's TokenReview (expired, its Pod"
                f" gone, or not for the audience {keys.HOOKS_TOKEN_AUDIENCE})",
            )
        ours = bound.namespace == self.cluster.slurmd_namespace
        pod = self.cluster.slurmd_pod(bound.name) if ours else None
        if pod is None or (pod.get("metadata") or {}).get("uid") != bound.uid:
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the node credential is bound to Pod {bound.namespace}/{bound.name}, which is not a"
                f" slurmd Pod of namespace {self.cluster.slurmd_namespace} now: it speaks for no Slurm node",
            )
        if bound.name != slurm_node:
            abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the node credential speaks for Slurm node {bound.name} (its slurmd Pod), not"
                f" {slurm_node}: a node locks and unlocks itself only",
            )
