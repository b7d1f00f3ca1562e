"""A small PKI for tests: certificate authorities and the leaf certificates
they sign (servers and clients), made with ``cryptography``, as PEM text."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert_pem: str
    key_pem: str
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """(certificate file, key file) under ``directory``."""
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_text(self.cert_pem)
        key.write_text(self.key_pem)
        return cert, key


def _pem(cert: x509.Certificate, key) -> Issued:
    return Issued(
        cert.public_bytes(serialization.Encoding.PEM).decode(),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption()).decode(),
        cert, key)


def _builder(subject: str, issuer: x509.Name, public_key, days: int, not_before_days: int = 1):
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=not_before_days))
            .not_valid_after(now + datetime.timedelta(days=days)))


def authority(name: str = "Test CA", parent: Issued | None = None) -> Issued:
    """A CA certificate, self-signed or signed by ``parent`` (an intermediate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    issuer = parent.cert.subject if parent else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = _builder(name, issuer, key.public_key(), 30).add_extension(
        x509.BasicConstraints(ca=True, path_length=None), critical=True).add_extension(
        x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                      data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                      encipher_only=False, decipher_only=False), critical=True)
    cert = builder.sign(parent.key if parent else key, hashes.SHA256())
    return _pem(cert, key)


def leaf(ca: Issued, name: str, *, server: bool = False, days: int = 30, expired: bool = False) -> Issued:
    """A certificate for ``name`` signed by ``ca``: a server certificate
    (with the name as DNS SAN) or a client one."""
    key = ec.generate_private_key(ec.SECP256R1())
    if expired:
        builder = _builder(name, ca.cert.subject, key.public_key(), -1, not_before_days=10)
    else:
        builder = _builder(name, ca.cert.subject, key.public_key(), days)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False).add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
    return _pem(builder.sign(ca.key, hashes.SHA256()), key)
