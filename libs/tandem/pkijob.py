"""`tandem-pki`: the chart's hook that keeps the gRPC CA and each identity's certificate in Secrets
(global.tls generated mode; helm/tandem/templates/grpc-pki-hook.yaml).

Helm's own certificate functions cannot write the URI SAN that names a caller (tandem.mtls), so
the chart runs this before every install and upgrade: it reads the Secrets, keeps each one that is
still good (tandem.grpcpki.fresh) and writes the rest, a new CA first when the old one is missing
or near its end (then every certificate is issued again). After `helm uninstall` it runs again
with --remove and deletes the Secrets it made (labelled as its own for this release), nothing else.
The services read rotated files by themselves; nothing needs a restart.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tandem import grpcpki, logs, settings
from tandem.grpcpki import Identity, KeyPair
from tandem.kube import JSON, KubeClient, KubeError
from tandem.settings import LogSettings, option

log = logging.getLogger("tandem.pki")

MANAGED_BY = ("app.kubernetes.io/managed-by", "tandem-pki")
INSTANCE = "app.kubernetes.io/instance"
CA_COMMON_NAME = "tandem-grpc-ca"


@dataclass(frozen=True)
class PkiSettings(LogSettings):
    """Keep Tandem's gRPC CA and identity certificates in Secrets (the chart's PKI hook)."""

    kubeconfig: str = option("", flag="--kubeconfig", env="KUBECONFIG", help="kubeconfig; empty = in-cluster")
    namespace: str = option(
        "", flag="--namespace", env="TANDEM_PKI_NAMESPACE", help="the release's namespace"
    )
    instance: str = option("", flag="--instance", env="TANDEM_PKI_INSTANCE", help="the release's name")
    ca_secret: str = option("", flag="--ca-secret", env="TANDEM_PKI_CA_SECRET", help="the CA's Secret")
    plan: str = option(
        "[]",
        flag="--plan",
        env="TANDEM_PKI_PLAN",
        help='JSON list of {"identity", "secret", "dnsNames"}: one certificate each',
    )
    ca_validity_days: int = option(
        3650, flag="--ca-validity-days", env="TANDEM_PKI_CA_DAYS", help="CA lifetime"
    )
    cert_validity_days: int = option(
        365, flag="--cert-validity-days", env="TANDEM_PKI_CERT_DAYS", help="certificate lifetime"
    )
    renew_days: int = option(
        30, flag="--renew-days", env="TANDEM_PKI_RENEW_DAYS", help="replace what has fewer days left"
    )
    remove: bool = option(
        False, flag="--remove", env="TANDEM_PKI_REMOVE", help="delete this release's PKI Secrets instead"
    )
    trust_existing_ca: bool = option(
        False,
        flag="--trust-existing-ca",
        env="TANDEM_PKI_TRUST_EXISTING_CA",
        help="sign with a CA Secret this hook did not make (its labels say so): whoever planted it"
        " before the install holds the key to every identity; only for a CA you made yourself",
    )


@dataclass(frozen=True)
class Planned:
    identity: Identity
    secret: str


@dataclass(frozen=True)
class Write:
    """A Secret to create (`resource_version` None) or replace, with its PEM data."""

    secret: str
    data: Mapping[str, bytes]
    resource_version: str | None


def parse_plan(text: str) -> list[Planned]:
    try:
        items = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--plan is not JSON: {e}") from e
    if not isinstance(items, list):
        raise ValueError("--plan must be a JSON list")
    planned = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"--plan entry {item!r} is not an object")
        identity, secret, dns = item.get("identity"), item.get("secret"), item.get("dnsNames") or []
        if not (isinstance(identity, str) and identity and isinstance(secret, str) and secret):
            raise ValueError(f"--plan entry {item!r} needs an identity and a secret")
        if not (isinstance(dns, list) and all(isinstance(d, str) and d for d in dns)):
            raise ValueError(f"--plan entry {item!r}: dnsNames must be a list of names")
        planned.append(Planned(Identity(identity, tuple(dns)), secret))
    return planned


class UntrustedCa(RuntimeError):
    """A CA Secret this hook did not make, and the operator did not say to trust it."""


def planted(secret: JSON, cfg: PkiSettings, release_since: dt.datetime | None) -> bool:
    """Whether a CA Secret was there before this release: made before Helm's first record of it
    (`release_since`, which Helm writes before any hook runs; labels are anyone's to write), or,
    without that record, one not labelled as this hook's for this release."""
    meta = secret.get("metadata") or {}
    if release_since is not None:
        try:
            created = dt.datetime.fromisoformat(str(meta.get("creationTimestamp", "")).replace("Z", "+00:00"))
        except ValueError:
            return True
        return created < release_since
    labels = meta.get("labels") or {}
    return labels.get(MANAGED_BY[0]) != MANAGED_BY[1] or labels.get(INSTANCE) != cfg.instance


def release_record(instance: str) -> str:
    """The Secret in which Helm records a release's first revision (made before its hooks run)."""
    return f"sh.helm.release.v1.{instance}.v1"


def decide(
    observed: Mapping[str, JSON | None],
    ca_secret: str,
    planned: Sequence[Planned],
    cfg: PkiSettings,
    now: dt.datetime,
    release_since: dt.datetime | None = None,
) -> list[Write]:
    """The Secrets to write, from the ones there now (None: missing). Makes keys as it goes.
    `release_since`: when Helm first recorded the release (None: no record to read)."""
    renew = dt.timedelta(days=cfg.renew_days)
    writes: list[Write] = []
    current = observed.get(ca_secret)
    if current is not None and planted(current, cfg, release_since) and not cfg.trust_existing_ca:
        raise UntrustedCa(
            f"Secret {cfg.namespace}/{ca_secret} was not made by this release's tandem-pki"
            f" ({'it is older than the release' if release_since else 'it lacks its labels'}):"
            " whoever made it holds the key to every Tandem identity. Delete it, or set"
            " global.tls.generated.trustExistingCa=true if you made it yourself"
        )
    ca = _pair(current)
    if ca is None or not grpcpki.ca_fresh(ca, renew, now):
        ca = grpcpki.new_ca(CA_COMMON_NAME, cfg.ca_validity_days, now)
        writes.append(Write(ca_secret, _data(ca.cert, ca), _version(current)))
    for p in planned:
        existing = observed.get(p.secret)
        pair = _pair(existing)
        bundled_ca = _field(existing, "ca.crt")
        if (
            pair is not None
            and bundled_ca == ca.cert
            and grpcpki.fresh(pair.cert, ca.cert, p.identity, renew, now)
        ):
            continue
        issued = grpcpki.issue(ca, p.identity, cfg.cert_validity_days, now)
        writes.append(Write(p.secret, _data(ca.cert, issued), _version(existing)))
    return writes


def ensure(kube: KubeClient, cfg: PkiSettings, now: dt.datetime) -> list[str]:
    """Read, decide, write; the names of the Secrets written."""
    planned = parse_plan(cfg.plan)
    names = [cfg.ca_secret, *(p.secret for p in planned)]
    observed = {name: _get(kube, cfg.namespace, name) for name in names}
    record = _get(kube, cfg.namespace, release_record(cfg.instance))
    since = None
    if record is not None:
        stamp = str((record.get("metadata") or {}).get("creationTimestamp", ""))
        since = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    written = []
    for write in decide(observed, cfg.ca_secret, planned, cfg, now, since):
        body = _secret(cfg, write)
        path = f"/api/v1/namespaces/{cfg.namespace}/secrets"
        if write.resource_version is None:
            kube.post(path, body)
        else:
            # Replaced only as read: a conflict (someone else wrote it) fails the hook, and the
            # next `helm upgrade` decides again.
            kube.request("PUT", f"{path}/{write.secret}", body=body)
        written.append(write.secret)
    return written


def remove(kube: KubeClient, cfg: PkiSettings) -> list[str]:
    """Delete the release's PKI Secrets: only those labelled as this hook's for this release."""
    names = [cfg.ca_secret, *(p.secret for p in parse_plan(cfg.plan))]
    removed = []
    for name in names:
        secret = _get(kube, cfg.namespace, name)
        labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
        if (
            secret is None
            or labels.get(MANAGED_BY[0]) != MANAGED_BY[1]
            or labels.get(INSTANCE) != cfg.instance
        ):
            if secret is not None:
                log.warning("not this hook's Secret; left alone", extra={"secret": name})
            continue
        try:
            kube.delete(f"/api/v1/namespaces/{cfg.namespace}/secrets/{name}")
        except KubeError as e:
            if not e.not_found:
                raise
        removed.append(name)
    return removed


def main(argv: Sequence[str] | None = None, clock: Callable[[], dt.datetime] | None = None) -> None:
    cfg = settings.load(PkiSettings, argv)
    if not (cfg.namespace and cfg.instance and cfg.ca_secret):
        raise SystemExit("tandem-pki: --namespace, --instance and --ca-secret are required")
    logs.setup("pki", cfg.log_level)
    kube = KubeClient.from_kubeconfig(cfg.kubeconfig, timeout=15.0)
    try:
        if cfg.remove:
            done = remove(kube, cfg)
            print(f"removed {len(done)} Secret(s): {', '.join(done) or 'none'}", flush=True)
            return
        now = (clock or (lambda: dt.datetime.now(dt.UTC)))()
        done = ensure(kube, cfg, now)
        print(f"wrote {len(done)} Secret(s): {', '.join(done) or 'none (all still good)'}", flush=True)
    except (KubeError, ValueError, UntrustedCa) as e:
        raise SystemExit(f"tandem-pki: {e}") from e
    finally:
        kube.close()


def _get(kube: KubeClient, namespace: str, name: str) -> JSON | None:
    try:
        return kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except KubeError as e:
        if e.not_found:
            return None
        raise


def _field(secret: JSON | None, key: str) -> bytes:
    value = ((secret or {}).get("data") or {}).get(key) or ""
    try:
        return base64.b64decode(value)
    except ValueError:
        return b""


def _pair(secret: JSON | None) -> KeyPair | None:
    cert, key = _field(secret, "tls.crt"), _field(secret, "tls.key")
    return KeyPair(cert, key) if cert and key else None


def _version(secret: JSON | None) -> str | None:
    if secret is None:
        return None
    return str((secret.get("metadata") or {}).get("resourceVersion") or "")


def _data(ca_cert: bytes, pair: KeyPair) -> dict[str, bytes]:
    return {"ca.crt": ca_cert, "tls.crt": pair.cert, "tls.key": pair.key}


def _secret(cfg: PkiSettings, write: Write) -> JSON:
    metadata: JSON = {
        "name": write.secret,
        "namespace": cfg.namespace,
        "labels": {MANAGED_BY[0]: MANAGED_BY[1], INSTANCE: cfg.instance},
        # A release made by an older chart had these Secrets in its manifest: Helm would delete
        # them after this hook rewrote them, unless they say to keep them. Ours from now on.
        "annotations": {"helm.sh/resource-policy": "keep"},
    }
    if write.resource_version:
        metadata["resourceVersion"] = write.resource_version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in write.data.items()},
    }


if __name__ == "__main__":
    main()
