"""The Gateway route table, lowered onto the model the Lua router serves today.

The reload-free router (issue #10, ``routes.py`` + ``lua/router.lua``) serves
``Configuration.servers``: per host name, Exact / Prefix / Regex paths, each
to one backend or a fixed redirect, with CORS, a rewrite target and an
upstream Host. ``lower`` turns each ``HostRoutes`` of a ``GatewayTable`` into
such a ``Server`` when that says the same thing, and otherwise leaves the
host out and says why (``Skipped``): serving part of a host's rules, or
serving them with other semantics, would answer requests the route does not
mean to answer. What needs the router to grow (the gaps, in
docs/gateway-api.md): header / query / method matches, weighted or invalid
backend shares and 500 answers. Header modifiers and mirrors become the
same header program and mirror as the Ingress annotations (gateway_filters).

Hosts of binds on a pool address (``--gateway-address-pool``) or on a mapped
listener port (``--gateway-listener-port``) go to tables of their own
(``Lowered.bound`` -> ``Configuration.bound``, lua/bound.lua), one per local
address and port; the rest share the Ingress table. A listener without
hostname ("*") is a table's ``any_host``; on the shared ports it joins the
catch-all (``Lowered.any_host``). RequestRedirect becomes a
``RequestRedirect`` the router completes per request (lua/redirect.lua);
timeouts become the route's connect/send/read timeouts.

A host served only on an HTTPS listener gets ``ssl_redirect`` (plain HTTP
requests are redirected to HTTPS rather than served); its Server's
certificate is the first usable Secret of the listener that serves it.
Wildcard hosts keep their name: in the shared table the router matches
``*.example.com`` for one label, where Gateway API matches one or more (the
bound tables match one or more).

``merge`` puts the lowered Servers beside the Ingress ones: on a host both
have, the locations are united and, for the very same match and path, the
route's location replaces the Ingress's; otherwise the router's path order
decides (it is the order the Gateway precedence already follows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from platformd.common import gcpause
from platformd.ingress import certificates, endpoints
from platformd.ingress import gateway_hostnames as hostnames
from platformd.ingress import validate as v
from platformd.ingress.gateway_filters import Unsupported as _FilterUnsupported
from platformd.ingress.gateway_filters import gateway_filters
from platformd.ingress.gateway_model import Bind, GatewayTable, HostRoutes, RouteAction, RouteEntry, TlsBinding
from platformd.ingress.gateway_rules import GRPC_CONTENT_TYPE
from platformd.ingress.model import (
    Backend, BackendProtocol, BoundHosts, Certificate, Cors, Location, PathMatch, ProxySettings, RequestRedirect,
    Server, Timeouts, prefix_base, service_backend_name,
)

__all__ = ["Lowered", "Skipped", "backend_name", "lower", "merge", "merge_locations"]

_MATCH = {"Exact": PathMatch.EXACT, "PathPrefix": PathMatch.PREFIX, "RegularExpression": PathMatch.REGEX}
_WELL_KNOWN = {"http": 80, "https": 443}


class _Unsupported(Exception):
    """This host cannot be lowered; the message says why (one sentence)."""


@dataclass(frozen=True, slots=True)
class Skipped:
    hostname: str
    binds: tuple[Bind, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Lowered:
    servers: tuple[Server, ...] = ()
    backends: tuple[Backend, ...] = ()
    certificates: tuple[Certificate, ...] = ()  # ids "ns/name", as the Ingress translation's
    skipped: tuple[Skipped, ...] = ()
    bound: tuple[BoundHosts, ...] = ()  # Gateways on their own address or a mapped port
    any_host: tuple[Location, ...] = ()  # listeners without hostname on the shared ports: the catch-all's
    # The certificate of an HTTPS listener without hostname (the first one): for SNI names no
    # certificate lists, unless the Ingresses name a default certificate (one for all addresses).
    any_certificate: str | None = None


def backend_name(service: str, port: int) -> str:
    """The Backend name of Service ``service`` ("ns/name") port ``port`` for
    Gateway routes: the Ingress name (``model.service_backend_name``) plus
    ".route". A Backend of the routes' own, because an Ingress's canary,
    affinity or load-balancing annotations on the same Service port must not
    steer HTTPRoute traffic; four labels never equal an Ingress name's three."""
    namespace, _, name = service.partition("/")
    return f"{service_backend_name(namespace, name, port)}.route"


