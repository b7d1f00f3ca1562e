"""Client certificates: ingress-nginx's ``auth-tls-*`` annotations.

What an Ingress asks (``AuthTls``, from its annotations) becomes, per host,
a ``ClientTls`` carrying the CA bundle read from the Secret it names. The
data plane enforces it in two places (docs/architecture.md, "Client
certificates"):

* at the TLS handshake (lua/client_tls.lua, ``ssl_certificate_by_lua``):
  for an SNI name whose host asks for client certificates, the handshake
  requests one and verifies it against that host's CA and depth
  (``ngx.ssl.verify_client``); the session id context is the policy's
  ``id``, so a session made for one CA is never resumed for another;
* per request (the router's first step for such a host): ``$ssl_client_verify``
  against the host's mode, 421 when the connection was verified for another
  policy than the request's host (HTTP/2 connection reuse), ``match-cn``,
  and the ``ssl-client-*`` headers to the upstream.

Fail closed: an Ingress whose ``auth-tls-*`` cannot be enforced (a missing
Secret, no usable ``ca.crt``, a Secret of another namespace, a rule without
a host) is not served at all (``select``), with a problem naming the
annotation. Modes, defaults and headers are ingress-nginx's: ``on`` (the
default), ``off``, ``optional``, ``optional_no_ca``; depth 1.

``auth-tls-match-cn`` was CVE-2025-1097 in ingress-nginx (pasted into an
``if`` of nginx.conf). Here it never reaches any configuration text: it is
data for Lua's ``ngx.re.find`` and must compile with that engine
(``pcre.LUA``), from a small character set without quotes, spaces, ``$``
variables, braces or ``;``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from platformd.ingress import pcre
from platformd.ingress import validate as v
from platformd.ingress.host_claims import HostClaims, sni_table

__all__ = ["AuthTls", "ClientTls", "Unusable", "VERIFY_MODES", "handshake_data", "load_ca", "match_cn",
           "resolve", "route_entry", "secret_ref", "select"]

VERIFY_MODES = ("on", "off", "optional", "optional_no_ca")
DEFAULT_DEPTH = 1
# A CA bundle goes to every worker and into every full handshake's store:
# far above a real bundle (a few CAs), far below what would bloat the section.
MAX_CA_BYTES = 256 * 1024
MAX_CA_CERTIFICATES = 100

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_SECRET_NAME = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_SECRET_REF = re.compile(rf"^(?:({_DNS_LABEL})/)?({_SECRET_NAME})$")
# What a subject-DN regex needs (CN=name, alternatives, groups, anchors,
# classes, quantifiers) and nothing that could end a token or expand a
# variable: no quotes, spaces, ';', '$', braces or backslashes.
_MATCH_CN = re.compile(r"^[A-Za-z0-9=.*|()\[\]^?+,:@_-]{1,512}$")


def secret_ref(field_name: str, value: object) -> str:
    """``namespace/name`` or ``name`` of a Secret."""
    text = v._require_str(field_name, value).strip()
    if len(text) > 253 + 64 or not _SECRET_REF.fullmatch(text):
        raise v.ValidationError(field_name, value, "must be <namespace>/<secret name> or <secret name>")
    return text


def match_cn(field_name: str, value: object) -> str:
    """A regex over the client certificate's subject DN, compiled by Lua's engine."""
    text = v._require_str(field_name, value)
    # '$' only as the end anchor (never a variable: this is not nginx text anyway).
    if not _MATCH_CN.fullmatch(text[:-1] if text.endswith("$") else text):
        raise v.ValidationError(
            field_name, value,
            "must be 1-512 characters of A-Z a-z 0-9 = . * | ( ) [ ] ^ ? + , : @ _ - and an ending '$' "
            "(no spaces, quotes, ';', braces or variables)")
    if not text.startswith("CN=") and not text.startswith("^CN="):
        raise v.ValidationError(field_name, value, "must start with CN=")
    try:
        error = pcre.compile_error(pcre.LUA, text)
    except pcre.EngineMissing as exc:
        raise v.ValidationError(field_name, value, f"cannot be checked here ({exc})") from None
    if error is not None:
        raise v.ValidationError(field_name, value, f"is not a valid regular expression: {error}")
    return text


@dataclass(frozen=True, slots=True)
class AuthTls:
    """What one Ingress's ``auth-tls-*`` annotations ask for."""

    secret: str  # "namespace/name" or "name" (the Ingress's namespace)
    verify: str = "on"
    depth: int = DEFAULT_DEPTH
    error_page: str = ""
    pass_certificate: bool = False
    match_cn: str = ""

    def __post_init__(self) -> None:
        secret_ref("auth-tls-secret", self.secret)
        if self.verify not in VERIFY_MODES:
            raise v.ValidationError("auth-tls-verify-client", self.verify, f"must be one of {', '.join(VERIFY_MODES)}")
        v.positive_int("auth-tls-verify-depth", self.depth, maximum=100)
        if self.error_page:
            v.redirect_target("auth-tls-error-page", self.error_page)
        if self.match_cn:
            match_cn("auth-tls-match-cn", self.match_cn)

    @property
    def asks(self) -> bool:
        """Whether it asks for anything (``off`` requests no certificate)."""
        return self.verify != "off"


