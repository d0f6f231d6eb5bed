"""The tokens SlurmRestClient sends: minted per user from the JWT key (cached until near expiry), or
read from a token file (scontrol token's words, renewed without a restart)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tandem import settings
from tandem.metrics import REGISTRY
from tandem.settings import ClusterSettings
from tandem.slurm import jwt
from tandem.slurm.rest import (
    SlurmRestClient,
    TokenFile,
    TokenFileError,
    TokenSource,
)
from tests.unit.libs.slurm_rest_world import KEY, MakeClient, answer_ok, claims_of, signed_with

# --- TokenSource ---------------------------------------------------------------------------------


def test_token_source_needs_a_token_or_a_key() -> None:
    with pytest.raises(ValueError, match="token or a JWT key"):
        TokenSource()
    with pytest.raises(ValueError):
        TokenSource(token="")


def test_fixed_token_is_the_same_for_every_user() -> None:
    tokens = TokenSource(token="fixed")
    assert tokens.token("alice") == "fixed"
    assert tokens.token("bob") == "fixed"


def test_an_empty_key_still_mints() -> None:
    assert claims_of(TokenSource(key=b"").token("alice"))["sun"] == "alice"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(1_000_000.0)
    monkeypatch.setattr("time.time", c)
    return c


def test_minted_token_is_reused_until_near_expiry(clock: Clock) -> None:
    tokens = TokenSource(key=KEY, lifespan=3600)
    first = tokens.token("alice")
    assert claims_of(first) == {"exp": 1_003_600, "iat": 1_000_000, "sun": "alice"}

    clock.now += 3500  # 100 s left: still good
    assert tokens.token("alice") == first

    clock.now += 41  # 59 s left: renew
    renewed = tokens.token("alice")
    assert renewed != first
    assert jwt.expires_at(renewed) == int(clock.now) + 3600
    assert signed_with(renewed, KEY)

    clock.now += 10
    assert tokens.token("alice") == renewed


def test_tokens_are_cached_per_user(clock: Clock) -> None:
    tokens = TokenSource(key=KEY, lifespan=600)
    alice = tokens.token("alice")
    clock.now += 5
    bob = tokens.token("bob")
    assert claims_of(alice)["sun"] == "alice"
    assert claims_of(bob)["sun"] == "bob"
    assert tokens.token("alice") == alice
    assert tokens.token("bob") == bob


def test_lifespan_is_honoured(clock: Clock) -> None:
    token = TokenSource(key=KEY, lifespan=120).token("alice")
    assert jwt.expires_at(token) - claims_of(token)["iat"] == 120


# --- TokenFile: a service's own token, never the key -------------------------------------------


def _token_file(tmp_path: Path, user: str = "tandem", lifespan: int = 3600, text: str = "") -> Path:
    path = tmp_path / "slurm.jwt"
    path.write_text(text or jwt.mint(KEY, user, lifespan) + "\n")
    return path


def test_a_token_file_is_sent_as_the_services_own_token(tmp_path: Path, make_client: MakeClient) -> None:
    path = _token_file(tmp_path)
    client, slurm = make_client(
        lambda request: answer_ok({"jobs": []}), tokens=TokenFile(str(path), "tandem")
    )
    client.list_jobs()
    assert slurm.requests[0].headers["X-SLURM-USER-NAME"] == "slurm"
    assert slurm.requests[0].headers["X-SLURM-USER-TOKEN"] == path.read_text().strip()


def test_scontrols_own_words_are_taken(tmp_path: Path) -> None:
    token = jwt.mint(KEY, "tandem", 3600)
    path = _token_file(tmp_path, text=f"SLURM_JWT={token}\n")
    assert TokenFile(str(path), "tandem").token("tandem") == token


def test_a_renewed_token_is_read_without_a_restart(tmp_path: Path) -> None:
    path = _token_file(tmp_path, lifespan=600)
    tokens = TokenFile(str(path), "tandem")
    first = tokens.token("tandem")
    # A Secret's new version: the kubelet swaps the mounted file.
    renewed = jwt.mint(KEY, "tandem", 7200)
    new = tmp_path / "new.jwt"
    new.write_text(renewed)
    new.replace(path)
    assert renewed != first
    assert tokens.token("tandem") == renewed
    # What the chart's alert reads to say a token is about to expire.
    assert "\ntandem_slurm_token_expiry_timestamp_seconds " in REGISTRY.render()
    assert REGISTRY.sample("tandem_slurm_token_expiry_timestamp_seconds") == jwt.expires_at(renewed)


def test_a_bad_new_version_keeps_the_last_good_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _token_file(tmp_path)
    tokens = TokenFile(str(path), "tandem")
    good = tokens.token("tandem")
    path.write_text("not a token at all")
    assert tokens.token("tandem") == good
    assert "kept the last good Slurm token" in caplog.text
    path.unlink()
    assert tokens.token("tandem") == good


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no JWT"),
        ("eyJhbGciOiJIUzI1NiJ9.e30.sig", "holds no JWT"),  # no sun, no exp
        (jwt.mint(KEY, "root", 3600), "for Slurm user 'root', but this service acts as 'tandem'"),
        (jwt.mint(KEY, "tandem", 3600, now=1_000_000), "expired at 1970-01-12"),
    ],
)
def test_a_token_that_cannot_serve_stops_the_service_at_start_with_why(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "slurm.jwt"
    path.write_text(text)
    with pytest.raises(TokenFileError, match=re.escape(says)):
        TokenFile(str(path), "tandem")


def test_a_missing_token_file_says_which(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match=r"gone\.jwt"):
        TokenFile(str(tmp_path / "gone.jwt"), "tandem")


def test_a_service_needs_its_token_file(tmp_path: Path) -> None:
    cfg = settings.load(ClusterSettings, ["--slurm-user=tandem"], {})
    with pytest.raises(SystemExit, match="scontrol token username=tandem"):
        SlurmRestClient.for_service(cfg)
    path = _token_file(tmp_path, user="root")
    plaintext = "--slurm-api-allow-plaintext=true"  # the default URL is http://
    cfg = settings.load(ClusterSettings, ["--slurm-user=tandem", f"--slurm-token-file={path}", plaintext], {})
    with pytest.raises(SystemExit, match="for Slurm user 'root'"):
        SlurmRestClient.for_service(cfg)
    path = _token_file(tmp_path, user="tandem")
    client = SlurmRestClient.for_service(cfg)
    try:
        assert client.user == "tandem"
    finally:
        client.close()
