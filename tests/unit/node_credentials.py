"""Node credentials for unit tests: JWTs of the form tandem.nodetoken screens (unsigned: only the
syncer's TokenReview checks a signature, and unit tests fake that review)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from tandem import keys


def _segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def node_token(
    pod: str = "gpu-000",
    *,
    audience: str = keys.HOOKS_TOKEN_AUDIENCE,
    expires_in: float = 3600.0,
    uid: str = "uid-gpu-000",
    namespace: str = "slurm",
) -> str:
    """A token shaped like the one kubelet projects into slurmd Pod `pod` (its claims name the Pod)."""
    claims = {
        "aud": [audience],
        "exp": int(time.time() + expires_in),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": f"system:serviceaccount:{namespace}:default",
        "kubernetes.io": {"namespace": namespace, "pod": {"name": pod, "uid": uid}},
    }
    return f"{_segment({'alg': 'RS256', 'kid': 'test'})}.{_segment(claims)}.c2lnbmF0dXJl"


def review(
    token: str, *, pod: str = "gpu-000", uid: str = "uid-gpu-000", namespace: str = "slurm"
) -> dict[str, Any]:
    """The TokenReview answer the API server gives for a good token of Pod `pod`."""
    return {
        "status": {
            "authenticated": True,
            "audiences": [keys.HOOKS_TOKEN_AUDIENCE],
            "user": {
                "username": f"system:serviceaccount:{namespace}:default",
                "extra": {
                    "authentication.kubernetes.io/pod-name": [pod],
                    "authentication.kubernetes.io/pod-uid": [uid],
                },
            },
        }
    }
