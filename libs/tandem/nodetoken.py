"""A Slurm node's hook credential: the bound ServiceAccount token of its slurmd Pod.

The prolog and epilog of a Slurm node present the token kubelet projects into that node's slurmd
Pod for the audience `keys.HOOKS_TOKEN_AUDIENCE`. Kubernetes signs it, binds it to the Pod (it dies
with the Pod) and rotates it; minting one for another Pod takes the TokenRequest permission in the
slurmd namespace. The gateway screens its form (`plausible`: no signature check, it holds no
Kubernetes credential); the syncer has the API server review it (`TokenReviewer`, a TokenReview)
and takes the Slurm node it speaks for from the Pod it is bound to (tandem.slurmd): one node's
credential speaks for that node only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem import keys

MAX_TOKEN = 8192
_POD_NAME = "authentication.kubernetes.io/pod-name"
_POD_UID = "authentication.kubernetes.io/pod-uid"
_SA_PREFIX = "system:serviceaccount:"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass(frozen=True)
class BoundPod:
    """The Pod a reviewed token is bound to."""

    namespace: str
    name: str
    uid: str


class ReviewUnavailable(RuntimeError):
    """The API server did not answer the review: the caller may ask again."""


def unverified_claims(token: str) -> Mapping[str, Any] | None:
    """A JWT's payload, read without checking its signature; None when it is not a JWT."""
    if not token or len(token) > MAX_TOKEN or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def plausible(token: str, now: Callable[[], float] = time.time) -> bool:
    """Whether a token has the form of a node credential: a JWT for the hooks audience, not
    expired. It screens junk before the syncer spends a TokenReview on it; the review decides."""
    claims = unverified_claims(token)
    if claims is None:
        return False
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    expires = claims.get("exp")
    return (
        keys.HOOKS_TOKEN_AUDIENCE in audiences
        and isinstance(expires, int | float)
        and not isinstance(expires, bool)
        and expires > now()
    )


def review_body(token: str) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [keys.HOOKS_TOKEN_AUDIENCE]},
    }


def bound_pod_of(review: Mapping[str, Any]) -> BoundPod | None:
    """The Pod a TokenReview's answer says the token is bound to; None when the token was refused,
    is for another audience, or is not a Pod's ServiceAccount token."""
    status = review.get("status") or {}
    if status.get("authenticated") is not True:
        return None
    if keys.HOOKS_TOKEN_AUDIENCE not in (status.get("audiences") or []):
        return None
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    if not username.startswith(_SA_PREFIX):
        return None
    namespace, _, account = username.removeprefix(_SA_PREFIX).partition(":")
    extra = user.get("extra") or {}
    names, uids = extra.get(_POD_NAME) or [], extra.get(_POD_UID) or []
    if not (namespace and account and len(names) == 1 and len(uids) == 1 and names[0] and uids[0]):
        return None
    return BoundPod(namespace, str(names[0]), str(uids[0]))


class TokenReviewer:
    """Reviews node credentials through the API server, remembering each answer a while: a node's
    prolog and epilog present the same token for every job, and one review a token per `ttl` keeps
    the API server out of the per-job cost. A refusal is remembered for `refused_ttl` only (a
    flood of one wrong token costs one review per interval). The Pod itself is checked on every
    call by the caller (`BoundPod.uid` against its informer), so a deleted Pod's token is refused
    at once, cache or not."""

    def __init__(
        self,
        review: Callable[[str], Mapping[str, Any]],
        *,
        ttl: float = 300.0,
        refused_ttl: float = 10.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`review`: POSTs a TokenReview (`review_body`) and returns the answer; raises
        ReviewUnavailable when the API server does not answer."""
        self._review = review
        self.ttl, self.refused_ttl, self.max_entries = ttl, refused_ttl, max_entries
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._seen: OrderedDict[bytes, tuple[BoundPod | None, float]] = OrderedDict()

    def bound_pod(self, token: str) -> BoundPod | None:
        if not plausible(token, self._wall):
            return None
        key = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        with self._lock:
            hit = self._seen.get(key)
            if hit is not None and hit[1] > now:
                return hit[0]
        pod = bound_pod_of(self._review(token))
        claims = unverified_claims(token) or {}
        # Never past the token's own expiry (the review found it genuine, so its claims hold).
        left = float(claims.get("exp", 0)) - self._wall()
        until = now + (min(self.ttl, left) if pod is not None else self.refused_ttl)
        with self._lock:
            self._seen[key] = (pod, until)
            self._seen.move_to_end(key)
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)
        return pod
