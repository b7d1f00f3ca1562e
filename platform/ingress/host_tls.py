"""Per-host TLS settings: ingress-nginx's ``ssl-ciphers`` and
``ssl-prefer-server-ciphers``.

nginx has one TLS context here (one server for every host), so these are
applied per connection at ClientHello, for the SNI name, by lua/host_tls.lua:
``SSL_set_cipher_list`` and ``SSL_OP_CIPHER_SERVER_PREFERENCE`` on the
connection's ``SSL*`` (through lua-nginx-module's
``ngx_http_lua_ffi_get_req_ssl_pointer``), before OpenSSL picks a cipher.
As nginx's ``ssl_ciphers``, the list governs TLSv1.2 and older (TLSv1.3
suites are OpenSSL's own). A host with settings of its own also gets its own
session id context (lua/certificate.lua), so a session negotiated under
another host's ciphers is not resumed for it.

The cipher list must be one OpenSSL accepts (Python's ``ssl`` asks the same
library family): a list that selects nothing would make the host unreachable.
The oldest Ingress of a host that sets either annotation decides for the host.
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass, field
from typing import Any, Iterable

from platformd.ingress import validate as v
from platformd.ingress.host_claims import HostClaims, sni_table

__all__ = ["HostTls", "cipher_list", "handshake_data", "select"]


def cipher_list(field_name: str, value: object) -> str:
    """An OpenSSL cipher list that selects at least one cipher."""
    text = v.ssl_ciphers(field_name, value)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(text)
    except ssl.SSLError:
        raise v.ValidationError(field_name, value, "selects no cipher OpenSSL knows") from None
    return text


@dataclass(frozen=True, slots=True)
class HostTls:
    ciphers: str = ""  # "" = the global ssl-ciphers
    prefer_server_ciphers: bool | None = None  # None = the global (on)
    key: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.ciphers:
            cipher_list("ssl-ciphers", self.ciphers)
        digest = hashlib.sha256(f"{self.ciphers}\n{self.prefer_server_ciphers}".encode()).hexdigest()[:12]
        object.__setattr__(self, "key", digest)

    @property
    def empty(self) -> bool:
        return not self.ciphers and self.prefer_server_ciphers is None


@dataclass(frozen=True)
class Selection:
    hosts: dict[str, HostTls]
    problems: list[tuple[Any, str, str]]


def select(parsed: Iterable[Any]) -> Selection:
    """Per host, the settings of the oldest Ingress setting any (``parsed``:
    the translator's parsed Ingresses, oldest first); later different ones
    are reported."""
    claims: HostClaims[HostTls] = HostClaims()
    problems = []
    for item in parsed:
        settings = item.ing.ann.host_tls
        if settings is None:
            continue
        for host, owner in claims.claim(item.ing, item.hosts, settings):
            problems.append((item.ing, "HostTlsConflict",
                             f"host {host!r} already has the ssl-ciphers settings of Ingress {owner.key}; "
                             "this Ingress's are ignored for it"))
    return Selection(claims.hosts, problems)


def handshake_data(servers: Iterable[Any]) -> dict[str, Any]:
    """The "routes" section's ``host_tls``: ``{"names": {name: key},
    "settings": {key: {"ciphers", "prefer": "on"|"off"|""}}}``; empty when no host has any."""
    return sni_table(servers, lambda server: server.host_tls, "settings", lambda host: host.key, _settings_entry)


def _settings_entry(host: HostTls) -> dict[str, Any]:
    prefer = "" if host.prefer_server_ciphers is None else ("on" if host.prefer_server_ciphers else "off")
    return {"ciphers": host.ciphers, "prefer": prefer}
