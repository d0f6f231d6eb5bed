"""Mutual TLS between Tandem's services: who each caller is, what it may call, and certificates
that rotate without a restart.

A caller is the identity its client certificate names in a URI SAN of Tandem's form,
`spiffe://tandem/<identity>` (`identity_uri`), and the CA it was signed by is the one this service
trusts: not its Common Name, which any issuer that signs for tenants too (a shared ClusterIssuer)
would put in a tenant's certificate on request. gRPC reads the SAN (`peer_spiffe_id`: exactly one
URI SAN, a valid SPIFFE ID). The chart's every TLS mode writes that SAN (its generated mode
through `tandem-pki`, tandem.pkijob); the lab's certificates carry it too (devstack.pki).
Each RPC names the identities that may call it (`ACCESS`): the gateway speaks for Slurm's hooks,
the scheduler submits and watches, an operator (grpcurl, `kubectl tandem`) reads. Health and
reflection answer any authenticated caller; nothing answers a caller without a certificate.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from tandem import rpcwrap

log = logging.getLogger(__name__)

SCHEDULER = "tandem-scheduler"
SYNCER = "tandem-syncer"
HOOKS = "tandem-hooks"
OPERATOR = "tandem-operator"
IDENTITIES = frozenset({SCHEDULER, SYNCER, HOOKS, OPERATOR})
IDENTITY_URI_PREFIX = "spiffe://tandem/"

_SYNCER = "/tandem.v1.SyncerService/"
_SCHEDULER = "/tandem.v1.SchedulerService/"
# Every RPC and who may call it. The hooks' calls move locks, jobs and Pods: only the gateway,
# which checks each Slurm caller's credential first, makes them. An operator reads.
ACCESS: Mapping[str, frozenset[str]] = {
    _SYNCER + "AcquireNodeLock": frozenset({HOOKS}),
    _SYNCER + "ReleaseNodeLock": frozenset({HOOKS}),
    _SYNCER + "JobStarted": frozenset({HOOKS}),
    _SYNCER + "JobTerminating": frozenset({HOOKS}),
    _SYNCER + "DrainNode": frozenset({HOOKS}),
    _SYNCER + "PlaceholderSubmitted": frozenset({SCHEDULER}),
    _SYNCER + "WatchSlurm": frozenset({SCHEDULER, OPERATOR}),
    _SYNCER + "GetNodeLock": frozenset({OPERATOR}),
    _SYNCER + "ListNodeLocks": frozenset({OPERATOR}),
    _SCHEDULER + "GetPlacement": frozenset({SYNCER, OPERATOR}),
    _SCHEDULER + "ListPlacements": frozenset({SYNCER, OPERATOR}),
}
# Probes and grpcurl's `list`/`describe`: harmless, but still only for a caller with a certificate.
_ANY_IDENTITY_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")

# How often the files are looked at again: a stat of three files, on a new connection or call.
RELOAD_CHECK_SECONDS = 5.0
# A channel replaced by a rotation keeps its calls in flight (a WatchSlurm stream) this long.
RETIRED_CHANNEL_SECONDS = 600.0


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA that signs every Tandem identity, and this process's own certificate."""

    ca: str
    cert: str
    key: str

    def read(self) -> tuple[bytes, bytes, bytes]:
        with open(self.ca, "rb") as ca, open(self.cert, "rb") as cert, open(self.key, "rb") as key:
            return ca.read(), cert.read(), key.read()

    @classmethod
    def required(cls, ca: str, cert: str, key: str, service: str) -> TlsFiles:
        """The files a service was given, or a start-up error that says which flag is missing."""
        missing = [flag for flag, path in (("ca", ca), ("cert", cert), ("key", key)) if not path]
        if missing:
            flags = ", ".join(f"--grpc-{name}-file" for name in missing)
            raise SystemExit(
                f"{service}: {flags} required: Tandem's gRPC is mutual TLS only "
                "(the chart mounts <fullname>-<component>-tls; the lab makes them in .tandem/pki/grpc)"
            )
        files = cls(ca, cert, key)
        try:
            files.read()
        except OSError as e:
            raise SystemExit(f"{service}: cannot read the gRPC TLS files: {e}") from e
        return files


class _Watch:
    """Has any of the files changed since the last look? (A Secret mount swaps a symlink: the
    inode changes.) Looks at most once every RELOAD_CHECK_SECONDS."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.seen = self._signature()
        self.next_check = time.monotonic() + RELOAD_CHECK_SECONDS
        self.lock = threading.Lock()

    def _signature(self) -> tuple[tuple[int, int, int], ...]:
        stats = []
        for path in (self.files.ca, self.files.cert, self.files.key):
            try:
                st = os.stat(path)
            except OSError:
                stats.append((0, 0, 0))
            else:
                stats.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stats)

    def changed(self) -> bool:
        with self.lock:
            now = time.monotonic()
            if now < self.next_check:
                return False
            self.next_check = now + RELOAD_CHECK_SECONDS
            current = self._signature()
            if current == self.seen:
                return False
            self.seen = current
            return True


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Serving credentials that require a client certificate from Tandem's CA, and take new files
    for every new connection once they change."""
    watch = _Watch(files)

    def config() -> Any:
        ca, cert, key = files.read()
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch() -> Any:
        if not watch.changed():
            return None
        try:
            fresh = config()
        except OSError as e:  # mid-swap: keep serving with what we have, look again later
            log.warning(
                "gRPC certificate files unreadable; keeping the current ones", extra={"error": str(e)}
            )
            return None
        log.info("gRPC serving certificate reloaded", extra={"cert": files.cert})
        return fresh

    return grpc.dynamic_ssl_server_credentials(config(), fetch, require_client_authentication=True)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


