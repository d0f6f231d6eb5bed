"""The API server's published service-account keys (`/openid/v1/jwks`), to check a token's
signature where a TokenReview would cost the API server a call.

The hooks gateway checks a node credential (a slurmd Pod's bound token, tandem.nodetoken) against
these keys before anything reaches the syncer: a token Kubernetes never signed is refused there,
so a flood of forged tokens costs no TokenReview and pushes no real node's answer out of the
syncer's cache. The signature says only that Kubernetes signed the token; which Pod it is bound
to, and whether that Pod still exists, the syncer's TokenReview decides.

Keys are fetched once at start and again when a token names a key id (`kid`) not seen yet (the
API server's signing key rotated), at most once per `min_refresh` seconds, on a thread of their
own: a request never waits on the API server. While such a refresh runs the answer is UNKNOWN
(the gateway says 503, and the scripts ask again); after it, a kid still unknown is refused.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from tandem.metrics import REGISTRY

log = logging.getLogger(__name__)

JWKS_PATH = "/openid/v1/jwks"
JWKS_TYPE = "application/jwk-set+json"  # the only representation the API server serves there
MAX_JWKS_BYTES = 256 * 1024
_MAX_TOKEN = 8192
_CURVES: Mapping[str, tuple[ec.EllipticCurve, int]] = {
    "ES256": (ec.SECP256R1(), 32),
    "ES384": (ec.SECP384R1(), 48),
}
_RSA_HASHES: Mapping[str, hashes.HashAlgorithm] = {
    "RS256": hashes.SHA256(),
    "RS384": hashes.SHA384(),
    "RS512": hashes.SHA512(),
}
_ALGORITHMS = frozenset({*_RSA_HASHES, *_CURVES})

REFRESHES = REGISTRY.counter(
    "tandem_sa_keys_refreshes_total",
    "fetches of the API server's service-account keys, by result",
    ["result"],
)

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


class Verdict(enum.Enum):
    SIGNED = "signed"  # by a key the API server publishes
    FORGED = "forged"  # not a JWT, an algorithm we do not take, or a bad signature
    UNKNOWN = "unknown"  # a key id not seen yet, while the keys are being fetched again


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _int(part: str) -> int:
    return int.from_bytes(_b64(part), "big")


def parse_jwks(raw: bytes | Mapping[str, Any]) -> dict[str, PublicKey]:
    """kid -> public key, for each signing key of a JWKS document (raw, or decoded by the API
    client) we can use (RSA, P-256, P-384); others are skipped. Raises ValueError for a document
    that is not a JWKS."""
    if isinstance(raw, bytes) and len(raw) > MAX_JWKS_BYTES:
        raise ValueError(f"a JWKS of more than {MAX_JWKS_BYTES} bytes")
    doc = json.loads(raw) if isinstance(raw, bytes) else raw
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError("not a JWKS document (no keys list)")
    keys: dict[str, PublicKey] = {}
    for jwk in doc["keys"]:
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or jwk.get("use", "sig") != "sig":
            continue
        try:
            if jwk.get("kty") == "RSA":
                keys[jwk["kid"]] = rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
            elif jwk.get("kty") == "EC" and jwk.get("crv") in ("P-256", "P-384"):
                curve: ec.EllipticCurve = ec.SECP256R1() if jwk["crv"] == "P-256" else ec.SECP384R1()
                numbers = ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve)
                keys[jwk["kid"]] = numbers.public_key()
        except (KeyError, TypeError, ValueError, binascii.Error):
            continue  # one malformed key does not hide the others
    return keys


def _signed_by(key: PublicKey, alg: str, signed: bytes, signature: bytes) -> bool:
    try:
        if isinstance(key, rsa.RSAPublicKey) and alg in _RSA_HASHES:
            key.verify(signature, signed, padding.PKCS1v15(), _RSA_HASHES[alg])
            return True
        if isinstance(key, ec.EllipticCurvePublicKey) and alg in _CURVES:
            curve, size = _CURVES[alg]
            if key.curve.name != curve.name or len(signature) != 2 * size:
                return False
            r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
            digest = hashes.SHA256() if alg == "ES256" else hashes.SHA384()
            key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(digest))
            return True
    except InvalidSignature:
        return False
    return False


def header_of(token: str) -> Mapping[str, Any] | None:
    if not token or len(token) > _MAX_TOKEN or token.count(".") != 2:
        return None
    try:
        header = json.loads(_b64(token.split(".", 1)[0]))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    return header if isinstance(header, dict) else None


class ServiceAccountKeys:
    """The published keys, and the verdict on a token's signature (remembered per token, since a
    node presents the same token for every job)."""

    def __init__(
        self,
        fetch: Callable[[], bytes | Mapping[str, Any]],
        *,
        min_refresh: float = 10.0,
        max_remembered: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`fetch`: GET /openid/v1/jwks from the API server (with a timeout), its document."""
        self._fetch = fetch
        self.min_refresh, self.max_remembered = min_refresh, max_remembered
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, PublicKey] = {}
        self._last_fetch = float("-inf")
        # Whether the last read of the keys succeeded: until one does, an unknown key id is not
        # a forgery but a key we could not read (the scripts ask again rather than fail).
        self._read = False
        self._refreshing: threading.Thread | None = None
        self._verdicts: OrderedDict[bytes, Verdict] = OrderedDict()

    def refresh(self) -> bool:
        """Fetch the keys now (at start: the caller says what to do when this fails)."""
        with self._lock:
            self._last_fetch = self._clock()
        try:
            keys = parse_jwks(self._fetch())
        except Exception as e:  # an unreachable API server or a bad answer: the old keys stay
            with self._lock:
                self._read = False
            REFRESHES.inc(result="error")
            log.warning("cannot read the API server's service-account keys", extra={"error": str(e)})
            return False
        REFRESHES.inc(result="ok")
        with self._lock:
            if keys != self._keys:
                self._verdicts.clear()  # a key that went verifies nothing any more
            self._keys, self._read = keys, True
        return True

    def verdict(self, token: str) -> Verdict:
        header = header_of(token)
        if header is None or not isinstance(header.get("kid"), str) or header.get("alg") not in _ALGORITHMS:
            return Verdict.FORGED
        remembered = hashlib.sha256(token.encode()).digest()
        with self._lock:
            seen = self._verdicts.get(remembered)
            key = self._keys.get(header["kid"])
        if seen is not None:
            return seen
        if key is None:
            refreshing = self._refresh_for_unknown_kid()
            with self._lock:
                unread = not self._read
            return Verdict.UNKNOWN if refreshing or unread else Verdict.FORGED
        signed, _, signature = token.rpartition(".")
        try:
            raw = _b64(signature)
        except (ValueError, binascii.Error):
            return Verdict.FORGED
        found = Verdict.SIGNED if _signed_by(key, header["alg"], signed.encode(), raw) else Verdict.FORGED
        with self._lock:
            self._verdicts[remembered] = found
            while len(self._verdicts) > self.max_remembered:
                self._verdicts.popitem(last=False)
        return found

    def _refresh_for_unknown_kid(self) -> bool:
        """Start a refresh in the background, unless one ran within `min_refresh` seconds; whether
        one is running (the caller may ask again shortly)."""
        with self._lock:
            running = self._refreshing is not None and self._refreshing.is_alive()
            if running:
                return True
            if self._clock() - self._last_fetch < self.min_refresh:
                return False
            self._refreshing = threading.Thread(target=self.refresh, name="sa-keys", daemon=True)
            self._refreshing.start()
            return True
