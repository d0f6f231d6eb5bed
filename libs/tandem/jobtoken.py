"""A placeholder's credential: the scheduler gives each job it submits a token in the job's
environment, so the placeholder script (which runs as the Pod's user) can speak to the hooks API
for that job and for nothing else. The token is an HMAC of the job's placeholder reference
(tandem.placeholder) under a key only the scheduler and the gateway hold; the gateway checks it
from the request head, and the syncer then checks against Slurm that the job is that placeholder
and runs on the node named. The prolog and epilog (root on the node) use the hooks token instead.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

# Which credential a call presents, as HTTP headers the scripts send.
PLACEHOLDER_HEADER = "X-Tandem-Placeholder"
_DOMAIN = b"tandem placeholder credential v1\x00"
# A rotated key still verifies the tokens of jobs submitted before: they may run for days.
PREVIOUS_KEY_GRACE_SECONDS = 30 * 24 * 3600.0


def token(key: bytes, reference: str) -> str:
    return hmac.new(key, _DOMAIN + reference.encode(), hashlib.sha256).hexdigest()


def verifies(keys: Iterable[bytes], reference: str, presented: str) -> bool:
    """Whether `presented` is the token of `reference` under one of `keys` (every key compared)."""
    given = presented.encode()
    results = [hmac.compare_digest(token(key, reference).encode(), given) for key in keys if key]
    return any(results)


def read_key(path: str, flag: str = "--job-key-file") -> bytes:
    """The key from its file; a service that needs one and lacks it does not start."""
    if not path:
        raise SystemExit(f"{flag} is required: placeholders get a per-job credential signed with it")
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
    except OSError as e:
        raise SystemExit(f"{flag}: cannot read {path}: {e}") from e
    if len(key) < 16:
        raise SystemExit(f"{flag}: {path} holds {len(key)} bytes; a key needs at least 16")
    return key