class _CurrentCallable:
    """A stub's method bound to whichever channel is current when it is called."""

    def __init__(self, owner: ReloadingChannel, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self._owner, self._kind, self._args, self._kwargs = owner, kind, args, kwargs
        self._made_for: grpc.Channel | None = None
        self._callable: Any = None

    def _target(self) -> Any:
        channel = self._owner.current()
        if channel is not self._made_for:
            self._callable = getattr(channel, self._kind)(*self._args, **self._kwargs)
            self._made_for = channel
        return self._callable

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # with_call, future
        return getattr(self._target(), name)


class ReloadingChannel(grpc.Channel):  # type: ignore[misc]
    """A mutual-TLS channel that makes a new connection with the new certificate once the files
    change; calls already in flight finish on the old one."""

    def __init__(self, address: str, files: TlsFiles, options: list[tuple[str, Any]]) -> None:
        self._address, self._files, self._options = address, files, options
        self._watch = _Watch(files)
        self._lock = threading.Lock()
        self._channel = self._open()
        self._retired: list[tuple[float, grpc.Channel]] = []

    def _open(self) -> grpc.Channel:
        return grpc.secure_channel(self._address, channel_credentials(self._files), options=self._options)

    def current(self) -> grpc.Channel:
        if self._watch.changed():
            try:
                fresh = self._open()
            except OSError as e:
                log.warning(
                    "gRPC client certificate unreadable; keeping the current one", extra={"error": str(e)}
                )
            else:
                log.info("gRPC client certificate reloaded", extra={"cert": self._files.cert})
                with self._lock:
                    self._retired.append((time.monotonic(), self._channel))
                    self._channel = fresh
        self._close_retired()
        return self._channel

    def _close_retired(self) -> None:
        if not self._retired:
            return
        with self._lock:
            cutoff = time.monotonic() - RETIRED_CHANNEL_SECONDS
            old = [c for t, c in self._retired if t < cutoff]
            self._retired = [(t, c) for t, c in self._retired if t >= cutoff]
        for channel in old:
            channel.close()

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _CurrentCallable(self, "unary_unary", args, kwargs)

    def unary_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _CurrentCallable(self, "unary_stream", args, kwargs)

    def stream_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _CurrentCallable(self, "stream_unary", args, kwargs)

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _CurrentCallable(self, "stream_stream", args, kwargs)

    def subscribe(self, callback: Callable[..., Any], try_to_connect: bool = False) -> None:
        self._channel.subscribe(callback, try_to_connect)

    def unsubscribe(self, callback: Callable[..., Any]) -> None:
        self._channel.unsubscribe(callback)

    def close(self) -> None:
        with self._lock:
            channels = [self._channel, *(c for _, c in self._retired)]
            self._retired = []
        for channel in channels:
            channel.close()

    def __enter__(self) -> ReloadingChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def identity_uri(identity: str) -> str:
    """The URI SAN a certificate of `identity` carries (the chart's and the lab's form)."""
    return IDENTITY_URI_PREFIX + identity


def peer_identity(context: grpc.ServicerContext) -> str:
    """The Tandem identity the caller's verified certificate names in its URI SAN; "" for none (no
    certificate, a SAN of another form, or several URI SANs: gRPC then gives no SPIFFE ID). The
    Common Name is never read."""
    spiffe = (context.auth_context() or {}).get("peer_spiffe_id") or []
    uri = spiffe[0].decode(errors="replace") if spiffe else ""
    return uri.removeprefix(IDENTITY_URI_PREFIX) if uri.startswith(IDENTITY_URI_PREFIX) else ""


def allowed(method: str, identity: str, access: Mapping[str, frozenset[str]] = ACCESS) -> bool:
    if not identity:
        return False
    if method.startswith(_ANY_IDENTITY_PREFIXES):
        return identity in IDENTITIES
    return identity in access.get(method, frozenset())


def refusal(
    method: str, context: grpc.ServicerContext, access: Mapping[str, frozenset[str]] = ACCESS
) -> rpcwrap.Refusal | None:
    """Why the certified caller may not make this call; None: it may."""
    identity = peer_identity(context)
    if allowed(method, identity, access):
        return None
    who = identity or (
        "a caller whose certificate names no Tandem identity (a URI SAN"
        f" {IDENTITY_URI_PREFIX}<identity> from Tandem's CA)"
    )
    log.warning("gRPC call refused", extra={"method": method, "caller": who})
    return grpc.StatusCode.PERMISSION_DENIED, f"{who} may not call {method}"


class AuthorizationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses, before any work, a call whose certified caller may not make it, whether the call
    is a coroutine on the loop or a plain method on the pool (tandem.rpcwrap)."""

    def __init__(self, access: Mapping[str, frozenset[str]] = ACCESS) -> None:
        self.access = access

    async def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        method: str = details.method
        return rpcwrap.guarded(handler, lambda context: refusal(method, context, self.access))
