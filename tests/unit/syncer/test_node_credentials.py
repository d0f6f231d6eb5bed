"""A node locks and unlocks itself only: the syncer has the API server review the credential a
prolog or epilog presented (the bound token of a slurmd Pod, tandem.nodetoken) and takes the Slurm
node it speaks for from the Pod it is bound to, as its informer sees that Pod now. Root on one
Slurm node (or a tenant able to read some other token) cannot lock or unlock another node, and a
token outlives neither its Pod nor a recreation of it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

import grpc
import httpx
import pytest

from tandem import keys, serving
from tandem.hooks.gateway import HooksGateway
from tandem.kube import KubeError
from tandem.nodetoken import TOKEN_REVIEWS, ReviewUnavailable, TokenReviewer
from tandem.syncer.locking import NodeLockView
from tandem.syncer.main import grpc_service, token_review
from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2, syncer_pb2_grpc
from tests.unit.node_credentials import node_token
from tests.unit.servicer_calls import call, steps_done
from tests.unit.syncer_world import SLURMD_NS, World, _pod, _slurmd, api_server_review, node_token_for


class Aborted(Exception):
    pass


class ApiServer:
    """TokenReviews, each counted: it vouches for the Pod a token names (api_server_review), unless
    it was told to refuse the token or is down."""

    def __init__(self) -> None:
        self.reviewed: list[str] = []
        self.refused: set[str] = set()
        self.down = False

    def __call__(self, token: str) -> Mapping[str, Any]:
        self.reviewed.append(token)
        if self.down:
            raise ReviewUnavailable("TokenReview failed: HTTP 0 Unreachable: connection refused")
        if token in self.refused:
            return {"status": {"authenticated": False, "error": "token has been invalidated"}}
        return api_server_review(token)


class Syncer:
    """A SyncerServicer over real informer caches (gpu-000 and gpu-001 have slurmd Pods) and a
    stand-in for the node locks, which records whether a lock or unlock was ever asked for."""

    def __init__(self, reviews: bool = True) -> None:
        self.world = World()
        self.world.add_pod(_slurmd("gpu-000", "node-0"))
        self.world.add_pod(_slurmd("gpu-001", "node-1"))
        self.api = ApiServer()
        self.locks = mock.Mock()
        self.locks.cap = 0.0
        self.locks.acquire_steps.side_effect = lambda node, job, strict, timeout: steps_done(
            NodeLockView(node, "node-0", keys.LockState.LOCKED, [job])
        )
        self.locks.release_steps.side_effect = lambda node, job, timeout: steps_done(
            NodeLockView(node, "node-0", keys.LockState.FALSE)
        )
        mirror = mock.Mock()
        mirror.state.job.return_value = None
        mirror.refresh_job.return_value = None  # not a placeholder: a plain lock
        self.servicer = SyncerServicer(
            mirror,
            self.locks,
            mock.Mock(),
            self.world.cluster,
            30.0,
            node_tokens=TokenReviewer(self.api) if reviews else None,
        )
        self.servicer.active = True

    def call(self, method: str, slurm_node: str, token: str) -> tuple[grpc.StatusCode, str]:
        """The call's outcome: OK, or the code and message it was refused with."""
        context = mock.Mock()
        context.time_remaining.return_value = 30.0
        context.abort.side_effect = Aborted
        if method == "AcquireNodeLock":
            request: Any = syncer_pb2.AcquireNodeLockRequest(
                slurm_node=slurm_node, job_id=7, node_token=token
            )
        else:
            request = syncer_pb2.ReleaseNodeLockRequest(slurm_node=slurm_node, job_id=7, node_token=token)
        try:
            call(getattr(self.servicer, method), request, context)
        except Aborted:
            code, message = context.abort.call_args.args
            return code, message
        return grpc.StatusCode.OK, ""

    def untouched(self) -> bool:
        """No lock or unlock was asked of the node locks."""
        return not self.locks.acquire_steps.called and not self.locks.release_steps.called


CALLS = ["AcquireNodeLock", "ReleaseNodeLock"]


@pytest.fixture
def syncer() -> Syncer:
    return Syncer()


@pytest.mark.parametrize("method", CALLS)
def test_a_nodes_own_credential_locks_and_unlocks_it(syncer: Syncer, method: str) -> None:
    assert syncer.call(method, "gpu-000", node_token_for("gpu-000")) == (grpc.StatusCode.OK, "")
    assert syncer.call(method, "gpu-001", node_token_for("gpu-001")) == (grpc.StatusCode.OK, "")
    if method == "AcquireNodeLock":
        assert [c.args[:3] for c in syncer.locks.acquire_steps.call_args_list] == [
            ("gpu-000", 7, False),
            ("gpu-001", 7, False),
        ]
    else:
        assert [c.args[:2] for c in syncer.locks.release_steps.call_args_list] == [
            ("gpu-000", 7),
            ("gpu-001", 7),
        ]