@dataclass(frozen=True, slots=True)
class ClientTls:
    """The client-certificate policy of one host, its CA read and checked.

    ``id`` names what the handshake verifies (CA bundle and depth): two hosts
    with the same ``id`` accept the same certificates, so a connection
    verified for one may serve the other; any other request on it is 421.
    """

    ca_pem: str = field(repr=False)
    verify: str = "on"
    depth: int = DEFAULT_DEPTH
    error_page: str = ""
    pass_certificate: bool = False
    match_cn: str = ""
    source: str = ""  # the Secret, "namespace/name"
    id: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES or self.verify == "off":
            raise v.ValidationError("client_tls.verify", self.verify, "must be on, optional or optional_no_ca")
        v.positive_int("client_tls.depth", self.depth, maximum=100)
        if self.error_page:
            v.redirect_target("client_tls.error_page", self.error_page)
        if self.match_cn:
            match_cn("client_tls.match_cn", self.match_cn)
        digest = hashlib.sha256(f"{self.depth}\n{self.ca_pem}".encode()).hexdigest()[:16]
        object.__setattr__(self, "id", digest)


class Unusable(Exception):
    """The annotation cannot be enforced; ``str()`` says why (for a problem)."""


_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----")


def load_ca(secret: Mapping[str, Any] | None, key: str) -> str:
    """The PEM bundle of ``ca.crt`` of Secret ``key`` (re-encoded, one
    certificate after the other), or ``Unusable``. Every block must parse
    as an X.509 certificate: Lua refuses nothing later, so we refuse here."""
    if secret is None:
        raise Unusable(f"Secret {key!r} not found")
    raw = (secret.get("data") or {}).get("ca.crt")
    if not raw or not isinstance(raw, str):
        raise Unusable(f"Secret {key!r} has no 'ca.crt'")
    if len(raw) > MAX_CA_BYTES * 4 // 3 + 4096:
        raise Unusable(f"'ca.crt' of Secret {key!r} is larger than {MAX_CA_BYTES // 1024} KiB")
    try:
        text = base64.b64decode(raw, validate=True).decode("ascii")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise Unusable(f"'ca.crt' of Secret {key!r} is not base64 PEM text") from None
    blocks = _PEM_CERT.findall(text)
    if not blocks:
        raise Unusable(f"'ca.crt' of Secret {key!r} holds no PEM certificate")
    if len(blocks) > MAX_CA_CERTIFICATES:
        raise Unusable(f"'ca.crt' of Secret {key!r} holds {len(blocks)} certificates (at most {MAX_CA_CERTIFICATES})")
    from cryptography import x509  # the parser OpenSSL's own callers use
    from cryptography.hazmat.primitives.serialization import Encoding

    out = []
    for block in blocks:
        try:
            cert = x509.load_pem_x509_certificate(block.encode())
        except ValueError as exc:
            raise Unusable(f"'ca.crt' of Secret {key!r} has a certificate that does not parse: {exc}") from None
        out.append(cert.public_bytes(Encoding.PEM).decode("ascii"))
    return "".join(out)


