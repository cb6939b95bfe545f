"""A certificate authority of its own for the local Kafka broker's TLS listeners and its clients
(tests, `kappa kafka start --secured`): what a company's PKI gives a team, made here so that a
test can also make what it must refuse (a certificate expired, one signed by another CA).

Keys are EC P-256; files are PEM, keys unencrypted PKCS#8: what a Kubernetes TLS Secret holds
and what Kafka's PEM keystore (``ssl.keystore.type=PEM``) and librdkafka both read."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = dt.timedelta(days=365)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as files; ``keystore`` is both in one file (key first), the
    form Kafka's PEM keystore reads from a location."""

    cert: Path
    key: Path
    keystore: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    pkcs8, none = serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, none)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


@dataclass(frozen=True)
class Authority:
    """A self-signed CA whose certificate is ``ca``; it issues into ``directory``."""

    directory: Path
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @classmethod
    def create(cls, directory: Path, name: str = "kappa-local-ca") -> Authority:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        authority = cls(directory, key, certificate)
        authority.ca.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return authority

    def issue(
        self,
        name: str,
        hosts: Iterable[str] = (),
        expired: bool = False,
    ) -> Issued:
        """A certificate for ``name``: a server's when ``hosts`` (its addresses and names, in
        its subjectAltName), else a client's. ``expired``: it ended yesterday (what a listener
        must refuse)."""
        hosts = tuple(hosts)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        day = dt.timedelta(days=1)
        start, end = (now - 10 * day, now - day) if expired else (now - day, now + VALID)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if hosts else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        cert_pem, key_pem = certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key)
        issued = Issued(self.directory / f"{name}.crt", self.directory / f"{name}.key", self.directory / f"{name}.pem")
        issued.cert.write_bytes(cert_pem)
        issued.key.write_bytes(key_pem)
        issued.key.chmod(0o600)
        issued.keystore.write_bytes(key_pem + cert_pem)
        issued.keystore.chmod(0o600)
        return issued