@pytest.mark.parametrize("method", CALLS)
def test_a_call_without_a_credential_is_unauthenticated(syncer: Syncer, method: str) -> None:
    """Another caller with the gateway's certificate (or a gateway of old) that sends no token."""
    code, message = syncer.call(method, "gpu-000", "")
    assert code == grpc.StatusCode.UNAUTHENTICATED and "needs that node's own credential" in message
    assert syncer.untouched() and syncer.api.reviewed == []


@pytest.mark.parametrize("method", CALLS)
def test_a_syncer_without_a_reviewer_refuses_every_lock_and_unlock(method: str) -> None:
    syncer = Syncer(reviews=False)
    code, _ = syncer.call(method, "gpu-000", node_token_for("gpu-000"))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert syncer.untouched()


@pytest.mark.parametrize("method", CALLS)
def test_a_credential_the_review_refuses_is_unauthenticated(syncer: Syncer, method: str) -> None:
    """The API server says no (a forged signature, a token of a deleted Pod, a revoked one): the
    unsigned claims naming gpu-000 count for nothing."""
    forged = node_token_for("gpu-000")
    syncer.api.refused.add(forged)
    code, message = syncer.call(method, "gpu-000", forged)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "refused by the API server's TokenReview" in message
    assert syncer.untouched() and syncer.api.reviewed == [forged]


@pytest.mark.parametrize(
    "token",
    [node_token("gpu-000", uid="uid-gpu-000", expires_in=-10), "s3cret", node_token(audience="kubernetes")],
    ids=["expired", "not a jwt", "other audience"],
)
def test_a_token_not_of_a_credentials_form_is_unauthenticated_without_a_review(
    syncer: Syncer, token: str
) -> None:
    code, _ = syncer.call("AcquireNodeLock", "gpu-000", token)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert syncer.untouched() and syncer.api.reviewed == []


@pytest.mark.parametrize("method", CALLS)
def test_one_nodes_credential_cannot_lock_or_unlock_another(syncer: Syncer, method: str) -> None:
    """Root on gpu-000 presents its own, good, token for gpu-001: refused, and nothing is held or
    released on gpu-001."""
    code, message = syncer.call(method, "gpu-001", node_token_for("gpu-000"))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "speaks for Slurm node gpu-000" in message and "not gpu-001" in message
    assert syncer.untouched()


@pytest.mark.parametrize("method", CALLS)
def test_the_token_of_a_recreated_slurmd_pod_speaks_for_nothing(syncer: Syncer, method: str) -> None:
    """The slurmd Pod of gpu-000 was deleted and made again (a new uid): the old Pod's token, its
    review still remembered, is refused at once; the new Pod's token locks."""
    old = node_token_for("gpu-000")
    assert syncer.call(method, "gpu-000", old)[0] == grpc.StatusCode.OK  # reviewed and remembered
    syncer.locks.reset_mock()
    syncer.world.remove_pod(f"{SLURMD_NS}/gpu-000")
    recreated = _slurmd("gpu-000", "node-0")
    recreated["metadata"]["uid"] = "uid-gpu-000-2"
    syncer.world.add_pod(recreated)
    code, message = syncer.call(method, "gpu-000", old)
    assert code == grpc.StatusCode.PERMISSION_DENIED and "slurm/gpu-000, which is not a slurmd Pod" in message
    assert syncer.untouched()
    assert syncer.api.reviewed == [old]  # the cache answered: the informer refused
    new = node_token("gpu-000", uid="uid-gpu-000-2", namespace=SLURMD_NS)
    assert syncer.call(method, "gpu-000", new) == (grpc.StatusCode.OK, "")


@pytest.mark.parametrize("method", CALLS)
def test_the_token_of_a_deleted_slurmd_pod_speaks_for_nothing(syncer: Syncer, method: str) -> None:
    token = node_token_for("gpu-000")
    syncer.world.remove_pod(f"{SLURMD_NS}/gpu-000")
    code, _ = syncer.call(method, "gpu-000", token)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert syncer.untouched()


@pytest.mark.parametrize("method", CALLS)
def test_a_pod_of_another_namespace_speaks_for_no_node(syncer: Syncer, method: str) -> None:
    """A tenant's Pod named like a Slurm node, labelled like a slurmd Pod, even with the uid the
    token names: only the slurmd namespace's Pods are slurmd Pods (tandem.slurmd)."""
    tenant = _pod(
        "gpu-000", "node-0", namespace="team-a", labels={keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE}
    )
    syncer.world.add_pod(tenant)
    token = node_token("gpu-000", uid="uid-gpu-000", namespace="team-a")
    code, message = syncer.call(method, "gpu-000", token)
    assert code == grpc.StatusCode.PERMISSION_DENIED and "team-a/gpu-000" in message
    assert syncer.untouched()


