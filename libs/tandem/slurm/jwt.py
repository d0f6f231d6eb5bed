"""Slurm JWT tokens: HS256 over the raw bytes of slurmctld's `jwt_key` file.

The payload is what `scontrol token username=U lifespan=S` prints: `exp`, `iat` and `sun`.
Only the lab mints (it stands where a Slurm administrator stands); the services read the claims of
the token they were given, to say early whose it is and when it expires.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import NamedTuple


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


class Claims(NamedTuple):
    user: str
    expires: int


def claims(token: str) -> Claims:
    """The `sun` and `exp` claims of a token, not verified (only slurmctld holds the key): read to
    tell an operator early that a token is for the wrong user or has expired. ValueError when the
    text is not a JWT with both."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError("not three dot-separated parts")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        user, expires = payload["sun"], payload["exp"]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"no readable sun and exp claims: {type(e).__name__}") from e
    if not isinstance(user, str) or not isinstance(expires, int) or isinstance(expires, bool):
        raise ValueError("sun is not a string or exp not an integer")
    return Claims(user, expires)


def expires_at(token: str) -> int:
    """The `exp` claim of a token (not verified)."""
    return claims(token).expires
