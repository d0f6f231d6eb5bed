from __future__ import annotations

import base64
import hashlib
import hmac
import json

from tandem.slurm import jwt


def _decode(part: str) -> dict[str, object]:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))  # type: ignore[no-any-return]


def test_token_carries_user_and_lifespan_like_scontrol_token() -> None:
    token = jwt.mint(b"k" * 32, "alice", lifespan_seconds=600, now=1000)
    header, payload, _ = token.split(".")
    assert _decode(header) == {"alg": "HS256", "typ": "JWT"}
    assert _decode(payload) == {"exp": 1600, "iat": 1000, "sun": "alice"}
    assert jwt.expires_at(token) == 1600


def test_signature_is_hs256_over_the_key_bytes() -> None:
    key = b"secret-key-bytes"
    token = jwt.mint(key, "root", now=0)
    signing_input, signature = token.rsplit(".", 1)
    expected = base64.urlsafe_b64encode(hmac.new(key, signing_input.encode(), hashlib.sha256).digest())
    assert signature == expected.rstrip(b"=").decode()
    assert jwt.mint(b"other-key", "root", now=0) != token
