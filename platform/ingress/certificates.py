"""TLS Secrets → model ``Certificate`` data, with the checks that decide
whether a Secret may be served at all.

A Secret is usable when all of these hold (otherwise an ``Issue`` says which,
and the translator serves the host with the default certificate):

* it exists and has ``type: kubernetes.io/tls`` (Opaque secrets are refused:
  the Kubernetes Ingress contract names the TLS type and its two keys);
* it is small enough (``MAX_CHAIN_BYTES``, ``MAX_CHAIN_CERTIFICATES``,
  ``MAX_KEY_BYTES``): Secrets come from every tenant, and one of 900 KB
  per Secret filled the 32 MB certificate store of Lua for everyone;
* ``data["tls.crt"]`` and ``data["tls.key"]`` are base64 PEM; the first
  CERTIFICATE block is the leaf, the rest is the chain, and every block
  parses (Lua refuses the whole certificates section otherwise);
* the key is an unencrypted RSA (1024-8192 bits), ECDSA (P-256, P-384,
  P-521), Ed25519 or Ed448 key, and it belongs to the leaf: its public key
  is compared with the certificate's, whatever the type. DSA (no TLS 1.3,
  no browser support) and keys that cannot sign are refused;
* the leaf is valid now (``notBefore <= now <= notAfter``).

Parsing is the ``cryptography`` package's (OpenSSL's X.509 and key readers)
rather than our own DER reader: Secrets are untrusted input, and the library
is maintained against exactly that. Parsing an RSA key checks it (~1 ms),
so the facts of a Secret are cached by a digest of its data (``_FACTS``,
bounded, holding no key material: nothing outlives the Secret but a digest).

``within_budget`` keeps the certificates of one configuration inside the
share of the Lua store they may use (``STORE_BUDGET``), refusing the largest
first. ``covers`` decides whether a certificate serves a host: its DNS SANs
(or, with no SANs, the subject CN, as ingress-nginx still does), wildcards
matching one label.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import NameOID

from platformd.ingress.snapshot import Issue

__all__ = ["Loaded", "MAX_CHAIN_BYTES", "MAX_CHAIN_CERTIFICATES", "MAX_KEY_BYTES", "STORE_BUDGET",
           "covers", "load", "within_budget"]

# A real chain (leaf + two intermediates, RSA 4096) is under 8 KB of PEM; the
# longest public chains (cross-signed roots included) stay under 20 KB.
# 128 KiB leaves room for any honest chain and bounds a hostile one.
MAX_CHAIN_BYTES = 128 * 1024
# OpenSSL's default verify depth is 100, but no browser builds paths that
# long; 10 certificates is more than any public PKI uses.
MAX_CHAIN_CERTIFICATES = 10
# An RSA 8192-bit key is 6.4 KB of PEM.
MAX_KEY_BYTES = 16 * 1024
RSA_MIN_BITS = 1024  # OpenSSL 3's security level 1 refuses smaller keys at handshake time
RSA_MAX_BITS = 8192  # a 16384-bit key costs ~1 s of CPU per handshake: a denial of service
# The template gives Lua ``lua_shared_dict platform_certificates 32m``; a new
# version of the certificates is stored beside the old one until the swap,
# and the slab allocator needs headroom, so one configuration may use 12 MiB.
STORE_BUDGET = 12 * 1024 * 1024
_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)  # what TLS signature algorithms name

_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)


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

    @property
    def size(self) -> int:
        """Bytes this certificate takes in the Lua store (PEMs)."""
        return len(self.cert_pem) + len(self.key_pem)


class _Bad(ValueError):
    """A Secret that cannot be served: ``reason`` is the Issue reason."""

    def __init__(self, message: str, reason: str = "InvalidSecret") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class _Facts:
    """What a Secret's data says, without its key material (safe to cache)."""

    names: tuple[str, ...] = ()
    not_before: float = 0.0
    not_after: float = 0.0
    error: tuple[str, str] | None = None  # (message, reason): not the exception, whose traceback would grow


def _decoded_pem(data: dict, name: str, limit: int) -> str:
    raw = data.get(name)
    if not raw:
        raise _Bad(f"has no {name!r}")
    if not isinstance(raw, str):
        raise _Bad(f"{name!r} is not base64 PEM text")
    # Checked before decoding: base64 is 4/3 of the data (plus line breaks).
    if len(raw) > limit * 4 // 3 + 4096:
        raise _Bad(f"{name!r} is larger than {limit // 1024} KiB", "SecretTooLarge")
    try:
        text = base64.b64decode(raw, validate=True).decode("ascii")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise _Bad(f"{name!r} is not base64 PEM text") from None
    if len(text) > limit:
        raise _Bad(f"{name!r} is larger than {limit // 1024} KiB", "SecretTooLarge")
    return text


def _blocks(text: str, kind_suffix: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(0)) for m in _PEM.finditer(text) if m.group(1).endswith(kind_suffix)]


def _check_key(key: object) -> None:
    if isinstance(key, rsa.RSAPrivateKey):
        if not RSA_MIN_BITS <= key.key_size <= RSA_MAX_BITS:
            raise _Bad(f"has an RSA key of {key.key_size} bits (allowed: {RSA_MIN_BITS}-{RSA_MAX_BITS})",
                       "UnsupportedKey")
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, _CURVES):
            raise _Bad(f"has an EC key on curve {key.curve.name} (allowed: P-256, P-384, P-521)", "UnsupportedKey")
    elif isinstance(key, dsa.DSAPrivateKey):
        raise _Bad("has a DSA key; DSA is not usable with TLS 1.3 or current browsers", "UnsupportedKey")
    elif not isinstance(key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)):
        raise _Bad(f"has a {type(key).__name__.removeprefix('_')} key, which cannot sign TLS handshakes",
                   "UnsupportedKey")


