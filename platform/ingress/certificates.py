"""TLS Secrets → model ``Certificate`` data, with the checks that decide
whether a Secret may be served at all.

A Secret is usable when all of these hold (otherwise an ``Issue`` says which,
and the translator serves the host with the default certificate):

* it exists and has ``type: kubernetes.io/tls`` (Opaque secrets are refused:
  the Kubernetes Ingress contract names the TLS type and its two keys);
* ``data["tls.crt"]`` and ``data["tls.key"]`` are base64 PEM; the first
  CERTIFICATE block is the leaf, the rest is the chain;
* the key is unencrypted and belongs to the leaf: for RSA the moduli are
  compared, for EC the public point when the key carries it (OpenSSL's do);
  other key types (Ed25519...) are accepted without that check;
* the leaf is valid now (``notBefore <= now <= notAfter``).

``covers`` decides whether a certificate serves a host: its DNS SANs (or, with
no SANs, the subject CN, as ingress-nginx still does), wildcards matching one
label. No third-party crypto library: a minimal DER reader (enough for X.509
validity, SAN, CN and public keys) keeps this a pure function of its input.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import re
import ssl
from dataclasses import dataclass, field

from platformd.ingress.snapshot import Issue

__all__ = ["Loaded", "covers", "load"]

_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)
_OID_SAN = bytes.fromhex("551d11")
_OID_CN = bytes.fromhex("550403")
_OID_RSA = bytes.fromhex("2a864886f70d010101")
_OID_EC = bytes.fromhex("2a8648ce3d0201")


@dataclass(frozen=True)
class Loaded:
    """A usable certificate (``cert_pem``/``key_pem`` set) or the reason it is not."""

    cert_pem: str = field(default="", repr=False)
    key_pem: str = field(default="", repr=False)
    names: tuple[str, ...] = ()  # DNS names the leaf is valid for
    not_after: float = 0.0
    issue: Issue | None = None

    @property
    def ok(self) -> bool:
        return self.issue is None


class _Bad(ValueError):
    """A malformed DER structure or PEM."""


# --- DER ---------------------------------------------------------------------


def _tlv(data: bytes, offset: int) -> tuple[int, bytes, int]:
    """(tag, content, next offset) of the DER element at ``offset``."""
    if offset + 2 > len(data):
        raise _Bad("truncated DER")
    tag = data[offset]
    length = data[offset + 1]
    offset += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or offset + count > len(data):
            raise _Bad("bad DER length")
        length = int.from_bytes(data[offset:offset + count], "big")
        offset += count
    end = offset + length
    if end > len(data):
        raise _Bad("truncated DER")
    return tag, data[offset:end], end


def _children(content: bytes) -> list[tuple[int, bytes]]:
    items, offset = [], 0
    while offset < len(content):
        tag, value, offset = _tlv(content, offset)
        items.append((tag, value))
    return items


def _time(tag: int, value: bytes) -> float:
    text = value.decode("ascii")
    if tag == 0x17:  # UTCTime YYMMDDHHMMSSZ
        year = int(text[:2])
        text = str(1900 + year if year >= 50 else 2000 + year) + text[2:]
    elif tag != 0x18:  # GeneralizedTime YYYYMMDDHHMMSSZ
        raise _Bad("bad time")
    if not re.fullmatch(r"[0-9]{14}Z", text):
        raise _Bad("bad time")
    parts = [int(text[i:j]) for i, j in ((0, 4), (4, 6), (6, 8), (8, 10), (10, 12), (12, 14))]
    return float(calendar.timegm(tuple(parts) + (0, 0, 0)))


@dataclass(frozen=True)
class _Leaf:
    not_before: float
    not_after: float
    names: tuple[str, ...]
    key_algorithm: bytes
    public_key: bytes  # RSA: modulus; EC: the point


def _int(value: bytes) -> bytes:
    return value.lstrip(b"\x00")


def _parse_leaf(der: bytes) -> _Leaf:
    _, cert, _ = _tlv(der, 0)
    tbs_tag, tbs, _ = _tlv(cert, 0)
    fields = _children(tbs)
    if fields and fields[0][0] == 0xA0:  # explicit version
        fields = fields[1:]
    # serial, signature, issuer, validity, subject, spki, [optional], [3] extensions
    validity = _children(fields[3][1])
    not_before, not_after = _time(*validity[0]), _time(*validity[1])
    subject = fields[4][1]
    alg_seq, bits = _children(fields[5][1])[:2]
    algorithm = _children(alg_seq[1])[0][1]
    key_bits = bits[1][1:]  # BIT STRING: skip the unused-bits byte
    if algorithm == _OID_RSA:
        public = _int(_children(_tlv(key_bits, 0)[1])[0][1])
    else:
        public = key_bits
    sans: list[str] = []
    for tag, value in fields[6:]:
        if tag != 0xA3:
            continue
        for _, extension in _children(_tlv(value, 0)[1]):
            parts = _children(extension)
            if parts[0][1] == _OID_SAN:
                for name_tag, name in _children(_tlv(parts[-1][1], 0)[1]):
                    if name_tag == 0x82:  # dNSName
                        sans.append(name.decode("ascii", "replace").lower())
    if not sans:
        for _, rdn in _children(subject):
            for _, attribute in _children(rdn):
                oid, value = _children(attribute)[:2]
                if oid[1] == _OID_CN:
                    sans.append(value[1].decode("utf-8", "replace").lower())
    return _Leaf(not_before, not_after, tuple(sans), algorithm, public)


def _private_public(kind: str, der: bytes) -> tuple[bytes | None, bytes | None]:
    """(algorithm OID, public key) derivable from a private key; None if unknown."""
    _, body, _ = _tlv(der, 0)
    parts = _children(body)
    if kind == "RSA PRIVATE KEY":
        return _OID_RSA, _int(parts[1][1])
    if kind == "EC PRIVATE KEY":
        return _OID_EC, _ec_public(parts)
    # PKCS#8: version, AlgorithmIdentifier, OCTET STRING privateKey
    algorithm = _children(parts[1][1])[0][1]
    inner = parts[2][1]
    if algorithm == _OID_RSA:
        return _OID_RSA, _int(_children(_tlv(inner, 0)[1])[1][1])
    if algorithm == _OID_EC:
        return _OID_EC, _ec_public(_children(_tlv(inner, 0)[1]))
    return algorithm, None


def _ec_public(parts: list[tuple[int, bytes]]) -> bytes | None:
    for tag, value in parts:
        if tag == 0xA1:  # [1] publicKey BIT STRING
            return _tlv(value, 0)[1][1:]
    return None


# --- the checks ----------------------------------------------------------------


def _decode(data: dict, name: str) -> str:
    raw = data.get(name)
    if not raw:
        raise _Bad(f"has no {name!r}")
    try:
        return base64.b64decode(raw, validate=True).decode("ascii")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise _Bad(f"{name!r} is not base64 PEM text") from None


def load(key: str, secret: dict | None, now: float) -> Loaded:
    """Check Secret ``key`` ("ns/name") for serving at unix time ``now``."""

    def bad(reason: str, message: str) -> Loaded:
        return Loaded(issue=Issue(reason, f"TLS Secret {key!r} {message}; using the default certificate"))

    if secret is None:
        return bad("SecretNotFound", "not found")
    if secret.get("type") != "kubernetes.io/tls":
        return bad("InvalidSecret", f"has type {secret.get('type')!r}, not 'kubernetes.io/tls'")
    data = secret.get("data") or {}
    try:
        cert_pem = _decode(data, "tls.crt")
        key_pem = _decode(data, "tls.key")
        blocks = [(m.group(1), m.group(0)) for m in _PEM.finditer(cert_pem)]
        certs = [pem for kind, pem in blocks if kind == "CERTIFICATE"]
        if not certs:
            raise _Bad("tls.crt holds no PEM certificate")
        leaf = _parse_leaf(ssl.PEM_cert_to_DER_cert(certs[0]))
        keys = [(m.group(1), m.group(0)) for m in _PEM.finditer(key_pem) if m.group(1).endswith("PRIVATE KEY")]
        if not keys:
            raise _Bad("tls.key holds no PEM private key")
        kind, pem = keys[0]
        if kind == "ENCRYPTED PRIVATE KEY":
            return bad("InvalidSecret", "has an encrypted private key")
        body = re.sub(r"-----[A-Z0-9 ]+-----|\s", "", pem)
        algorithm, public = _private_public(kind, base64.b64decode(body))
    except (_Bad, ValueError, IndexError, UnicodeDecodeError) as exc:
        return bad("InvalidSecret", f"is not a valid certificate and key ({exc})")
    if public is not None and (algorithm != leaf.key_algorithm or public != leaf.public_key):
        return bad("CertificateKeyMismatch", "has a private key that does not belong to its certificate")
    if now < leaf.not_before:
        return bad("CertificateNotYetValid", "holds a certificate that is not valid yet")
    if now > leaf.not_after:
        return bad("CertificateExpired", "holds an expired certificate")
    chain = "".join(c.strip() + "\n" for c in certs)
    return Loaded(cert_pem=chain, key_pem=pem.strip() + "\n", names=leaf.names, not_after=leaf.not_after)


def covers(names: tuple[str, ...], host: str) -> bool:
    """Whether a certificate for ``names`` is valid for ``host`` (maybe ``*.x``).

    A wildcard name covers exactly one extra label; a wildcard host needs the
    same wildcard in the certificate.
    """
    host = host.lower()
    for name in names:
        if name == host:
            return True
        if name.startswith("*.") and not host.startswith("*."):
            first, _, rest = host.partition(".")
            if first and rest == name[2:]:
                return True
    return False
