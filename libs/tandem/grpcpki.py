"""Tandem's own gRPC CA and the certificate of each identity, as the chart's PKI Job makes them.

Each identity's certificate names it in a URI SAN (`tandem.mtls.identity_uri`), which is what the
services go by; its CN repeats the identity for people. A server's certificate also carries the
DNS names its clients dial. Keys are ECDSA P-256. A certificate is kept while it is signed by the
current CA, names exactly what it should and has more than the renewal margin left (`fresh`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tandem import mtls

# Issued a little in the past: a node whose clock runs behind still takes a certificate just made.
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM."""

    cert: bytes
    key: bytes


@dataclass(frozen=True)
class Identity:
    """What one certificate must name: a Tandem identity and, for a server, its DNS names."""

    name: str
    dns_names: tuple[str, ...] = ()

    def sans(self) -> set[str]:
        return {f"URI:{mtls.identity_uri(self.name)}", *(f"DNS:{d}" for d in self.dns_names)}


def new_ca(common_name: str, days: int, now: dt.datetime) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key.public_key(), days, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_pem(cert), _key_pem(key))


def issue(ca: KeyPair, identity: Identity, days: int, now: dt.datetime) -> KeyPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA's key is not an ECDSA key")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.name)])
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(mtls.identity_uri(identity.name))]
    names += [x509.DNSName(d) for d in identity.dns_names]
    purposes = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if identity.dns_names:
        purposes.append(ExtendedKeyUsageOID.SERVER_AUTH)
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), days, now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(_pem(cert), _key_pem(key))


def ca_fresh(ca: KeyPair, renew_before: dt.timedelta, now: dt.datetime) -> bool:
    """A CA worth keeping: its certificate and ECDSA key load and match, and it has time left (an
    RSA CA of an older chart is replaced)."""
    try:
        cert = x509.load_pem_x509_certificate(ca.cert)
        key = serialization.load_pem_private_key(ca.key, password=None)
    except (ValueError, TypeError):
        return False
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return False
    return (
        key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        == cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        and cert.not_valid_after_utc - now > renew_before
    )


def fresh(
    cert_pem: bytes, ca_pem: bytes, identity: Identity, renew_before: dt.timedelta, now: dt.datetime
) -> bool:
    """A certificate worth keeping: signed by this CA, naming exactly `identity`, time left."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    named = {f"URI:{u}" for u in sans.get_values_for_type(x509.UniformResourceIdentifier)}
    named |= {f"DNS:{d}" for d in sans.get_values_for_type(x509.DNSName)}
    return named == identity.sans() and cert.not_valid_after_utc - now > renew_before


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int, now: dt.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