@pytest.mark.parametrize("method", CALLS)
def test_a_pod_of_the_slurmd_namespace_that_is_not_a_slurmd_pod_speaks_for_no_node(
    syncer: Syncer, method: str
) -> None:
    syncer.world.add_pod(_pod("gpu-002", "node-2", namespace=SLURMD_NS))  # no slurmd label
    code, _ = syncer.call(method, "gpu-002", node_token("gpu-002", uid="uid-gpu-002", namespace=SLURMD_NS))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert syncer.untouched()


@pytest.mark.parametrize("method", CALLS)
def test_an_unanswered_review_is_unavailable_and_the_next_call_reviews_again(
    syncer: Syncer, method: str
) -> None:
    """The API server did not answer (or this syncer may not create TokenReviews): the prolog is
    told to ask again, and its next call is reviewed anew, not refused from a cache."""
    token = node_token_for("gpu-000")
    syncer.api.down = True
    code, message = syncer.call(method, "gpu-000", token)
    assert code == grpc.StatusCode.UNAVAILABLE and "cannot review the node credential" in message
    assert syncer.untouched()
    syncer.api.down = False
    assert syncer.call(method, "gpu-000", token) == (grpc.StatusCode.OK, "")
    assert syncer.api.reviewed == [token, token]


def test_a_nodes_credential_is_reviewed_once_for_many_jobs(syncer: Syncer) -> None:
    token = node_token_for("gpu-000")
    for _ in range(10):
        assert syncer.call("AcquireNodeLock", "gpu-000", token)[0] == grpc.StatusCode.OK
        assert syncer.call("ReleaseNodeLock", "gpu-000", token)[0] == grpc.StatusCode.OK
    assert syncer.api.reviewed == [token]


# -- the TokenReview the syncer posts -------------------------------------------------------------


def test_the_syncer_posts_a_token_review_for_the_hooks_audience() -> None:
    kube = mock.Mock()
    token = node_token_for("gpu-000")
    kube.request.return_value = api_server_review(token)
    assert token_review(kube, timeout=3.0)(token) == api_server_review(token)
    kube.request.assert_called_once_with(
        "POST",
        TOKEN_REVIEWS,
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [keys.HOOKS_TOKEN_AUDIENCE]},
        },
        timeout=3.0,
    )


@pytest.mark.parametrize(
    "error",
    [KubeError(403, "Forbidden", "cannot create tokenreviews"), KubeError(0, "Unreachable", "refused")],
    ids=["no permission", "no answer"],
)
def test_a_failed_token_review_is_unavailable_not_a_refusal(error: KubeError) -> None:
    kube = mock.Mock()
    kube.request.side_effect = error
    with pytest.raises(ReviewUnavailable, match="TokenReview failed"):
        token_review(kube)(node_token_for("gpu-000"))


# -- through the gateway ---------------------------------------------------------------------------


@pytest.fixture
def gateway(syncer: Syncer) -> Iterator[HooksGateway]:
    server = grpc_service("127.0.0.1:0", None, syncer.servicer)
    server.start()
    channel = serving.channel(f"127.0.0.1:{server.port}", None)
    g = HooksGateway("127.0.0.1:0", syncer_pb2_grpc.SyncerServiceStub(channel), call_timeout=5)
    g.start()
    yield g
    g.stop()
    channel.close()
    server.stop(0)


def _lock(g: HooksGateway, node: str, token: str) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{g.port}/v1/lock",
        json={"node": node, "job": 7},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def test_the_prolog_learns_the_syncers_verdict_on_its_credential(
    syncer: Syncer, gateway: HooksGateway
) -> None:
    """Over real gRPC: the syncer's UNAUTHENTICATED is a 401, its PERMISSION_DENIED a 403 (both
    final for the scripts), and a node's own credential locks it."""
    refused = node_token("gpu-000", uid="uid-gpu-000", namespace=SLURMD_NS, expires_in=1800)
    syncer.api.refused.add(refused)
    r = _lock(gateway, "gpu-000", refused)
    assert r.status_code == 401 and r.json()["syncer_status"] == "UNAUTHENTICATED", r.text
    r = _lock(gateway, "gpu-001", node_token_for("gpu-000"))
    assert r.status_code == 403 and r.json()["syncer_status"] == "PERMISSION_DENIED", r.text
    assert "speaks for Slurm node gpu-000" in r.json()["error"]
    assert syncer.untouched()
    r = _lock(gateway, "gpu-001", node_token_for("gpu-001"))
    assert r.status_code == 200, r.text
    assert r.json() == {"node": "gpu-001", "job": 7, "lock": "locked"}
    assert syncer.locks.acquire_steps.call_args.args[:2] == ("gpu-001", 7)