def _redirect(action: RouteAction) -> RequestRedirect:
    r = action.redirect  # scheme and port already the listener's (gateway_rules)
    port = r.port if r.port is not None and r.port != _WELL_KNOWN.get(r.scheme) else None
    return RequestRedirect(code=r.status, scheme=r.scheme, hostname=r.hostname, port=port,
                           path_kind=r.path_kind, path=r.path, prefix=r.prefix)


def _timeouts(action: RouteAction) -> Timeouts:
    """``timeouts.backendRequest`` (else ``request``) as the route's connect,
    send and read timeouts: whole seconds (rounded up), per attempt, and the
    read timeout bounds the wait between two reads, not the whole answer (the
    approximation docs/gateway-api.md states). nginx answers 504 when one runs out."""
    limit = action.backend_timeout or action.request_timeout
    if limit is None:
        return Timeouts()
    seconds = min(max(1, math.ceil(limit)), 86400)
    return Timeouts(connect=seconds, send=seconds, read=seconds)


def _rewrite_target(entry: RouteEntry) -> str | None:
    rewrite = entry.action.rewrite
    if rewrite is None or rewrite.path_kind is None:
        return None
    kind = entry.match.path.kind
    if rewrite.path_kind == "ReplaceFullPath" and kind == "Exact":
        return rewrite.path
    if rewrite.path_kind == "ReplacePrefixMatch" and kind == "PathPrefix" and rewrite.path \
            and rewrite.path != "/" and not rewrite.path.endswith("/"):
        return rewrite.path  # the router replaces "^<prefix>" with it: /api/x -> /v2/x
    raise _Unsupported(f"URLRewrite {rewrite.path_kind} {rewrite.path!r} on a {kind} match needs the router")


def _cors(action: RouteAction) -> Cors | None:
    c = action.cors
    if c is None:
        return None
    return Cors(allow_origins=c.allow_origins or ("*",), allow_methods=c.allow_methods or ("GET",),
                allow_headers=c.allow_headers, expose_headers=c.expose_headers,
                allow_credentials=c.allow_credentials, max_age=c.max_age)


def _location(entry: RouteEntry, ssl_redirect: bool) -> tuple[Location, tuple[str, int] | None]:
    match, action = entry.match, entry.action
    headers, method = match.headers, match.method
    if action.grpc:  # the lane proxies gRPC: its implicit content-type and POST need no match
        headers = tuple(h for h in headers if h != GRPC_CONTENT_TYPE)
        method = None if method == "POST" else method
    if headers or match.query or method:
        raise _Unsupported("header, query parameter and method matches need the router")
    if action.status is not None:
        raise _Unsupported(f"rule {entry.rule} of {entry.route} answers {action.status}, which needs the router")
    program, mirror = gateway_filters(action, backend_name)
    redirect, backend, target = None, None, None
    if action.redirect is not None:
        redirect = _redirect(action)
    else:
        if len(action.backends) != 1 or action.backends[0].service is None:
            raise _Unsupported("weighted or invalid backendRefs need the router")
        one = action.backends[0]
        target = (one.service, one.port)
        backend = backend_name(*target)
    proxy = ProxySettings(protocol=BackendProtocol.GRPC if action.grpc else BackendProtocol.HTTP,
                          upstream_vhost=(action.rewrite.hostname or "") if action.rewrite else "",
                          timeouts=_timeouts(action))
    location = Location(path=match.path.value, match=_MATCH[match.path.kind], backend=backend, proxy=proxy,
                        cors=_cors(action), rewrite_target=_rewrite_target(entry),
                        ssl_redirect=ssl_redirect, request_redirect=redirect, headers=program, mirror=mirror)
    return location, target