def _spki(public_key: object) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _names(leaf: x509.Certificate) -> tuple[str, ...]:
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [n.lower() for n in san.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        names = []
    if not names:
        names = [str(a.value).lower() for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return tuple(names)


def _facts(cert_pem: str, certs: list[str], key_pem: str) -> _Facts:
    try:
        chain = x509.load_pem_x509_certificates("".join(certs).encode())
    except ValueError as exc:
        raise _Bad(f"has a certificate that does not parse ({exc})") from None
    leaf = chain[0]
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except TypeError:  # "Password was not given but private key is encrypted"
        raise _Bad("has an encrypted private key") from None
    except (ValueError, serialization.UnsupportedAlgorithm) as exc:
        raise _Bad(f"has a private key that does not parse ({exc})") from None
    _check_key(key)
    # Public data on both sides, but compared without an early exit anyway:
    # this is the check that decides whether a key may serve a name.
    if not hmac.compare_digest(_spki(key.public_key()), _spki(leaf.public_key())):
        raise _Bad("has a private key that does not belong to its certificate", "CertificateKeyMismatch")
    return _Facts(_names(leaf), leaf.not_valid_before_utc.timestamp(), leaf.not_valid_after_utc.timestamp())


class _FactsCache:
    """Facts by a SHA-256 of the Secret's two PEM texts; bounded LRU.

    Holds no PEM text: a Secret's data is released with the Secret.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._lock = threading.Lock()  # full and endpoint syncs translate concurrently
        self._entries: OrderedDict[bytes, _Facts] = OrderedDict()

    def get(self, cert_pem: str, certs: list[str], key_pem: str) -> _Facts:
        digest = hashlib.sha256(cert_pem.encode() + b"\0" + key_pem.encode()).digest()
        with self._lock:
            facts = self._entries.get(digest)
            if facts is not None:
                self._entries.move_to_end(digest)
                return facts
        try:
            facts = _facts(cert_pem, certs, key_pem)
        except _Bad as exc:
            facts = _Facts(error=(str(exc), exc.reason))
        with self._lock:
            self._entries[digest] = facts
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return facts

    def __len__(self) -> int:
        return len(self._entries)


_FACTS = _FactsCache()


def load(key: str, secret: dict | None, now: float) -> Loaded:
    """Check Secret ``key`` ("ns/name") for serving at unix time ``now``."""

    def bad(reason: str, message: str) -> Loaded:
        return Loaded(issue=Issue(reason, f"TLS Secret {key!r} {message}; using the default certificate"))

    if secret is None:
        return bad("SecretNotFound", "not found")
    if secret.get("type") != "kubernetes.io/tls":
        return bad("InvalidSecret", f"has type {secret.get('type')!r}, not 'kubernetes.io/tls'")
    data = secret.get("data") or {}
    if not isinstance(data, dict):
        return bad("InvalidSecret", "has data that is not a map")
    try:
        cert_text = _decoded_pem(data, "tls.crt", MAX_CHAIN_BYTES)
        key_text = _decoded_pem(data, "tls.key", MAX_KEY_BYTES)
        certs = [pem for kind, pem in _blocks(cert_text, "CERTIFICATE") if kind == "CERTIFICATE"]
        if not certs:
            raise _Bad("tls.crt holds no PEM certificate")
        if len(certs) > MAX_CHAIN_CERTIFICATES:
            raise _Bad(f"has a chain of {len(certs)} certificates (at most {MAX_CHAIN_CERTIFICATES})",
                       "SecretTooLarge")
        keys = _blocks(key_text, "PRIVATE KEY")
        if not keys:
            raise _Bad("tls.key holds no PEM private key")
        kind, key_pem = keys[0]
        if kind == "ENCRYPTED PRIVATE KEY":
            raise _Bad("has an encrypted private key")
        facts = _FACTS.get(cert_text, certs, key_pem)
        if facts.error is not None:
            raise _Bad(*facts.error)
    except _Bad as exc:
        message = str(exc)
        if exc.reason == "InvalidSecret" and not message.startswith("has "):
            message = f"is not a valid certificate and key ({message})"
        return bad(exc.reason, message)
    if now < facts.not_before:
        return bad("CertificateNotYetValid", "holds a certificate that is not valid yet")
    if now > facts.not_after:
        return bad("CertificateExpired", "holds an expired certificate")
    chain = "".join(c.strip() + "\n" for c in certs)
    return Loaded(cert_pem=chain, key_pem=key_pem.strip() + "\n", names=facts.names, not_after=facts.not_after)


T = TypeVar("T")


def within_budget(items: Iterable[tuple[str, T]], size_of, budget: int = STORE_BUDGET
                  ) -> tuple[list[tuple[str, T]], list[tuple[str, T]]]:
    """(kept, refused): ``items`` (key, certificate) whose sizes fit ``budget``.

    When they do not all fit, the largest are refused first (ties by key), so
    one tenant's oversized chains cannot push everybody's ordinary ones out;
    the result keeps the input order. Pure.
    """
    items = list(items)
    total = sum(size_of(c) for _, c in items)
    refused: set[str] = set()
    for key, cert in sorted(items, key=lambda kc: (-size_of(kc[1]), kc[0])):
        if total <= budget:
            break
        refused.add(key)
        total -= size_of(cert)
    return [kc for kc in items if kc[0] not in refused], [kc for kc in items if kc[0] in refused]


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
