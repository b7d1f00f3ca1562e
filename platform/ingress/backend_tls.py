"""Backend TLS: ingress-nginx's ``proxy-ssl-*`` annotations.

An Ingress asks (``BackendTlsAsk``, from its annotations; copied into each of
its Locations as ``Location.backend_tls``); the translator checks the
Secret it names before building routes (``select``: an Ingress whose ask
cannot be enforced is not served) and, once the servers are built, turns
each ask into the Location's lane directives (``apply``): nginx's
``proxy_ssl_*`` (HTTPS) or ``grpc_ssl_*`` (GRPCS) take no variables, so
such a route is proxied by a generated lane (lanes.py), one per distinct
set of (CA bundle, client certificate and key, verify, depth, name, SNI,
protocols, ciphers). nginx reloads only when a set is first used; the CA
and key files are content-addressed under the state directory (0600).

A lane that verifies or presents a certificate gets an upstream of its own
(view.py): nginx keeps idle upstream connections per ``upstream`` block and
reuses one by peer address alone, so a connection another lane opened
without verification (or with another CA or name) must never carry this
lane's requests.

Names, values and defaults are ingress-nginx's: ``proxy-ssl-secret``
(``namespace/name`` with ``ca.crt`` and optionally ``tls.crt``/``tls.key``
for a client certificate), ``proxy-ssl-verify`` (off), ``-verify-depth``
(1), ``-name``, ``-server-name`` (off), ``-protocols``, ``-ciphers``. One
difference, to fail closed: ``proxy-ssl-verify: "on"`` needs the Secret's
``ca.crt`` and ``backend-protocol`` HTTPS or GRPCS (ingress-nginx silently
ignored both mistakes, serving unverified), and without ``proxy-ssl-name``
the name verified is the Service's DNS name ``<service>.<namespace>.svc``
(ingress-nginx verified ``upstream_balancer``, a name no certificate has).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from platformd.ingress import client_tls
from platformd.ingress import validate as v

__all__ = ["BackendTlsAsk", "apply", "directive_pairs", "protocols", "select"]

_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")


def protocols(field_name: str, value: object) -> str:
    """A space-separated list of TLS versions (SSLv2/SSLv3 refused)."""
    text = v._require_str(field_name, value)
    items = text.split()
    if not items or any(item not in _PROTOCOLS for item in items):
        raise v.ValidationError(field_name, value, f"must list TLS versions among {', '.join(_PROTOCOLS)}")
    return " ".join(sorted(set(items), key=_PROTOCOLS.index))


def secret_ref(field_name: str, value: object) -> str:
    text = client_tls.secret_ref(field_name, value)
    if "/" not in text:
        raise v.ValidationError(field_name, value, "must be <namespace>/<secret name>")
    return text


@dataclass(frozen=True, slots=True)
class BackendTlsAsk:
    """What one Ingress's ``proxy-ssl-*`` annotations ask for (no Secret content)."""

    secret: str = ""  # "namespace/name"; "" = none
    verify: bool = False
    depth: int = 1
    name: str = ""  # proxy_ssl_name; "" = the Service's DNS name when verifying
    server_name: bool = False  # send SNI
    protocols: str = ""
    ciphers: str = ""

    def __post_init__(self) -> None:
        if self.secret:
            secret_ref("proxy-ssl-secret", self.secret)
        v.positive_int("proxy-ssl-verify-depth", self.depth, maximum=100)
        if self.name:
            v.hostname("proxy-ssl-name", self.name, wildcard=False)
        if self.protocols:
            protocols("proxy-ssl-protocols", self.protocols)
        if self.ciphers:
            v.ssl_ciphers("proxy-ssl-ciphers", self.ciphers)
        if self.verify and not self.secret:
            raise v.ValidationError("proxy-ssl-verify", "on",
                                    "needs nginx.ingress.kubernetes.io/proxy-ssl-secret (its ca.crt is what verifies)")


@dataclass(frozen=True)
class _Material:
    ca_pem: str = ""
    cert_pem: str = ""
    key_pem: str = ""


class Unusable(Exception):
    pass