def _certificate(binds: Iterable[Bind], hostname: str, tls: Iterable[TlsBinding]) -> str | None:
    for binding in tls:
        if binding.bind in binds and binding.secrets and (
                binding.hostname == hostnames.ANY or binding.hostname == hostname
                or hostnames.matches(binding.hostname, hostname.lstrip("*."))):
            return binding.secrets[0]
    return None


def _locations(entries: tuple[RouteEntry, ...], ssl_redirect: bool) -> tuple[list[Location], set[tuple[str, int]]]:
    locations, seen, targets = [], set(), set()
    for entry in entries:
        location, target = _location(entry, ssl_redirect=ssl_redirect)
        key = (location.match, prefix_base(location.path) if location.match is PathMatch.PREFIX else location.path)
        if key in seen:
            continue  # shadowed by an entry of higher precedence: never matched
        seen.add(key)
        locations.append(location)
        if target is not None:
            targets.add(target)
        targets.update((m.service, m.port) for m in entry.action.mirrors)  # Backends the copies go to
    return locations, targets


def _host_locations(hosts: list[HostRoutes], shared: bool) -> tuple[list[Location], set[tuple[str, int]]]:
    """The locations of one host name: on the shared ports (``shared``: any
    address, --http-port and/or --https-port, beside the Ingresses; a host
    only HTTPS listeners have redirects plain HTTP to HTTPS there) or in one
    bound table (one bind; plain HTTP never reaches it)."""
    https_only = shared and all(h.bind.protocol == "HTTPS" for h in hosts)
    return _locations(hosts[0].entries, ssl_redirect=https_only)


def _server(hostname: str, hosts: list[HostRoutes], table: GatewayTable,
            shared: bool) -> tuple[Server, set[tuple[str, int]]]:
    binds = tuple(h.bind for h in hosts)
    locations, targets = _host_locations(hosts, shared)
    tls = any(b.protocol == "HTTPS" for b in binds)
    certificate = _certificate(binds, hostname, table.certificates) if tls else None
    return Server(hostname=hostname, locations=tuple(locations), tls=tls, tls_certificate=certificate), targets


def lower(table: GatewayTable, *, http_port: int, https_port: int, services: Mapping[str, dict],
          slices: Callable[[str], tuple[dict, ...]], secrets: Mapping[str, dict], now: float) -> Lowered:
    """Lower ``table`` (see the module docstring). ``http_port``/``https_port``:
    the data plane's local ports; ``slices(service key)``: its EndpointSlices;
    ``now``: wall-clock seconds (certificate validity)."""
    with gcpause.paused:  # see gcpause: at 10,000 hosts CPU 0.40 -> 0.35 s (median of 5, process time)
        return _lower(table, http_port, https_port, services, slices, secrets, now)