def resolve(auth: AuthTls, namespace: str, secrets: Mapping[str, Any]) -> ClientTls:
    """The host policy of ``auth`` for an Ingress of ``namespace``, or ``Unusable``.

    A Secret of another namespace is refused: one tenant's Ingress must not
    make the controller read (and depend on) another tenant's Secret."""
    ref_namespace, _, name = auth.secret.rpartition("/")
    if ref_namespace and ref_namespace != namespace:
        raise Unusable(f"Secret {auth.secret!r} is in another namespace than the Ingress ({namespace!r})")
    key = f"{namespace}/{name}"
    return ClientTls(load_ca(secrets.get(key), key), verify=auth.verify, depth=auth.depth,
                     error_page=auth.error_page, pass_certificate=auth.pass_certificate, match_cn=auth.match_cn,
                     source=key)


@dataclass(frozen=True)
class Selection:
    """``select``'s result: the Ingresses that may be served, each host's
    policy, and one (ingress, reason, message) per refused or ignored ask."""

    kept: list
    hosts: dict[str, ClientTls]
    problems: list[tuple[Any, str, str]]


def select(parsed: Iterable[Any], secrets: Mapping[str, Any]) -> Selection:
    """Per host, the policy of the oldest Ingress asking for one.

    ``parsed``: the translator's parsed Ingresses, oldest first (``.ing``
    with ``.ann.client_tls``, ``.namespace``; ``.hosts``; ``.routes`` with
    ``.host``). An Ingress whose ask cannot be enforced is left out of
    ``kept`` (fail closed). A host asked for by two Ingresses keeps the
    oldest one's policy; the other is reported (its paths are still checked
    with the host's policy: one TLS handshake per host)."""
    kept, problems = [], []
    claims: HostClaims[ClientTls] = HostClaims()
    for item in parsed:
        auth = item.ing.ann.client_tls
        if auth is None or not auth.asks:
            kept.append(item)
            continue
        try:
            if not item.hosts or any(route.host == "" for route in item.routes):
                raise Unusable("needs a host on every rule: requests for no host name cannot be checked")
            policy = resolve(auth, item.ing.namespace, secrets)
        except Unusable as exc:
            problems.append((item.ing, "InvalidAnnotation",
                             f"annotation nginx.ingress.kubernetes.io/auth-tls-secret: {exc}; the Ingress is not served"))
            continue
        kept.append(item)
        for host, owner in claims.claim(item.ing, item.hosts, policy):
            problems.append((item.ing, "ClientTlsConflict",
                             f"host {host!r} already has the client-certificate settings of Ingress "
                             f"{owner.key}; this Ingress's auth-tls-* are ignored for it"))
    return Selection(kept, claims.hosts, problems)


def route_entry(policy: ClientTls) -> dict[str, Any]:
    """What the router needs per request (the host entry's ``client_tls``)."""
    return {"id": policy.id, "verify": policy.verify, "error_page": policy.error_page,
            "pass_certificate": policy.pass_certificate, "match_cn": policy.match_cn}


def handshake_data(servers: Iterable[Any]) -> dict[str, Any]:
    """What the handshake needs (the "routes" section's ``client_tls``):
    ``{"names": {server name: id}, "cas": {id: {"pem", "depth"}}}``; empty
    when no host asks for client certificates."""
    return sni_table(servers, lambda server: server.client_tls, "cas",
                     lambda policy: policy.id, lambda policy: {"pem": policy.ca_pem, "depth": policy.depth})
