"""A slurmrestd client that speaks v0.0.38 (Slurm 22.05) and v0.0.40+ (Slurm 23.11+)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from tandem.slurm import jwt


class SlurmApiError(RuntimeError):
    """slurmrestd answered with an error; `status` is the HTTP status (0 when unreachable)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class TokenSource:
    """A fixed token, or tokens minted from slurmctld's jwt_key and renewed before they expire."""

    def __init__(self, token: str = "", key: bytes | None = None, lifespan: int = 3600) -> None:
        if not token and key is None:
            raise ValueError("a Slurm token or a JWT key file is needed")
        self._fixed = token
        self._key = key
        self._lifespan = lifespan
        self._minted: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def token(self, user: str) -> str:
        if self._key is None:
            return self._fixed
        with self._lock:
            cached = self._minted.get(user)
            if cached and cached[1] - time.time() > 60:
                return cached[0]
            token = jwt.mint(self._key, user, self._lifespan)
            self._minted[user] = (token, time.time() + self._lifespan)
            return token

    @property
    def can_impersonate(self) -> bool:
        return self._key is not None


class SlurmRestClient:
    def __init__(
        self, base_url: str, user: str, tokens: TokenSource, version: str = "v0.0.38", timeout: float = 30.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.user = user
        self.tokens = tokens
        self.version = version
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
        )

    @classmethod
    def from_settings(cls, base_url: str, user: str, token: str, key_file: str) -> SlurmRestClient:
        key = Path(key_file).read_bytes() if key_file else None
        return cls(base_url, user, TokenSource(token=token, key=key))

    def close(self) -> None:
        self._http.close()

    def ping(self) -> bool:
        try:
            self._request("GET", "ping")
        except SlurmApiError:
            return False
        return True

    def _request(
        self,
        method: str,
        path: str,
        *,
        user: str | None = None,
        json: object | None = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        who = user or self.user
        headers = {"X-SLURM-USER-NAME": who, "X-SLURM-USER-TOKEN": self.tokens.token(who)}
        try:
            r = self._http.request(
                method, f"/slurm/{self.version}/{path}", headers=headers, json=json, params=params
            )
        except httpx.HTTPError as e:
            raise SlurmApiError(f"slurmrestd at {self.base_url} unreachable: {e}") from e
        if r.status_code >= 400:
            raise SlurmApiError(f"{method} {path}: HTTP {r.status_code}: {r.text[:500]}", r.status_code)
        return r
