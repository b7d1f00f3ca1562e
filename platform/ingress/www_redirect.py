"""``from-to-www-redirect``: a redirect server for the other name of a host.

As ingress-nginx does it: an Ingress for ``example.com`` with the annotation
also answers ``www.example.com`` with a redirect to ``example.com`` (and an
Ingress for ``www.example.com`` answers ``example.com``), keeping the scheme,
path and query, with the ConfigMap's ``http-redirect-code`` (308 by
default). A name some Ingress serves itself (as a host or an alias) is left
to it: the annotation is then ignored for that name.

The redirect travels as the Server's ``redirect`` whose target is an origin
(``https://www.example.com``, no path); ``routes`` sends it with ``host``, and
the router builds ``<request scheme>://<host><request URI>`` per request.
"""

from __future__ import annotations

import re
from typing import Iterable

from platformd.ingress.model import Certificate, Redirect, Server

__all__ = ["origin_host", "other_name", "redirect_servers"]

_ORIGIN = re.compile(r"https?://([a-z0-9.-]+)")


def other_name(host: str) -> str | None:
    """``www.<host>`` for ``<host>`` and the reverse; None for wildcards."""
    if host.startswith("*."):
        return None
    if host.startswith("www."):
        rest = host[4:]
        return rest if "." in rest else None
    return "www." + host


def origin_host(target: str) -> str | None:
    """The host of a redirect target that is an origin only (no path), else None."""
    m = _ORIGIN.fullmatch(target)
    return m.group(1) if m else None


def _covers(certificate: Certificate, name: str) -> bool:
    wildcard = "*." + name.partition(".")[2]
    return name in certificate.hostnames or wildcard in certificate.hostnames


def redirect_servers(servers: Iterable[Server], wanted: Iterable[str], certificates: Iterable[Certificate],
                     code: int) -> list[Server]:
    """The redirect servers for the hosts in ``wanted`` (sorted, one per free name)."""
    servers = list(servers)
    by_host = {s.hostname: s for s in servers}
    taken = {name for s in servers for name in s.names}
    certs = {c.id: c for c in certificates}
    out = []
    for host in sorted(set(wanted)):
        server, other = by_host.get(host), other_name(host)
        if server is None or other is None or other in taken:
            continue
        taken.add(other)
        cert = certs.get(server.tls_certificate or "")
        scheme = "https" if server.tls else "http"
        out.append(Server(other, redirect=Redirect(f"{scheme}://{host}", code), tls=server.tls,
                          tls_certificate=cert.id if cert is not None and _covers(cert, other) else None))
    return out