def _lower(table: GatewayTable, http_port: int, https_port: int, services: Mapping[str, dict],
           slices: Callable[[str], tuple[dict, ...]], secrets: Mapping[str, dict], now: float) -> Lowered:
    shared: dict[str, list[HostRoutes]] = {}
    bound: dict[tuple[str | None, int], dict[str, list[HostRoutes]]] = {}
    for host in table.hosts:
        bind = host.bind
        if bind.address is None and bind.port in (http_port, https_port):
            shared.setdefault(host.hostname, []).append(host)
        else:  # a pool address or a mapped port: a table of its own (lua/bound.lua)
            bound.setdefault((bind.address, bind.port), {}).setdefault(host.hostname, []).append(host)
    for name, hosts in list(shared.items()):
        if len({h.entries for h in hosts}) > 1:
            # Other routes on the HTTP listener than on the HTTPS one (say, a redirect to
            # https): one table per port, where the name's host is the listener's own.
            del shared[name]
            for host in hosts:
                bound.setdefault((None, host.bind.port), {}).setdefault(name, []).append(host)
    skipped, targets, any_certificates = [], set(), []

    def lowered(by_name: dict[str, list[HostRoutes]], is_shared: bool) -> tuple[list[Server], tuple[Location, ...]]:
        servers, any_host = [], ()
        for name in sorted(by_name, key=lambda n: (hostnames.specificity(n), n)):
            hosts = by_name[name]
            try:
                if name == hostnames.ANY:  # the listener without hostname: served for names no host has
                    locations, used = _host_locations(hosts, is_shared)
                    any_host = tuple(locations)
                    binds = tuple(h.bind for h in hosts if h.bind.protocol == "HTTPS")
                    if binds:  # SNI names nobody lists get this listener's certificate
                        any_certificates.append(_certificate(binds, hostnames.ANY, table.certificates))
                else:
                    server, used = _server(name, hosts, table, is_shared)
                    servers.append(server)
            except (_Unsupported, _FilterUnsupported, v.ValidationError) as exc:
                skipped.append(Skipped(name, tuple(h.bind for h in hosts), str(exc)))
                continue
            targets.update(used)
        return servers, any_host

    servers, any_host = lowered(shared, True)
    tables, all_servers = [], list(servers)
    for (address, port), by_name in sorted(bound.items(), key=lambda item: (item[0][0] or "", item[0][1])):
        its_servers, its_any = lowered(by_name, False)
        tables.append(BoundHosts(address, port, tuple(its_servers), its_any))
        all_servers += its_servers
    backends = tuple(Backend(backend_name(service, port),
                             endpoints.resolve(service, services.get(service), slices(service), port).endpoints)
                     for service, port in sorted(targets))
    any_certificate = next((c for c in any_certificates if c is not None), None)
    names_by_cert: dict[str, set[str]] = {any_certificate: set()} if any_certificate is not None else {}
    for server in all_servers:
        if server.tls_certificate is not None:
            names_by_cert.setdefault(server.tls_certificate, set()).add(server.hostname)
    certs = []
    for key, names in sorted(names_by_cert.items()):
        loaded = certificates.load(key, secrets.get(key), now)
        if loaded.ok:  # the translation checked it; a Secret changed since is left out
            certs.append(Certificate(key, loaded.cert_pem, loaded.key_pem, hostnames=tuple(sorted(names))))
    if not any(c.id == any_certificate for c in certs):
        any_certificate = None
    return Lowered(tuple(servers), backends, tuple(certs), tuple(skipped), tuple(tables), any_host, any_certificate)


def merge(ingress: Iterable[Server], gateway: Iterable[Server]) -> tuple[Server, ...]:
    """Ingress Servers and lowered Gateway Servers as one tuple, by host name
    (see the module docstring for who wins on a host both have)."""
    merged = {s.hostname: s for s in ingress}
    for server in gateway:
        current = merged.get(server.hostname)
        if current is None:
            merged[server.hostname] = server
            continue
        merged[server.hostname] = replace(
            current, locations=merge_locations(current.locations, server.locations), tls=current.tls or server.tls,
            tls_certificate=current.tls_certificate or server.tls_certificate)
    return tuple(merged[name] for name in sorted(merged))


def merge_locations(ingress: tuple[Location, ...], gateway: tuple[Location, ...]) -> tuple[Location, ...]:
    """One host's Ingress and Gateway locations: for the very same match and
    path the route's replaces the Ingress's; the router's order decides the rest."""
    def key(loc: Location) -> tuple:
        return (loc.match, prefix_base(loc.path) if loc.match is PathMatch.PREFIX else loc.path)
    mine = {key(loc) for loc in gateway}
    return tuple(loc for loc in ingress if key(loc) not in mine) + gateway
