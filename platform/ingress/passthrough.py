"""SSL passthrough: ``ssl-passthrough`` behind ``--enable-ssl-passthrough``.

With the flag on, nginx's stream module owns the public TLS port
(templates/nginx.conf.j2, ``stream``): it reads the SNI name of each
ClientHello (``ssl_preread``) without terminating TLS and

* sends the connections of passthrough hosts, untouched, to their
  Service's ClusterIP and port (as ingress-nginx's passthrough proxy does:
  the Service balances), through an internal hop that strips the PROXY
  protocol header (the backend gets the client's TLS bytes and nothing else);
* sends every other connection to the http server, which now listens on a
  unix socket with PROXY protocol, so ``$remote_addr`` is still the client's
  address (realip from ``proxy_protocol``, trusted on that socket only).

The host -> backend table is a generated ``map`` (no Lua in the stream
module here): nginx reloads when the set of passthrough hosts or their
ClusterIP/port changes, never for endpoint changes (documented in
docs/architecture.md). With the flag off, an Ingress asking for it is
served as ingress-nginx serves it then: TLS terminated here, with a warning.

As in ingress-nginx, passthrough works on the host: the backend of the
host's ``/`` Prefix path of the oldest Ingress asking for it; the Ingress's
other annotations cannot apply to TLS it never sees. Plain HTTP for the
host is served by the router as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from platformd.ingress import validate as v

__all__ = ["Passthrough", "map_entries", "select"]


@dataclass(frozen=True, order=True, slots=True)
class Passthrough:
    """TLS connections for ``hostname`` (SNI) go to ``address:port`` as they are."""

    hostname: str
    address: str
    port: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "hostname", v.hostname("passthrough.hostname", self.hostname))
        object.__setattr__(self, "address", v.ip_address("passthrough.address", self.address))
        v.port("passthrough.port", self.port)


def map_key(hostname: str) -> str:
    """The map key of ``hostname``: the name itself, or for ``*.example.com``
    a regex of exactly one label (as TLS wildcards and our router match;
    a map's own ``*.`` would match any depth)."""
    if hostname.startswith("*."):
        return "~*^[^.]+" + re.escape(hostname[1:]).replace("\\-", "-") + "$"
    return hostname


def map_entries(entries: Iterable[Passthrough]) -> tuple[tuple[str, str], ...]:
    """``(map key, "address:port")`` pairs, sorted (byte-identical nginx.conf)."""
    out = []
    for entry in sorted(entries):
        address = f"[{entry.address}]" if ":" in entry.address else entry.address
        out.append((map_key(entry.hostname), f"{address}:{entry.port}"))
    return tuple(out)


def _service_port(service: Mapping[str, Any], port: int | str) -> int | None:
    for item in (service.get("spec") or {}).get("ports") or ():
        if item.get("port") == port or (isinstance(port, str) and item.get("name") == port):
            return item.get("port")
    return None


@dataclass(frozen=True)
class Selection:
    entries: tuple[Passthrough, ...]
    problems: list[tuple[Any, str, str]]


def select(parsed: Iterable[Any], services: Mapping[str, Any], enabled: bool) -> Selection:
    """Passthrough hosts of the translator's parsed Ingresses (oldest first).

    Each Ingress with ``ssl-passthrough`` gives its hosts whose rule has a
    ``/`` Prefix path (or ImplementationSpecific ``/``) with a Service backend
    that has a ClusterIP; anything else is reported and not passed through."""
    entries: dict[str, Passthrough] = {}
    problems: list[tuple[Any, str, str]] = []
    for item in parsed:
        if not item.ing.ann.ssl_passthrough:
            continue
        if not enabled:
            problems.append((item.ing, "SslPassthroughDisabled",
                             "annotation nginx.ingress.kubernetes.io/ssl-passthrough is ignored: SSL passthrough is not "
                             "enabled (--enable-ssl-passthrough); TLS is terminated here"))
            continue
        for host in item.hosts:
            if host in entries:
                continue
            root = next((r for r in item.routes if r.host == host and r.path.rstrip("/") == ""), None)
            if root is None:
                problems.append((item.ing, "SslPassthroughNoRoot",
                                 f"ssl-passthrough: host {host!r} has no '/' path; not passed through"))
                continue
            service = services.get(root.service.key)
            cluster_ip = ((service or {}).get("spec") or {}).get("clusterIP")
            port = _service_port(service or {}, root.service.port)
            if not cluster_ip or cluster_ip == "None" or port is None:
                problems.append((item.ing, "SslPassthroughNoService",
                                 f"ssl-passthrough: host {host!r} needs Service {root.service.key!r} with a ClusterIP "
                                 "and the port; not passed through"))
                continue
            try:
                entries[host] = Passthrough(host, cluster_ip, port)
            except v.ValidationError as exc:
                problems.append((item.ing, "SslPassthroughNoService", f"ssl-passthrough: host {host!r}: {exc}"))
    return Selection(tuple(sorted(entries.values())), problems)
