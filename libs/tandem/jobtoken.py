"""A placeholder's credential: the scheduler gives each job it submits a token in the job's
environment, so the placeholder script (which runs as the Pod's user) can speak to the hooks API
for that job and for nothing else.

A token is bound to one job, not to a name: `<binding>.<mac>`, where the binding is random, made
for this submit, and written into the job's AdminComment beside its placeholder reference
(tandem.placeholder.admin_comment; only Slurm's administrators write it), and the mac is an HMAC of
the reference and the binding under the job key. So a token replayed on the group's next job (a new
binding), or on an LWS group's next incarnation, is refused; one used after its job ended is
refused (the syncer reads the job from Slurm); and one job's token is revoked by rewriting its
AdminComment with the revocation marker
(`scontrol update JobId=<id> AdminComment="<its reference> token-revoked"`).

The gateway screens its form only (`well_formed`) and holds no key: whoever takes the gateway
cannot mint a token. The syncer verifies it: its mac under the ring first (a forgery costs no read
of Slurm), then, against the job Slurm has, the binding in its AdminComment. A job's token is
revoked by an explicit marker (`placeholder.revoked_comment`); a token of version 1 (no binding,
from a job submitted before bindings) is accepted only behind --accept-unbound-job-tokens.

The job key is a ring: one key per line of its file, the newest first, which signs; every line
verifies, so a rotation (a new first line) leaves running jobs' tokens good until their key's line
is dropped, across restarts. The prolog and epilog (root on the node) use the hooks token instead.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Iterable

from tandem.metrics import REGISTRY

log = logging.getLogger(__name__)
RING_UNREADABLE = REGISTRY.counter(
    "tandem_job_key_ring_unreadable_total",
    "times the job key ring's file changed and could not be read whole (the last ring read stays)",
)

# Which credential a call presents, as HTTP headers the scripts send.
PLACEHOLDER_HEADER = "X-Tandem-Placeholder"
_DOMAIN = b"tandem placeholder credential v1\x00"
_DOMAIN_BOUND = b"tandem placeholder credential v2\x00"
_BINDING_HEX = 32
MIN_KEY_BYTES = 16


def new_binding() -> str:
    return secrets.token_hex(_BINDING_HEX // 2)


def token(key: bytes, reference: str, binding: str = "") -> str:
    """The token of the job `reference` names, bound to `binding` (a token of version 1, for a job
    submitted before bindings, has none)."""
    if not binding:
        return hmac.new(key, _DOMAIN + reference.encode(), hashlib.sha256).hexdigest()
    mac = hmac.new(key, _DOMAIN_BOUND + reference.encode() + b"\x00" + binding.encode(), hashlib.sha256)
    return f"{binding}.{mac.hexdigest()}"


def binding_of(presented: str) -> str:
    """The binding a token names ("" for a token of version 1, or none at all)."""
    binding, dot, _ = presented.partition(".")
    ok = bool(dot) and len(binding) == _BINDING_HEX and all(c in "0123456789abcdef" for c in binding)
    return binding if ok else ""


_FORM = re.compile(rf"(?:[0-9a-f]{{{_BINDING_HEX}}}\.)?[0-9a-f]{{64}}")


def well_formed(presented: str) -> bool:
    """Whether a token has a job token's form (`<binding>.<mac>`, or a bare mac of version 1): what
    the gateway screens, holding no key that could mint one; the syncer verifies it."""
    return _FORM.fullmatch(presented) is not None


def verifies(keys: Iterable[bytes], reference: str, presented: str) -> bool:
    """Whether `presented` is a token of `reference` (bound to the binding it names, or of
    version 1) under one of `keys` (every key compared)."""
    binding = binding_of(presented)
    given = presented.encode()
    results = [hmac.compare_digest(token(key, reference, binding).encode(), given) for key in keys if key]
    return any(results)


def read_keys(path: str, flag: str = "--job-key-file") -> list[bytes]:
    """The key ring from its file, newest first; a service that needs one and lacks it does not
    start."""
    if not path:
        raise SystemExit(f"{flag} is required: placeholders get a per-job credential signed with it")
    try:
        with open(path, "rb") as f:
            lines = [line.strip() for line in f.read().splitlines()]
    except OSError as e:
        raise SystemExit(f"{flag}: cannot read {path}: {e}") from e
    keys = [line for line in lines if line]
    if not keys:
        raise SystemExit(f"{flag}: {path} holds no key")
    short = [i + 1 for i, key in enumerate(keys) if len(key) < MIN_KEY_BYTES]
    if short:
        raise SystemExit(f"{flag}: {path} line(s) {short} hold fewer than {MIN_KEY_BYTES} bytes")
    return keys


def read_key(path: str, flag: str = "--job-key-file") -> bytes:
    """The key that signs: the ring's first."""
    return read_keys(path, flag)[0]


class KeyRing:
    """The ring as its file says now: read again when the file changes (a Secret's mount swaps it
    for a new inode; a stat that follows the link sees it), so a rotation needs no restart."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._keys: list[bytes] = read_keys(path)
        self._seen = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def values(self) -> list[bytes]:
        now = self._stat()
        if now is not None and now != self._seen:
            try:
                self._keys = read_keys(self.path)
            except SystemExit as e:
                # A half-written file, or an operator's mistake: the last ring read stays, and
                # whoever rotates is told once per version of the file, not left guessing.
                RING_UNREADABLE.inc()
                log.warning(
                    "the job key ring's new version is refused; the last one read stays",
                    extra={"path": self.path, "error": str(e)},
                )
            self._seen = now
        return list(self._keys)
