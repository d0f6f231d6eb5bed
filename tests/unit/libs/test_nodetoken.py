"""A Slurm node's hook credential (tandem.nodetoken): the gateway screens its form only (a JWT for
the audience tandem-hooks, not expired); the syncer takes the Pod it speaks for from the API
server's TokenReview, remembered a while (one review per token per ttl, a refusal briefly, never
past the token's own expiry, a bounded number of tokens)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from tandem import keys, nodetoken
from tandem.nodetoken import BoundPod, ReviewUnavailable, TokenReviewer
from tests.unit.node_credentials import node_token, review

NOW = 1_800_000_000.0
NOT_UTF8 = base64.urlsafe_b64encode(b"\xff\xfe").decode()


def _segment(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _jwt(claims: Any) -> str:
    return f"{_segment({'alg': 'RS256'})}.{_segment(claims)}.c2ln"


def _claims(**changes: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {"aud": [keys.HOOKS_TOKEN_AUDIENCE], "exp": NOW + 600}
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


# -- plausible: the gateway's screen ------------------------------------------------------------


def test_a_node_credential_is_plausible() -> None:
    assert nodetoken.plausible(node_token())
    assert nodetoken.plausible(node_token("gpu-017", uid="other", namespace="elsewhere"))
    assert nodetoken.plausible(_jwt(_claims()), now=lambda: NOW)
    # `aud` may be one string as well as a list, and name other audiences beside ours.
    assert nodetoken.plausible(_jwt(_claims(aud=keys.HOOKS_TOKEN_AUDIENCE)), now=lambda: NOW)
    assert nodetoken.plausible(_jwt(_claims(aud=["api", keys.HOOKS_TOKEN_AUDIENCE])), now=lambda: NOW)


@pytest.mark.parametrize(
    "token",
    [
        _jwt(_claims(exp=NOW - 1)),
        _jwt(_claims(exp=NOW)),  # expiring this very second
        _jwt(_claims(exp=None)),
        _jwt(_claims(exp=str(NOW + 600))),
        _jwt(_claims(exp=True)),  # a bool is an int to Python, not a time
    ],
    ids=["expired", "expiring now", "no exp", "exp a string", "exp a bool"],
)
def test_an_expired_token_or_one_without_an_expiry_is_not(token: str) -> None:
    assert not nodetoken.plausible(token, now=lambda: NOW)
    assert nodetoken.plausible(_jwt(_claims(exp=NOW + 1)), now=lambda: NOW)  # the same, in time


def test_an_expired_node_token_is_refused_by_the_real_clock() -> None:
    assert not nodetoken.plausible(node_token(expires_in=-10))
    token = node_token(expires_in=60)
    expires = (nodetoken.unverified_claims(token) or {})["exp"]
    assert nodetoken.plausible(token, now=lambda: expires - 1)
    assert not nodetoken.plausible(token, now=lambda: expires + 1)


@pytest.mark.parametrize(
    "token",
    [
        node_token(audience="kubernetes"),
        node_token(audience="https://kubernetes.default.svc.cluster.local"),
        node_token(audience=keys.HOOKS_TOKEN_AUDIENCE + "-x"),
        _jwt(_claims(aud=None)),
        _jwt(_claims(aud=[])),
        _jwt(_claims(aud={"tandem-hooks": True})),
    ],
    ids=["kubernetes", "api server", "prefix only", "no aud", "empty aud", "aud an object"],
)
def test_a_token_for_another_audience_is_not(token: str) -> None:
    assert not nodetoken.plausible(token)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "s3cret",
        "a.b",
        "a.b.c.d",
        "a.%%%.c",  # not base64
        f"a.{base64.urlsafe_b64encode(b'not json').decode()}.c",
        f"a.{NOT_UTF8}.c",
        _jwt([keys.HOOKS_TOKEN_AUDIENCE]),  # JSON, not an object
        _jwt("tandem-hooks"),
    ],
    ids=["empty", "secret", "two parts", "four parts", "not base64", "not json", "not utf8", "list", "str"],
)
def test_what_is_not_a_jwt_is_not(token: str) -> None:
    assert nodetoken.unverified_claims(token) is None
    assert not nodetoken.plausible(token)


def test_an_oversized_token_is_not_even_decoded() -> None:
    padded = _jwt(_claims(pad="x" * nodetoken.MAX_TOKEN))
    assert len(padded) > nodetoken.MAX_TOKEN
    assert nodetoken.unverified_claims(padded) is None
    assert not nodetoken.plausible(padded, now=lambda: NOW)
    # Just under the bound, the same claims pass.
    fits = _jwt(_claims(pad="x" * (nodetoken.MAX_TOKEN * 3 // 4 - 200)))  # base64: 4 chars per 3
    assert len(fits) <= nodetoken.MAX_TOKEN and nodetoken.plausible(fits, now=lambda: NOW)


# -- bound_pod_of: what the review says ---------------------------------------------------------


def _answer(**status: Any) -> dict[str, Any]:
    answer = review(node_token())
    answer["status"].update(status)
    return answer


def _user(**changes: Any) -> dict[str, Any]:
    user: dict[str, Any] = json.loads(json.dumps(review(node_token())["status"]["user"]))
    user.update(changes)
    return user


def test_a_good_review_names_the_pod_the_token_is_bound_to() -> None:
    assert nodetoken.bound_pod_of(review(node_token())) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
    assert nodetoken.bound_pod_of(review(node_token(), pod="cpu-3", uid="u-3", namespace="hpc")) == BoundPod(
        "hpc", "cpu-3", "u-3"
    )


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"status": {}},
        _answer(authenticated=False),
        _answer(authenticated="true"),  # only True is a yes
        _answer(authenticated=None),
        {"status": {"authenticated": False, "error": "token has been invalidated"}},
    ],
    ids=["no status", "empty status", "false", "string", "null", "invalidated"],
)
def test_a_refused_token_is_bound_to_nothing(answer: Mapping[str, Any]) -> None:
    assert nodetoken.bound_pod_of(answer) is None


@pytest.mark.parametrize(
    "audiences", [["kubernetes"], [], None], ids=["another audience", "none", "not said"]
)
def test_a_token_authenticated_for_another_audience_is_bound_to_nothing(audiences: Any) -> None:
    """The API server answers for the audiences it was asked about that the token has: a token it
    authenticates for itself only is not a hooks credential."""
    assert nodetoken.bound_pod_of(_answer(audiences=audiences)) is None


@pytest.mark.parametrize(
    "username",
    [
        "kubernetes-admin",
        "system:node:gpu-000",
        "system:serviceaccount:",
        "system:serviceaccount:slurm",  # no account
        "system:serviceaccount::default",  # no namespace
        "",
    ],
)
def test_a_token_not_of_a_service_account_is_bound_to_nothing(username: str) -> None:
    assert nodetoken.bound_pod_of(_answer(user=_user(username=username))) is None


POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"


@pytest.mark.parametrize(
    "extra",
    [
        None,
        {},
        {POD_NAME: ["gpu-000"]},
        {POD_UID: ["uid-gpu-000"]},
        {POD_NAME: [""], POD_UID: ["uid-gpu-000"]},
        {POD_NAME: ["gpu-000"], POD_UID: [""]},
        {POD_NAME: ["gpu-000", "gpu-001"], POD_UID: ["uid-gpu-000"]},
        {POD_NAME: ["gpu-000"], POD_UID: ["uid-gpu-000", "uid-gpu-001"]},
    ],
    ids=["no extra", "empty", "no uid", "no name", "empty name", "empty uid", "two names", "two uids"],
)
def test_a_service_account_token_not_bound_to_one_pod_is_bound_to_nothing(extra: Any) -> None:
    """A token of the ServiceAccount alone (a long-lived Secret, a TokenRequest for no Pod) says no
    node: it would speak for every Pod of that account."""
    assert nodetoken.bound_pod_of(_answer(user=_user(extra=extra))) is None


def test_the_review_asks_for_the_hooks_audience() -> None:
    body = nodetoken.review_body("t.o.k")
    assert body["kind"] == "TokenReview" and body["apiVersion"] == "authentication.k8s.io/v1"
    assert body["spec"] == {"token": "t.o.k", "audiences": [keys.HOOKS_TOKEN_AUDIENCE]}


# -- TokenReviewer: the syncer's reviews, remembered --------------------------------------------


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ApiServer:
    """Answers TokenReviews (each one counted): tokens it was told are good, refuses the rest."""

    def __init__(self) -> None:
        self.reviewed: list[str] = []
        self.good: dict[str, dict[str, Any]] = {}
        self.down = False

    def vouch(self, token: str, pod: str = "gpu-000") -> str:
        self.good[token] = review(token, pod=pod, uid=f"uid-{pod}")
        return token

    def __call__(self, token: str) -> Mapping[str, Any]:
        self.reviewed.append(token)
        if self.down:
            raise ReviewUnavailable("TokenReview failed: HTTP 0 Unreachable")
        return self.good.get(token, {"status": {"authenticated": False, "error": "invalid bearer token"}})


def _reviewer(api: ApiServer, clock: Clock, **kw: Any) -> TokenReviewer:
    return TokenReviewer(api, clock=clock, **kw)


def test_a_token_is_reviewed_once_per_ttl() -> None:
    api, clock = ApiServer(), Clock()
    token = api.vouch(node_token("gpu-000"))
    reviewer = _reviewer(api, clock, ttl=300)
    for _ in range(5):
        assert reviewer.bound_pod(token) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
        clock.now += 50
    assert api.reviewed == [token]  # 0 .. 200 s: one review
    clock.now = 299
    reviewer.bound_pod(token)
    assert len(api.reviewed) == 1
    clock.now = 301
    assert reviewer.bound_pod(token) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
    assert api.reviewed == [token, token]


def test_each_token_has_its_own_review() -> None:
    api, clock = ApiServer(), Clock()
    mine, theirs = api.vouch(node_token("gpu-000")), api.vouch(node_token("gpu-001"), pod="gpu-001")
    reviewer = _reviewer(api, clock)
    assert reviewer.bound_pod(mine) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
    assert reviewer.bound_pod(theirs) == BoundPod("slurm", "gpu-001", "uid-gpu-001")
    assert reviewer.bound_pod(mine) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
    assert api.reviewed == [mine, theirs]


def test_a_refusal_is_remembered_for_refused_ttl_only() -> None:
    """A flood of one wrong token costs one review per refused_ttl; a token refused a moment ago
    (say the API server's clock ran ahead) is reviewed again soon, not after the ttl."""
    api, clock = ApiServer(), Clock()
    token = node_token("gpu-000")  # plausible, but the API server does not vouch for it
    reviewer = _reviewer(api, clock, ttl=300, refused_ttl=10)
    for _ in range(20):
        assert reviewer.bound_pod(token) is None
    clock.now = 9
    assert reviewer.bound_pod(token) is None
    assert api.reviewed == [token]
    clock.now = 11
    api.vouch(token)
    assert reviewer.bound_pod(token) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
    assert api.reviewed == [token, token]


def test_a_token_is_never_taken_past_its_own_expiry() -> None:
    """A token with 60 s left, reviewed good with a ttl of 300 s, is reviewed again after 60 s,
    whatever the wall clock says (here it stood still, as when it was set back)."""
    api, clock = ApiServer(), Clock()
    token = api.vouch(node_token("gpu-000", expires_in=60))
    expires = (nodetoken.unverified_claims(token) or {})["exp"]
    reviewer = _reviewer(api, clock, ttl=300, wall=lambda: expires - 60)
    assert reviewer.bound_pod(token) is not None
    clock.now = 59
    assert reviewer.bound_pod(token) is not None
    assert len(api.reviewed) == 1
    clock.now = 61
    del api.good[token]  # the API server: expired
    assert reviewer.bound_pod(token) is None
    assert len(api.reviewed) == 2


def test_an_expired_token_is_refused_at_once_though_its_review_is_remembered() -> None:
    api, clock = ApiServer(), Clock()
    token = api.vouch(node_token("gpu-000", expires_in=60))
    expires = (nodetoken.unverified_claims(token) or {})["exp"]
    wall = Clock(expires - 60)
    reviewer = _reviewer(api, clock, ttl=300, wall=wall)
    assert reviewer.bound_pod(token) is not None
    clock.now, wall.now = 30, expires + 1  # the wall clock ran ahead of the monotonic one
    assert reviewer.bound_pod(token) is None
    assert len(api.reviewed) == 1


@pytest.mark.parametrize(
    "token",
    ["s3cret", node_token(expires_in=-10), node_token(audience="kubernetes"), ""],
    ids=["not a jwt", "expired", "other audience", "empty"],
)
def test_a_token_that_is_not_plausible_costs_no_review(token: str) -> None:
    api = ApiServer()
    api.vouch(token)
    assert _reviewer(api, Clock()).bound_pod(token) is None
    assert api.reviewed == []


def test_the_oldest_token_makes_room_past_max_entries() -> None:
    api, clock = ApiServer(), Clock()
    first, second, third = (api.vouch(node_token(f"gpu-00{i}"), pod=f"gpu-00{i}") for i in range(3))
    reviewer = _reviewer(api, clock, max_entries=2)
    for token in (first, second, third):
        assert reviewer.bound_pod(token) is not None
    assert len(reviewer._seen) == 2
    assert reviewer.bound_pod(second) is not None and reviewer.bound_pod(third) is not None
    assert api.reviewed == [first, second, third]  # the two newest: remembered
    assert reviewer.bound_pod(first) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
    assert api.reviewed == [first, second, third, first]  # the oldest had gone
    assert len(reviewer._seen) == 2


def test_no_answer_is_not_remembered() -> None:
    """The API server did not answer: the caller learns so (the prolog asks again), and the next
    call reviews again rather than taking the silence for a refusal."""
    api, clock = ApiServer(), Clock()
    token = api.vouch(node_token("gpu-000"))
    reviewer = _reviewer(api, clock)
    api.down = True
    with pytest.raises(ReviewUnavailable):
        reviewer.bound_pod(token)
    api.down = False
    assert reviewer.bound_pod(token) == BoundPod("slurm", "gpu-000", "uid-gpu-000")
    assert api.reviewed == [token, token]


def test_a_token_is_remembered_by_its_digest_not_as_itself() -> None:
    api, clock = ApiServer(), Clock()
    token = api.vouch(node_token("gpu-000"))
    reviewer = _reviewer(api, clock)
    reviewer.bound_pod(token)
    (key,) = reviewer._seen
    assert token.encode() not in key and len(key) == 32
