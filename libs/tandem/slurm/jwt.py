"""Slurm JWT tokens: HS256 over the raw bytes of slurmctld's `jwt_key` file.

The payload is what `scontrol token username=U lifespan=S` prints: `exp`, `iat` and `sun`.
Minting our own lets the scheduler act as a given Slurm user without shelling out to scontrol.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(key: bytes, user: str, lifespan_seconds: int = 3600, now: float | None = None) -> str:
    issued = int(now if now is not None else time.time())
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64(
        json.dumps(
            {"exp": issued + lifespan_seconds, "iat": issued, "sun": user}, separators=(",", ":")
        ).encode()
    )
    signing_input = f"{header}.{payload}".encode()
    signature = _b64(hmac.new(key, signing_input, hashlib.sha256).digest())
    return f"{header}.{payload}.{signature}"


def expires_at(token: str) -> int:
    """The `exp` claim of a token (not verified: used only to know when to mint a new one)."""
    payload = token.split(".")[1]
    padded = payload + "=" * (-len(payload) % 4)
    return int(json.loads(base64.urlsafe_b64decode(padded))["exp"])
