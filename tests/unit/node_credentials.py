"""Node credentials for unit tests: JWTs of the form tandem.nodetoken screens, unsigned (the
syncer's TokenReview is faked) or signed by a key of a test's own (`SigningKey`: the gateway checks
the signature against the API server's published keys, tandem.sakeys)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tandem import keys


def _segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


class SigningKey:
    """An API server's service-account signing key: signs tokens, and publishes itself as a JWKS."""

    def __init__(self, kid: str = "test") -> None:
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def sign(self, token: str) -> str:
        """The token (an unsigned node_token) with this key's kid and signature."""
        _, claims, _ = token.split(".")
        signed = f"{_segment({'alg': 'RS256', 'kid': self.kid})}.{claims}"
        signature = self.key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{base64.urlsafe_b64encode(signature).decode().rstrip('=')}"

    def jwks(self) -> bytes:
        numbers = self.key.public_key().public_numbers()

        def b64(n: int) -> str:
            return base64.urlsafe_b64encode(n.to_bytes((n.bit_length() + 7) // 8, "big")).decode().rstrip("=")

        jwk = {
            "use": "sig",
            "kty": "RSA",
            "kid": self.kid,
            "alg": "RS256",
            "n": b64(numbers.n),
            "e": b64(numbers.e),
        }
        return json.dumps({"keys": [jwk]}).encode()


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
