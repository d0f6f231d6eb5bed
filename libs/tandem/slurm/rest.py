"""A slurmrestd client for Slurm 23.11 to 26.05: the newest data-parser version both sides speak."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from opentelemetry.trace import SpanKind

from tandem import httpwire, tracing
from tandem.metrics import REGISTRY
from tandem.settings import ClusterAccess
from tandem.slurm import jwt
from tandem.slurm.dialects import SUPPORTED_VERSIONS, Dialect, UnsupportedBySlurm
from tandem.slurm.hostlist import split_items
from tandem.slurm.listing import WHOLE_ANSWER_BYTES, Listing, WholeListing
from tandem.slurm.models import Job, JobSpec, Node

log = logging.getLogger(__name__)

API_ERRORS = REGISTRY.counter(
    "tandem_slurm_api_errors_total", "slurmrestd calls that failed", ["operation", "status"]
)
_Item = TypeVar("_Item")

API_SECONDS = REGISTRY.histogram("tandem_slurm_api_seconds", "slurmrestd call latency", ["operation"])


# Slurm's error numbers that leave nothing to cancel: 2017 "Invalid job id specified" (gone, or
# never there), 2021 "Job/step already completing or completed"; 0 is success.
_CANCEL_DONE = frozenset({0, 2017, 2021})


class SlurmApiError(RuntimeError):
    """slurmrestd answered with an error; `status` is the HTTP status (0 when unreachable)."""

    def __init__(
        self, message: str, status: int = 0, summary: str = "", errors: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        # The same words for the same trouble (no errno, no connection detail): what a Pod's
        # condition and Events say, so a flapping socket error does not announce itself twice.
        self.summary = summary or message
        # Each of Slurm's errors as it names it (its `error` field: the errno's text, or its
        # ESLURM_* name in releases that send that), to tell one refusal from another by.
        self.errors = errors


# Slurm refuses a job this way while its topology does not join the job's required nodes: a state
# that the next topology change (a relabelled Node, the syncer's rewrite) may end, not a fault of
# the job. Its text and its name: the errno's number moves between releases.
TOPOLOGY_NOT_AVAILABLE = frozenset(
    {"Requested topology configuration is not available", "ESLURM_REQUESTED_TOPO_CONFIG_UNAVAILABLE"}
)


def waits_for_topology(e: SlurmApiError) -> bool:
    """Whether Slurm refused a job for its topology as it is now (TOPOLOGY_NOT_AVAILABLE)."""
    return any(error in TOPOLOGY_NOT_AVAILABLE for error in e.errors)


# Slurm refuses a job naming a feature no node has so (measured on 24.11: HTTP 500, this text).
# A job whose only features are the topology domains Tandem gives nodes meets it while Slurm has
# not taken them yet: its reconfigure drops every feature set at run time until they are set again.
INVALID_FEATURE = frozenset({"Invalid feature specification", "ESLURM_INVALID_FEATURE"})


def refused_its_features(e: SlurmApiError) -> bool:
    """Whether Slurm refused a job because no node has a feature it names (INVALID_FEATURE)."""
    return any(error in INVALID_FEATURE for error in e.errors)


# The status of an answer that is not what slurmrestd sends (garbled, truncated, half a body): as a
# bad gateway, transient; the caller asks again.
MALFORMED = 502


@contextmanager
def _answer_of(operation: str) -> Iterator[None]:
    """Whatever slurmrestd's answer lacks or garbles is one clear, transient error, never a
    KeyError from deep inside a parser."""
    try:
        yield
    except (SlurmApiError, UnsupportedBySlurm):
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, OverflowError) as e:
        raise SlurmApiError(
            f"{operation}: slurmrestd's answer is malformed ({type(e).__name__}: {e})"[:500],
            MALFORMED,
            summary=f"slurmrestd's answer to {operation} is malformed",
        ) from e


class TokenSource:
    """A fixed token, or tokens minted from slurmctld's jwt_key and renewed before they expire: for
    the lab and its tests, which stand where a Slurm administrator stands. The services never hold
    the key; they read their own token from a file (TokenFile)."""

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


TOKEN_EXPIRES = REGISTRY.gauge(
    "tandem_slurm_token_expiry_timestamp_seconds",
    "when the service's Slurm JWT (--slurm-token-file) expires (unix seconds)",
    [],
)


class TokenFileError(ValueError):
    """The token file is missing, empty, not a JWT, for another user, or expired."""


class TokenFile:
    """This service's own Slurm JWT, from a file an operator keeps fresh (a Secret made with
    `scontrol token username=<user> lifespan=<s>`). The file is read again whenever it changes (a
    Secret's new version swaps the mounted file), so a renewed token needs no restart; a bad new
    version is logged and the last good token kept."""

    def __init__(self, path: str, user: str) -> None:
        self._path = path
        self._user = user
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._token = ""
        self._load()

    def token(self, user: str) -> str:
        with self._lock:
            try:
                if self._stat() != self._seen:
                    self._load()
            except (OSError, TokenFileError) as e:
                log.error("kept the last good Slurm token: %s", e)
            return self._token

    def _stat(self) -> tuple[int, int, int]:
        st = Path(self._path).stat()
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self) -> None:
        try:
            seen = self._stat()
            text = Path(self._path).read_text().strip()
        except OSError as e:
            raise TokenFileError(f"Slurm token file {self._path}: {e.strerror or e}") from e
        # The file may hold scontrol's own words: "SLURM_JWT=eyJ...".
        token = text.removeprefix("SLURM_JWT=")
        try:
            claims = jwt.claims(token)
        except ValueError as e:
            raise TokenFileError(f"Slurm token file {self._path} holds no JWT ({e})") from e
        if claims.user != self._user:
            raise TokenFileError(
                f"Slurm token file {self._path} holds a token for Slurm user {claims.user!r}, but"
                f" this service acts as {self._user!r} (--slurm-user)"
            )
        if claims.expires <= time.time():
            raise TokenFileError(
                f"Slurm token file {self._path}: the token expired at"
                f" {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(claims.expires))}"
            )
        self._token, self._seen = token, seen
        TOKEN_EXPIRES.set(claims.expires)
        log.info(
            "Slurm token for %s read from %s (expires %s)",
            claims.user,
            self._path,
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(claims.expires)),
        )


class SlurmRestClient:
    """One slurmrestd, one OpenAPI version (detected on first use unless given)."""

    def __init__(
        self,
        base_url: str,
        user: str,
        tokens: TokenSource | TokenFile,
        version: str = "auto",
        timeout: float = 30.0,
        ca_file: str = "",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.user = user
        self.tokens = tokens
        self._dialect: Dialect | None = None if version == "auto" else Dialect(version)
        self._http = httpwire.Client(
            self.base_url,
            timeout=timeout,
            # https:// slurmrestd: its certificate checked against the CA given, else the system's.
            ssl_context=ssl.create_default_context(cafile=ca_file or None),
        )

    @classmethod
    def for_service(cls, cfg: ClusterAccess, timeout: float = 30.0) -> SlurmRestClient:
        """A service's client: it acts as its own Slurm user, with the token its file holds; a
        service without a good one does not start."""
        if not cfg.slurm_token_file:
            raise SystemExit(
                "--slurm-token-file (TANDEM_SLURM_TOKEN_FILE) is required: a JWT for"
                f" --slurm-user {cfg.slurm_user!r}, made with `scontrol token username={cfg.slurm_user}`"
            )
        problem = plaintext_problem(cfg.slurm_api_base, cfg.slurm_api_allow_plaintext)
        if problem:
            raise SystemExit(problem)
        try:
            tokens = TokenFile(cfg.slurm_token_file, cfg.slurm_user)
        except TokenFileError as e:
            raise SystemExit(str(e)) from e
        return cls(cfg.slurm_api_base, cfg.slurm_user, tokens, timeout=timeout, ca_file=cfg.slurm_api_ca_file)

    def close(self) -> None:
        self._http.close()

    @property
    def dialect(self) -> Dialect:
        if self._dialect is None:
            self._dialect = Dialect(self._negotiate())
        return self._dialect

    def _negotiate(self) -> str:
        """The newest data-parser version the server serves (each release serves a window of
        them: 24.11 v0.0.40-42, 26.05 v0.0.42-45), asked newest first."""
        for version in SUPPORTED_VERSIONS:
            try:
                r = self._http.request("GET", f"/slurm/{version}/ping", headers=self._auth(self.user))
            except httpwire.HttpError as e:
                raise SlurmApiError(
                    f"slurmrestd at {self.base_url} unreachable: {e}",
                    summary=f"slurmrestd at {self.base_url} unreachable",
                ) from e
            if r.status_code == 200:
                with _answer_of(f"GET {version}/ping"):
                    release = _slurm_release(r.json())
                log.info(
                    "slurmrestd data-parser version chosen",
                    extra={"version": version, "slurm": release, "url": self.base_url},
                )
                return version
            if r.status_code in (401, 403):
                raise SlurmApiError(f"slurmrestd refused our token: HTTP {r.status_code}", r.status_code)
            # Only 404 says "not served"; anything else is no answer, and settling for an older
            # version on a passing error would keep it for the life of the process.
            if r.status_code != 404:
                raise SlurmApiError(
                    f"slurmrestd at {self.base_url} could not say whether it serves {version}: "
                    f"HTTP {r.status_code}: {r.text[:200]}",
                    r.status_code,
                )
        raise SlurmApiError(f"slurmrestd at {self.base_url} serves none of {SUPPORTED_VERSIONS}", 404)

    def ping(self) -> bool:
        """Whether slurmrestd and a slurmctld behind it both answer."""
        try:
            with _answer_of("GET ping"):
                return self.dialect.controller_responding(self._request("GET", "ping").json())
        except SlurmApiError:
            return False

    def reconfigure(self) -> None:
        """`scontrol reconfigure`: slurmctld reads its configuration files again (the syncer's
        topology). Only Slurm's administrators may; rc 0 does not mean slurmctld lived through it."""
        with _answer_of("GET reconfigure"):
            problem = _errors(self._request("GET", "reconfigure").json())
        if problem:
            raise SlurmApiError(f"GET reconfigure: {problem}", 200)

    def submit_job(self, spec: JobSpec) -> int:
        body = self.dialect.submit_body(spec)
        with _answer_of("POST job/submit"):
            data = self._request("POST", "job/submit", json=body).json()
            job_id = data.get("job_id")
            if job_id is None:
                raise SlurmApiError(
                    f"submit answered no job id: {_errors(data) or data}", errors=_error_names(data)
                )
            return int(job_id)

    def get_job(self, job_id: int) -> Job | None:
        return next((j for j in self.get_job_components(job_id) if j.job_id == job_id), None)

    def get_job_components(self, job_id: int) -> list[Job]:
        """A job as GET job/{id} lists it: a heterogeneous job's first component brings every
        component (each a job of its own); any other job, itself. Empty when Slurm knows none."""
        with _answer_of("GET job"):
            try:
                data = self._request("GET", f"job/{job_id}").json()
            except SlurmApiError as e:
                if e.status == 404 or "Invalid job id" in str(e):
                    return []
                raise
            return [self.dialect.parse_job(j) for j in data.get("jobs") or []]

    def list_jobs(self, changed_since: int | None = None) -> list[Job] | None:
        """All jobs; None when nothing changed since `changed_since` (unix seconds)."""
        with _answer_of("GET jobs"):
            return self._list("jobs", changed_since, self.dialect.parse_job)

    def list_nodes(self, changed_since: int | None = None) -> list[Node] | None:
        """All nodes; None when nothing changed since `changed_since` (unix seconds)."""
        with _answer_of("GET nodes"):
            return self._list("nodes", changed_since, self.dialect.parse_node)

    def job_states(self, job_ids: list[int]) -> dict[int, tuple[str, tuple[str, ...]]]:
        """(base state, flags) of the given jobs, from the light GET /jobs/state listing (a few
        dozen bytes a job instead of a whole job). Jobs Slurm no longer knows are absent."""
        if not job_ids:
            return {}
        with _answer_of("GET jobs/state"):
            data = self._request("GET", "jobs/state/", params={"job_id": [str(j) for j in job_ids]}).json()
            states = (self.dialect.parse_job_state(raw) for raw in data.get("jobs") or [])
            asked = set(job_ids)
            return {
                entry[0]: (entry[1], entry[2]) for entry in states if entry is not None and entry[0] in asked
            }

    def all_job_states(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        """(base state, flags) of every job Slurm knows, from GET /jobs/state: a few dozen bytes a
        job where GET /jobs renders thousands."""
        with _answer_of("GET jobs/state"):
            data = self._request("GET", "jobs/state/").json()
            states = (self.dialect.parse_job_state(raw) for raw in data.get("jobs") or [])
            return {entry[0]: (entry[1], entry[2]) for entry in states if entry is not None}

    def _list(
        self, what: str, changed_since: int | None, parse: Callable[[dict[str, Any]], _Item]
    ) -> list[_Item] | None:
        """Every element of a listing, each parsed as it arrives (tandem.slurm.listing): a whole
        GET /jobs decoded at once was the syncer's memory peak."""
        if changed_since:
            try:
                r = self._request("GET", what, params={"update_time": str(changed_since)}, stream=True)
            except SlurmApiError as e:
                if e.status != 500:
                    raise
                # Slurm 24.11.5 answers a node query filtered by a time since which nodes changed
                # but partitions did not with 500 "Unable to query partitions: Unspecified error"
                # (its partition reload says "no change"). Unfiltered, it answers; it costs only a
                # bigger answer.
                r = self._request("GET", what, stream=True)
        else:
            r = self._request("GET", what, stream=True)
        try:
            if r.status_code == 304:
                return None
            size = r.headers.get("content-length")
            listing: Listing | WholeListing = (
                WholeListing(r.read(), what)
                if size is not None and size.isdigit() and int(size) <= WHOLE_ANSWER_BYTES
                else Listing(r.iter_text(), what)
            )
            items = [parse(raw) for raw in listing]
        except httpwire.HttpError as e:
            raise SlurmApiError(
                f"slurmrestd at {self.base_url} broke off GET {what}: {e}",
                summary=f"slurmrestd at {self.base_url} unreachable",
            ) from e
        finally:
            r.close()
        if listing.empty:
            return None
        # "Nothing changed since update_time" is 200 with an empty list and a warning, not 304.
        warnings = listing.rest.get("warnings") or []
        if (
            changed_since
            and not items
            and any("changes since" in str(w.get("description", "")) for w in warnings)
        ):
            return None
        return items

    def get_conf(self) -> dict[str, Any] | None:
        """Slurm's running configuration (`scontrol show config`) as slurmrestd's /conf serves it:
        `slurm_conf`, keys as slurm.conf spells them (KillWait: seconds). None when not served: the
        data-parser version has no /conf (before v0.0.45; Slurm 24.11 has none at all) or the
        server answers 404. Other errors raise as every call does."""
        if not self.dialect.serves_conf:
            return None
        with _answer_of("GET conf"):
            try:
                data = self._request("GET", "conf").json()
            except SlurmApiError as e:
                if e.status == 404:
                    return None
                raise
            problem = _errors(data)
            if problem:
                raise SlurmApiError(f"GET conf: {problem}", 200)
            conf = data["slurm_conf"]
            if not isinstance(conf, dict):
                raise TypeError(f"slurm_conf is a {type(conf).__name__}, not an object")
            return conf

    def update_job(self, job_id: int, **fields: str) -> None:
        """Change a job's string fields (e.g. `extra`, `comment`) as its owner or an operator may."""
        self._post_job(job_id, dict(fields))

    def set_excluded_nodes(self, job_id: int, hostlist: str) -> None:
        """Change the nodes a pending job must not be given (an empty hostlist: none)."""
        self._post_job(job_id, {"excluded_nodes": split_items(hostlist) if hostlist else []})

    def set_constraints(self, job_id: int, constraints: str) -> None:
        """Change a pending job's constraint (its features; "" for none). Slurm refuses a feature it
        does not know ("Invalid feature specification") and a job no longer pending."""
        self._post_job(job_id, {"constraints": constraints})

    def shrink_job(self, job_id: int, keep: tuple[str, ...]) -> None:
        """Shrink a running job in place to `keep`, a subset of its nodes (`scontrol update
        JobId=... NodeList=...`): Slurm releases the others and accounts the resize."""
        self._post_job(job_id, {"required_nodes": list(keep)})

    def _post_job(self, job_id: int, body: dict[str, Any]) -> None:
        with _answer_of("POST job"):
            problem = _errors(self._request("POST", f"job/{job_id}", json=body).json())
        if problem:
            raise SlurmApiError(f"POST job/{job_id}: {problem}", 200)

    def cancel_job(self, job_id: int, signal: str | None = None) -> None:
        """scancel: SIGTERM now, SIGKILL after KillWait (or just `signal`). Gone jobs are fine."""
        params = {"signal": signal} if signal else None
        try:
            r = self._request("DELETE", f"job/{job_id}", params=params)
        except SlurmApiError as e:
            if (
                e.status == 404
                or "Invalid job id" in str(e)
                or "already completing" in str(e).lower()
                or "Job/step already completing or completed" in str(e)
            ):
                return
            raise
        # v0.0.42+ answer 200 and put each job's own result in `status`.
        with _answer_of("DELETE job"):
            answer = r.json() if r.content else {}
            refused = [text for code, text in self.dialect.signal_results(answer) if code not in _CANCEL_DONE]
        if refused:
            raise SlurmApiError(f"DELETE job/{job_id}: {'; '.join(refused)}", r.status_code)

    def drain_node(self, node: str, reason: str) -> None:
        self._request("POST", f"node/{node}", json=self.dialect.node_state_body("DRAIN", reason))

    def resume_node(self, node: str) -> None:
        self._request("POST", f"node/{node}", json=self.dialect.node_state_body("RESUME"))

    def set_node_features(self, node: str, features: tuple[str, ...]) -> None:
        """A node's available and active features, these and no others. Slurm forgets them on a
        reconfigure or a restart (slurm.conf's come back): the caller sets them again."""
        with _answer_of("POST node"):
            answer = self._request("POST", f"node/{node}", json=self.dialect.node_features_body(features))
            problem = _errors(answer.json()) if answer.content else ""
        if problem:
            raise SlurmApiError(f"POST node/{node}: {problem}", 200)

    def _auth(self, user: str) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": self.tokens.token(user)}

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: object | None = None,
        params: Mapping[str, str | Sequence[str]] | None = None,
        stream: bool = False,
    ) -> httpwire.Response:
        """The answer to one call; an error status raises. `stream`: the body is left unread (the
        caller reads it and closes the answer), but an error's body is read here."""
        version = self.dialect.version
        operation = f"{method} {path.split('/')[0]}"
        started = time.monotonic()
        with tracing.span(
            f"slurmrestd {operation}",
            kind=SpanKind.CLIENT,
            attributes={"http.request.method": method, "url.path": f"/slurm/{version}/{path}"},
        ) as span:
            try:
                r = self._http.request(
                    method,
                    f"/slurm/{version}/{path}",
                    headers=tracing.inject(self._auth(self.user)),
                    json=json,
                    params=params,
                    stream=stream,
                )
                if stream and r.status_code >= 400:
                    try:
                        r.read()
                    finally:
                        r.close()
            except httpwire.HttpError as e:
                API_ERRORS.inc(operation=operation, status="0")
                tracing.mark_error(span, "unreachable")
                raise SlurmApiError(
                    f"slurmrestd at {self.base_url} unreachable: {e}",
                    summary=f"slurmrestd at {self.base_url} unreachable",
                ) from e
            finally:
                API_SECONDS.observe(time.monotonic() - started, operation=operation)
            span.set_attribute("http.response.status_code", r.status_code)
        if r.status_code >= 400:
            API_ERRORS.inc(operation=operation, status=str(r.status_code))
            names: tuple[str, ...] = ()
            try:
                answer = r.json()
                detail = _errors(answer) or r.text[:300]
                names = _error_names(answer)
            except (ValueError, AttributeError, TypeError):  # not JSON, or not Slurm's shape
                detail = r.text[:300]
            raise SlurmApiError(
                f"{method} {path}: HTTP {r.status_code}: {detail}", r.status_code, errors=names
            )
        return r


def plaintext_problem(base: str, allowed: bool) -> str:
    """Why a service must not start with this slurmrestd URL ("" when it may): its token is
    SlurmUser's or root's, and over http:// anyone on the path reads and replays it."""
    scheme = base.partition("://")[0].lower()
    if scheme == "https" or (scheme == "http" and allowed):
        return ""
    if scheme == "http":
        return (
            f"--slurm-api-base {base} is http://: this service's Slurm token would cross the network in the"
            " clear. Use https:// (with --slurm-api-ca-file), or set --slurm-api-allow-plaintext where the"
            " path is a loopback or encrypted by a mesh (chart: global.slurm.allowPlaintext)"
        )
    return f"--slurm-api-base {base} is neither https:// nor http://"


def _slurm_release(data: Any) -> str:
    """`meta.slurm.release` ("24.11.5") of an answer, for the log."""
    meta = data.get("meta") if isinstance(data, dict) else None
    slurm = meta.get("slurm") if isinstance(meta, dict) else None
    return str(slurm.get("release", "")) if isinstance(slurm, dict) else ""


def _error_names(data: dict[str, Any]) -> tuple[str, ...]:
    """The `error` field of each of Slurm's errors in an answer."""
    return tuple(str(e["error"]) for e in data.get("errors") or [] if isinstance(e, dict) and e.get("error"))


def _errors(data: dict[str, Any]) -> str:
    """Slurm's own words: both the description and the error text (they say different things)."""
    parts = []
    for e in data.get("errors") or []:
        if isinstance(e, dict):
            texts = [str(e[k]) for k in ("description", "error") if e.get(k)]
            parts.append(": ".join(dict.fromkeys(texts)) or str(e))
    return "; ".join(parts)