def _material(ask: BackendTlsAsk, namespace: str, secrets: Mapping[str, Any], now: float) -> _Material:
    if not ask.secret:
        return _Material()
    ref_namespace, _, name = ask.secret.partition("/")
    if ref_namespace != namespace:
        raise Unusable(f"Secret {ask.secret!r} is in another namespace than the Ingress ({namespace!r})")
    key = f"{namespace}/{name}"
    secret = secrets.get(key)
    data = (secret or {}).get("data") or {}
    from platformd.ingress import certificates as certs_mod  # it imports the model, which imports us

    ca = ""
    if ask.verify or "ca.crt" in data:
        ca = client_tls.load_ca(secret, key)
    cert = pem_key = ""
    if "tls.crt" in data or "tls.key" in data:
        loaded = certs_mod.load(key, {**secret, "type": "kubernetes.io/tls"}, now)
        if not loaded.ok:
            raise Unusable(f"Secret {key!r}: client certificate {loaded.issue.reason}: "
                           + loaded.issue.message.split("; ")[0])
        cert, pem_key = loaded.cert_pem, loaded.key_pem
    if not ca and not cert:
        raise Unusable(f"Secret {key!r} has neither 'ca.crt' nor 'tls.crt'/'tls.key'")
    return _Material(ca, cert, pem_key)


@dataclass(frozen=True)
class Selection:
    kept: list
    material: dict[tuple[str, str], _Material]  # (namespace, secret ref) -> content
    problems: list[tuple[Any, str, str]]


def select(parsed: Iterable[Any], secrets: Mapping[str, Any], now: float) -> Selection:
    """Ingresses whose ``proxy-ssl-*`` can be enforced (the others are left
    out: fail closed), and the Secret content each needs."""
    kept, material, problems = [], {}, []
    for item in parsed:
        ask = item.ing.ann.backend_tls
        if ask is None:
            kept.append(item)
            continue
        try:
            material[(item.ing.namespace, ask.secret)] = _material(ask, item.ing.namespace, secrets, now)
        except (Unusable, client_tls.Unusable) as exc:
            problems.append((item.ing, "InvalidAnnotation",
                             f"annotation nginx.ingress.kubernetes.io/proxy-ssl-secret: {exc}; the Ingress is not served"))
            continue
        kept.append(item)
    return Selection(kept, material, problems)


def _service_dns_name(backend: str) -> str:
    """"namespace.service.port" (model.service_backend_name) -> "service.namespace.svc"."""
    namespace, service, _ = backend.split(".", 2)
    return f"{service}.{namespace}.svc"


def directive_pairs(ask: BackendTlsAsk, material: _Material, grpc: bool, backend: str | None) -> list[tuple[str, str]]:
    """The lane directives of ``ask`` for a location proxying ``backend``."""
    p = "grpc_ssl_" if grpc else "proxy_ssl_"
    pairs: list[tuple[str, str]] = []
    if material.ca_pem:
        pairs.append((p + "trusted_certificate", material.ca_pem))
    if material.cert_pem:
        pairs += [(p + "certificate", material.cert_pem), (p + "certificate_key", material.key_pem)]
    if ask.verify:
        pairs += [(p + "verify", "on"), (p + "verify_depth", str(ask.depth))]
    name = ask.name or (_service_dns_name(backend) if ask.verify and backend else "")
    if name:
        pairs.append((p + "name", name))
    if ask.server_name:
        pairs.append((p + "server_name", "on"))
    if ask.protocols:
        pairs.append((p + "protocols", ask.protocols))
    if ask.ciphers:
        pairs.append((p + "ciphers", ask.ciphers))
    return pairs


def apply(locations: tuple, material: Mapping[tuple[str, str], _Material], namespace_of) -> tuple:
    """``locations`` with the lane directives of their ``backend_tls`` ask
    (the others unchanged; the same tuple when none asks)."""
    from platformd.ingress.model import BackendProtocol  # model imports nothing of ours at load

    if not any(loc.backend_tls is not None for loc in locations):
        return locations
    out = []
    for loc in locations:
        ask = loc.backend_tls
        protocol = loc.proxy.protocol
        if ask is None or loc.backend is None or protocol not in (BackendProtocol.HTTPS, BackendProtocol.GRPCS):
            out.append(loc)  # proxy_ssl_* mean nothing to a plain-text backend
            continue
        grpc = protocol is BackendProtocol.GRPCS
        pairs = directive_pairs(ask, material[(namespace_of(loc), ask.secret)], grpc, loc.backend)
        out.append(replace(loc, lane_directives=tuple(loc.lane_directives) + tuple(pairs)))
    return tuple(out)


_BACKEND_NAMESPACE = re.compile(r"^([^.]+)\.")


def namespace_of(loc) -> str:
    """The namespace of a location's Service backend ("namespace.service.port")."""
    match = _BACKEND_NAMESPACE.match(loc.backend or "")
    return match.group(1) if match else ""
