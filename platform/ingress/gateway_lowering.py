"""The Gateway route table, lowered onto the model the Lua router serves today.

The reload-free router (issue #10, ``routes.py`` + ``lua/router.lua``) serves
``Configuration.servers``: per host name, Exact / Prefix / Regex paths, each
to one backend or a fixed redirect, with CORS, a rewrite target and an
upstream Host. ``lower`` turns each ``HostRoutes`` of a ``GatewayTable`` into
such a ``Server`` when that says the same thing, and otherwise leaves the
host out and says why (``Skipped``): serving part of a host's rules, or
serving them with other semantics, would answer requests the route does not
mean to answer. Header / query / method matches become a location's
``conditions`` (several locations per path, in precedence order) and weighted
backends, invalid-backend shares and 500 answers its ``split``
(``gateway_matches``, ``route_choice``). Header modifiers and mirrors become the same header program
and mirror as the Ingress annotations (gateway_filters).

Hosts of binds on a pool address (``--gateway-address-pool``) or on a mapped
listener port (``--gateway-listener-port``) go to tables of their own
(``Lowered.bound`` -> ``Configuration.bound``, lua/bound.lua), one per local
address and port; the rest share the Ingress table. A listener without
hostname ("*") is a table's ``any_host``; on the shared ports it joins the
catch-all (``Lowered.any_host``). Both kinds of table are compiled by the
router's own host code, so conditions and splits work alike in them.
RequestRedirect becomes a ``RequestRedirect`` the router completes per
request (lua/redirect.lua); timeouts become the location's ``deadline``
(milliseconds per attempt and for the whole request, deadline.py).

A host name only HTTPS listeners have goes to the table of the HTTPS port
(any address): plain HTTP never reaches its routes, so such a request is
answered as if the name were not there (an HTTP listener matching it, an
Ingress, the catch-all, or 404), as the spec says, never redirected. A
Server's certificate is the first usable Secret of the listener that serves it.
Wildcard hosts keep their name: in the shared table the router matches
``*.example.com`` for one label (an Ingress's), so the shared wildcard
Servers are also handed over as ``Lowered.wildcards``, looked up for more
labels on a miss (gateway_wildcards); the bound tables match one or more.

``merge`` puts the lowered Servers beside the Ingress ones: on a host both
have, the locations are united and, for the very same match and path, the
route's locations (all its candidates) replace the Ingress's, except that a
path the route only names with conditions (headers, query, method) keeps the
Ingress's location as its last candidate; otherwise the router's path order
decides (it is the order the Gateway precedence already follows). The same
rule (``merge_locations``) joins the any-host locations to the catch-all's and
the Ingress paths of a name to its host in a bound table.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from platformd.common import gcpause
from platformd.ingress import certificates, deadline, endpoints
from platformd.ingress import gateway_hostnames as hostnames
from platformd.ingress import gateway_matches, gateway_wildcards
from platformd.ingress import validate as v
from platformd.ingress.gateway_filters import gateway_filters
from platformd.ingress.gateway_model import Bind, GatewayTable, HostRoutes, RouteAction, RouteEntry, TlsBinding
from platformd.ingress.model import (
    Backend, BackendProtocol, BoundHosts, Certificate, Cors, Location, PathMatch, ProxySettings, RequestRedirect,
    Server, prefix_base, service_backend_name,
)

__all__ = ["Lowered", "LoweringCache", "Skipped", "backend_name", "lower", "merge", "merge_locations", "merge_server",
           "relower"]

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
    # The wildcard Servers of ``servers`` again, matched for more labels on a miss (gateway_wildcards).
    wildcards: tuple[Server, ...] = ()


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


def _rewrite_target(entry: RouteEntry) -> tuple[str | None, bool]:
    """URLRewrite's path as the router's rewrite: (target, rewrite_rest).
    ReplaceFullPath replaces the whole path whatever the match (the pattern
    is the location's path, which the request matched). ReplacePrefixMatch
    (PathPrefix only) replaces the matched prefix, as the spec's table says:
    prefix /foo with /xyz or /xyz/: /foo -> /xyz, /foo/ -> /xyz/,
    /foo/bar -> /xyz/bar; with "" or "/": /foo -> /, /foo/bar -> /bar. The
    pattern "^/foo(/(.*))?$" gives the rest as $1 ("/bar") and $2 ("bar")."""
    rewrite = entry.action.rewrite
    if rewrite is None or rewrite.path_kind is None:
        return None, False
    kind, value = entry.match.path.kind, rewrite.path or ""
    if "$" in value:  # the router would read "$1" as a capture group
        raise _Unsupported(f"URLRewrite {rewrite.path_kind} {value!r}: '$' in the path is not served")
    if rewrite.path_kind == "ReplaceFullPath":
        return value or "/", False
    if rewrite.path_kind == "ReplacePrefixMatch" and kind == "PathPrefix":
        base = value.rstrip("/")
        return (base + "$1" if base else "/$2"), True
    raise _Unsupported(f"URLRewrite {rewrite.path_kind} on a {kind} match: the spec allows it on PathPrefix only")


def _cors(action: RouteAction) -> Cors | None:
    c = action.cors
    if c is None:
        return None
    return Cors(allow_origins=c.allow_origins or ("*",), allow_methods=c.allow_methods or ("GET",),
                allow_headers=c.allow_headers, expose_headers=c.expose_headers,
                allow_credentials=c.allow_credentials, max_age=c.max_age)


def _location(entry: RouteEntry) -> tuple[Location, tuple[tuple[str, int], ...]]:
    match, action = entry.match, entry.action
    headers, method = match.headers, match.method
    # gRPC entries keep their implicit content-type and POST conditions, so a
    # plain HTTP request on the same host and path goes on to the HTTP entries.
    conditions = gateway_matches.conditions(headers, match.query, method)
    program, mirror = gateway_filters(action, backend_name)
    redirect, backend, split, targets = None, None, (), ()
    if action.status is not None:
        split = gateway_matches.ANSWER_500
    elif action.redirect is not None:
        redirect = _redirect(action)
    else:
        backend, split, targets = gateway_matches.backends(action.backends, backend_name)
    proxy = ProxySettings(protocol=BackendProtocol.GRPC if action.grpc else BackendProtocol.HTTP,
                          upstream_vhost=(action.rewrite.hostname or "") if action.rewrite else "")
    path = match.path.value
    if match.path.kind == "PathPrefix":  # "/foo/" is "/foo": one key, so its candidates keep their order
        path = prefix_base(path)
    rewrite_target, rewrite_rest = _rewrite_target(entry)
    location = Location(path=path, match=_MATCH[match.path.kind], backend=backend, proxy=proxy,
                        cors=_cors(action), rewrite_target=rewrite_target, rewrite_rest=rewrite_rest,
                        request_redirect=redirect, conditions=conditions, split=split,
                        headers=program, mirror=mirror,
                        deadline=deadline.from_seconds(action.request_timeout, action.backend_timeout))
    return location, targets


def _certificate(binds: Iterable[Bind], hostname: str, tls: Iterable[TlsBinding]) -> str | None:
    for binding in tls:
        if binding.bind in binds and binding.secrets and (
                binding.hostname == hostnames.ANY or binding.hostname == hostname
                or hostnames.matches(binding.hostname, hostname.lstrip("*."))):
            return binding.secrets[0]
    return None


def _locations(entries: tuple[RouteEntry, ...]) -> tuple[list[Location], set[tuple[str, int]]]:
    locations, seen, targets = [], set(), set()
    for entry in entries:
        location, used = _location(entry)
        key = (location.match, prefix_base(location.path) if location.match is PathMatch.PREFIX else location.path)
        if key in seen or (key, location.conditions) in seen:
            continue  # shadowed by an entry of higher precedence: never matched
        seen.add(key if location.conditions is None else (key, location.conditions))
        locations.append(location)
        targets.update(used)
        targets.update((m.service, m.port) for m in entry.action.mirrors)  # Backends the copies go to
    return locations, targets


def _host_locations(hosts: list[HostRoutes], shared: bool) -> tuple[list[Location], set[tuple[str, int]]]:
    """The locations of one host name: on the shared ports (``shared``: any
    address, --http-port and/or --https-port, beside the Ingresses; never a
    name only HTTPS listeners have, see ``_lower``) or in one bound table."""
    return _locations(hosts[0].entries)


def _server(hostname: str, hosts: list[HostRoutes], table: GatewayTable,
            shared: bool) -> tuple[Server, set[tuple[str, int]]]:
    binds = tuple(h.bind for h in hosts)
    locations, targets = _host_locations(hosts, shared)
    tls = any(b.protocol == "HTTPS" for b in binds)
    certificate = _certificate(binds, hostname, table.certificates) if tls else None
    return Server(hostname=hostname, locations=tuple(locations), tls=tls, tls_certificate=certificate), targets


class LoweringCache:
    """The Servers and Backends of the last lowering by their inputs, so that
    a host whose routes did not change is lowered to the very same ``Server``
    object and an unchanged Service port to the very same ``Backend``: the
    data plane (routes.RouteTable, render's backend encoding, both keyed by
    object identity) then re-encodes and pushes only what changed (at 10,000
    HTTPRoutes a new route took p50 585 ms from apply to first request with
    every Server and Backend new). Owned by the one caller that lowers
    (GatewayController, from its sync thread only); holds one lowering's
    objects, replaced whole by the next. A lowering with it equals one
    without (tests/ingress/test_gateway_matches.py)."""

    def __init__(self) -> None:
        self._by_ident: dict[tuple, tuple[Server, set[tuple[str, int]]]] = {}
        self._endpoints: dict[tuple[str, int], tuple] = {}  # (Service, port) -> (Service, slices, endpoints)
        self._next_endpoints: dict[tuple[str, int], tuple] = {}
        self._by_name: dict[tuple, list[tuple[tuple, tuple[Server, set[tuple[str, int]]]]]] = {}
        self._backends: dict[tuple, Backend] = {}
        self._next_backends: dict[tuple, Backend] = {}
        self._kept: _Kept | None = None  # the last lowering, for ``relower``

    def uses(self, service: str) -> bool:
        """Whether the last lowering made a Backend of Service ``service`` ("ns/name")."""
        kept = self._kept
        return kept is not None and service in kept.ports_of

    def get(self, key: tuple) -> tuple[Server, set[tuple[str, int]]] | None:
        # By identity first (the ids are of hosts the kept keys hold alive, so
        # an id found belongs to that very host: the translation hands over the
        # very same HostRoutes for an unchanged host, gateway_translate.RouteCache),
        # then by value among the keys of that name: never a hash of the hosts,
        # which walks every entry (at 10,000 hosts ~0.1 s per lowering).
        found = self._by_ident.get(_ident(key))
        if found is not None:
            return found
        for kept, value in self._by_name.get((key[0], key[2], key[3]), ()):
            if kept == key:
                return value
        return None

    def backend(self, name: str, endpoints: tuple) -> Backend:
        """The Backend ``name`` with ``endpoints``: last lowering's object when the same."""
        key = (name, endpoints)
        found = self._backends.get(key) or Backend(name, endpoints)
        self._next_backends[key] = found
        return found

    def endpoints(self, key: str, service: dict | None, found: tuple[dict, ...], port: int) -> tuple:
        """``_endpoints``, the last lowering's result when the Service object
        and its EndpointSlices are equal to what it was computed from."""
        last = self._endpoints.get((key, port))
        if last is not None and (last[0] is service or last[0] == service) and last[1] == found:
            result = last[2]
        else:
            result = _endpoints(key, service, found, port)
        self._next_endpoints[(key, port)] = (service, found, result)
        return result

    def replace(self, made: list[tuple[tuple, tuple[Server, set[tuple[str, int]]]]]) -> None:
        """End of a lowering: keep what it made (``made``: (key, Server and
        targets)) and the backends asked for."""
        self._backends, self._next_backends = self._next_backends, {}
        self._endpoints, self._next_endpoints = self._next_endpoints, {}
        self._by_ident, self._by_name = {}, {}
        for key, value in made:
            self._by_ident[_ident(key)] = value
            self._by_name.setdefault((key[0], key[2], key[3]), []).append((key, value))

    def current_backend(self, service: str, port: int, services: Mapping[str, dict],
                        slices: Callable[[str], tuple[dict, ...]], replaced: Backend | None) -> Backend:
        """The Backend of ``service`` port ``port`` now (``relower``), kept as
        the current lowering's, where the next full lowering finds it;
        ``replaced``: the Backend it takes the place of (forgotten)."""
        key = (service, port)
        obj, found = services.get(service), slices(service)
        last = self._endpoints.get(key)
        if last is not None and (last[0] is obj or last[0] == obj) and last[1] == found:
            result = last[2]
        else:
            result = _endpoints(service, obj, found, port)
        self._endpoints[key] = (obj, found, result)
        name = backend_name(service, port)
        if replaced is not None and replaced.endpoints != result:
            self._backends.pop((replaced.name, replaced.endpoints), None)
        made = self._backends.get((name, result)) or Backend(name, result)
        self._backends[(name, result)] = made
        return made

    def remember(self, key: tuple, value: tuple[Server, set[tuple[str, int]]]) -> None:
        """A Server ``relower`` made, for the next lowering to find."""
        self._by_ident[_ident(key)] = value
        self._by_name.setdefault((key[0], key[2], key[3]), []).append((key, value))

    def forget(self, key: tuple) -> None:
        """The Server made for ``key`` is no longer the lowering's (``relower``)."""
        self._by_ident.pop(_ident(key), None)
        name = (key[0], key[2], key[3])
        kept = [(k, v) for k, v in self._by_name.get(name, ()) if k is not key]
        if kept:
            self._by_name[name] = kept
        else:
            self._by_name.pop(name, None)


@dataclass
class _Kept:
    """What a lowering with a cache leaves for ``relower``: its result, the
    hosts of every name, the outcome of each name on the shared ports
    (Server or Skipped, and the Service ports it used), how many names use
    each Service port and the Backends' order."""

    lowered: Lowered
    ports: tuple[int, int]  # (http_port, https_port)
    names: dict[str, list[HostRoutes]]
    shared: dict[str, tuple[Server | None, Skipped | None, set[tuple[str, int]], tuple]]  # and the cache key
    shared_skipped: dict[str, Skipped]
    bound_skipped: tuple[Skipped, ...]
    targets: dict[tuple[str, int], int]  # (Service, port) -> names using it
    ports_of: dict[str, set[int]]  # Service -> its ports in ``targets``
    backend_keys: list[tuple[str, int]]  # (Service, port) of ``lowered.backends``, in order
    any_candidate: str | None  # the any-host certificate before it was loaded


def _endpoints(key: str, service: dict | None, found: tuple[dict, ...], port: int) -> tuple:
    return endpoints.resolve(key, service, found, port).endpoints


def _ident(key: tuple) -> tuple:
    """A lowering key (name, hosts, certificate, shared) with its hosts by id."""
    return key[0], tuple(map(id, key[1])), key[2], key[3]


def lower(table: GatewayTable, *, http_port: int, https_port: int, services: Mapping[str, dict],
          slices: Callable[[str], tuple[dict, ...]], secrets: Mapping[str, dict], now: float,
          cache: LoweringCache | None = None) -> Lowered:
    """Lower ``table`` (see the module docstring). ``http_port``/``https_port``:
    the data plane's local ports; ``slices(service key)``: its EndpointSlices;
    ``now``: wall-clock seconds (certificate validity); ``cache``: reuse the
    Servers of unchanged hosts and Backends of unchanged Service ports (see
    ``LoweringCache``)."""
    with gcpause.paused:  # see gcpause: at 10,000 hosts CPU 0.40 -> 0.35 s (median of 5, process time)
        return _lower(table, http_port, https_port, services, slices, secrets, now, cache)


def _is_shared(bind: Bind, http_port: int, https_port: int) -> bool:
    return bind.address is None and bind.port in (http_port, https_port)


def _per_port(hosts: list[HostRoutes]) -> bool:
    """Whether a name's hosts on the shared ports go to a table per port
    instead (``relower`` asks too): other routes on the HTTP listener than on
    the HTTPS one (say, a redirect to https), where the name's host is the
    listener's own; a name only HTTPS listeners have: the HTTPS port's table
    (plain HTTP must not reach them). A name without hosts (its routes are
    gone) has no table: False (``all`` of nothing made every route deletion
    a full lowering, 120-300 ms at 10,000 hosts)."""
    return len(hosts) > 1 and len({h.entries for h in hosts}) > 1 or bool(hosts) and all(
        h.bind.protocol == "HTTPS" for h in hosts)


def _lower(table: GatewayTable, http_port: int, https_port: int, services: Mapping[str, dict],
           slices: Callable[[str], tuple[dict, ...]], secrets: Mapping[str, dict], now: float,
           cache: LoweringCache | None) -> Lowered:
    shared: dict[str, list[HostRoutes]] = {}
    bound: dict[tuple[str | None, int], dict[str, list[HostRoutes]]] = {}
    names: dict[str, list[HostRoutes]] = {}
    for host in table.hosts:
        bind = host.bind
        names.setdefault(host.hostname, []).append(host)
        if _is_shared(bind, http_port, https_port):
            shared.setdefault(host.hostname, []).append(host)
        else:  # a pool address or a mapped port: a table of its own (lua/bound.lua)
            bound.setdefault((bind.address, bind.port), {}).setdefault(host.hostname, []).append(host)
    for name, hosts in list(shared.items()):
        if _per_port(hosts):
            del shared[name]
            for host in hosts:
                bound.setdefault((None, host.bind.port), {}).setdefault(name, []).append(host)
    skipped, targets, any_certificates = [], {}, []
    made: list[tuple[tuple, tuple[Server, set[tuple[str, int]]]]] = []  # this lowering's Servers, for the cache
    outcome: dict[str, tuple[Server | None, Skipped | None, set[tuple[str, int]], tuple]] = {}  # shared names'

    def lowered(by_name: dict[str, list[HostRoutes]], is_shared: bool) -> tuple[list[Server], tuple[Location, ...]]:
        servers, any_host = [], ()
        for name in sorted(by_name, key=lambda n: (hostnames.specificity(n), n)):
            hosts = by_name[name]
            if name == hostnames.ANY:  # the listener without hostname: served for names no host has
                try:
                    locations, used = _host_locations(hosts, is_shared)
                except _UNSUPPORTED as exc:
                    skipped.append(Skipped(name, tuple(h.bind for h in hosts), str(exc)))
                    continue
                any_host = tuple(locations)
                binds = tuple(h.bind for h in hosts if h.bind.protocol == "HTTPS")
                if binds:  # SNI names nobody lists get this listener's certificate
                    any_certificates.append(_certificate(binds, hostnames.ANY, table.certificates))
            else:
                server, problem, used, key = _named(name, hosts, table, is_shared, cache)
                if is_shared:
                    outcome[name] = (server, problem, used, key)
                if problem is not None:
                    skipped.append(problem)
                    continue
                made.append((key, (server, used)))
                servers.append(server)
            for target in used:
                targets[target] = targets.get(target, 0) + 1
        return servers, any_host

    servers, any_host = lowered(shared, True)
    shared_skipped = {s.hostname: s for s in skipped}
    tables, all_servers = [], list(servers)
    for (address, port), by_name in sorted(bound.items(), key=lambda item: (item[0][0] or "", item[0][1])):
        its_servers, its_any = lowered(by_name, False)
        tables.append(BoundHosts(address, port, tuple(its_servers), its_any))
        all_servers += its_servers
    make = cache.backend if cache is not None else Backend
    resolve = cache.endpoints if cache is not None else _endpoints
    backend_keys = sorted(targets)
    backends = tuple(make(backend_name(service, port), resolve(service, services.get(service), slices(service), port))
                     for service, port in backend_keys)
    if cache is not None:
        cache.replace(made)
    any_candidate = next((c for c in any_certificates if c is not None), None)
    certs, any_certificate = _certificates_of(all_servers, any_candidate, secrets, now)
    result = Lowered(tuple(servers), backends, certs, tuple(skipped), tuple(tables), any_host, any_certificate,
                     gateway_wildcards.of(servers))
    if cache is not None:
        ports_of: dict[str, set[int]] = {}
        for service, port in backend_keys:
            ports_of.setdefault(service, set()).add(port)
        cache._kept = _Kept(result, (http_port, https_port), names, outcome, shared_skipped,
                            tuple(skipped[len(shared_skipped):]), targets, ports_of, backend_keys, any_candidate)
    return result


_UNSUPPORTED = (_Unsupported, v.ValidationError)


def _named(name: str, hosts: list[HostRoutes], table: GatewayTable, is_shared: bool, cache: LoweringCache | None):
    """(Server or None, Skipped or None, Service ports used, cache key) of one host name."""
    # What _server reads: the host's routes (binds included), its certificate, the table kind.
    key = (name, tuple(hosts), _certificate(tuple(h.bind for h in hosts), name, table.certificates), is_shared)
    try:
        hit = cache.get(key) if cache is not None else None
        server, used = hit if hit is not None else _server(name, hosts, table, is_shared)
    except _UNSUPPORTED as exc:
        return None, Skipped(name, tuple(h.bind for h in hosts), str(exc)), set(), key
    return server, None, used, key


def _certificates_of(servers: Iterable[Server], any_certificate: str | None, secrets: Mapping[str, dict],
                     now: float) -> tuple[tuple[Certificate, ...], str | None]:
    """The Certificates the Servers (and the any-host listener) use, each with
    its host names; and the any-host certificate if it loaded."""
    names_by_cert: dict[str, set[str]] = {any_certificate: set()} if any_certificate is not None else {}
    for server in servers:
        if server.tls_certificate is not None:
            names_by_cert.setdefault(server.tls_certificate, set()).add(server.hostname)
    certs = []
    for key, names in sorted(names_by_cert.items()):
        loaded = certificates.load(key, secrets.get(key), now)
        if loaded.ok:  # the translation checked it; a Secret changed since is left out
            certs.append(Certificate(key, loaded.cert_pem, loaded.key_pem, hostnames=tuple(sorted(names))))
    if not any(c.id == any_certificate for c in certs):
        any_certificate = None
    return tuple(certs), any_certificate


def _server_order(server: Server) -> tuple:
    return hostnames.specificity(server.hostname), server.hostname


def _bind_order(host: HostRoutes) -> tuple:
    bind = host.bind
    return bind.address or "", bind.port, bind.protocol, bind.listener_port


def relower(previous: Lowered, table: GatewayTable, changed: Mapping[tuple[Bind, str], HostRoutes | None],
            services_changed: Iterable[str], *, http_port: int, https_port: int, services: Mapping[str, dict],
            slices: Callable[[str], tuple[dict, ...]], secrets: Mapping[str, dict], now: float,
            cache: LoweringCache) -> Lowered | None:
    """``previous`` (the last lowering made with ``cache``) with the hosts in
    ``changed`` ((bind, hostname) -> its routes now in ``table``, None: gone)
    lowered again and the Backends of ``services_changed`` (a Service or its
    EndpointSlices changed) resolved again; equal to ``lower(table, ...)``.

    None (lower in full) unless every host of a changed name, before and now,
    is on the shared ports with the same routes on each: a name that is or
    was in a bound table, or the listener without hostname, changes tables
    whose order and sharing are decided across names. Secrets are read as
    they were (a changed Secret is a full lowering)."""
    kept = cache._kept
    if kept is None or kept.lowered is not previous or kept.ports != (http_port, https_port):
        return None
    new_names: dict[str, list[HostRoutes]] = {}
    for (bind, hostname), host in changed.items():
        hosts = [h for h in new_names.get(hostname, kept.names.get(hostname, ())) if h.bind != bind]
        if host is not None:
            hosts.append(host)
            hosts.sort(key=_bind_order)
        new_names[hostname] = hosts
    for name, hosts in new_names.items():
        old = kept.names.get(name, ())
        if name == hostnames.ANY or (old and name not in kept.shared):
            return None
        if not all(_is_shared(h.bind, http_port, https_port) for h in (*old, *hosts)) or _per_port(hosts):
            return None  # (an old name in per-port tables is not in kept.shared: above)
    cache._kept = None  # until it is whole again: an exception midway leaves nothing to relower from
    with gcpause.paused:
        out = _relower(kept, previous, table, new_names, services_changed, services, slices, secrets, now, cache)
    cache._kept = kept
    return out


def _relower(kept: _Kept, previous: Lowered, table: GatewayTable, new_names: dict[str, list[HostRoutes]],
             services_changed: Iterable[str], services: Mapping[str, dict],
             slices: Callable[[str], tuple[dict, ...]], secrets: Mapping[str, dict], now: float,
             cache: LoweringCache) -> Lowered:
    servers = list(previous.servers)
    counts = kept.targets
    moved: set[tuple[str, int]] = set()  # Service ports whose use started or ended
    tls = False

    def count(used: set[tuple[str, int]], step: int) -> None:
        for target in used:
            n = counts.get(target, 0) + step
            if n:
                counts[target] = n
            else:
                del counts[target]
            if n == 0 or (n == 1 and step == 1):
                moved.add(target)

    for name, hosts in new_names.items():
        old = kept.shared.pop(name, None)
        if old is not None:
            server, problem, used, old_key = old
            cache.forget(old_key)
            if server is not None:
                at = bisect.bisect_left(servers, _server_order(server), key=_server_order)
                del servers[at]
                tls = tls or server.tls_certificate is not None
            kept.shared_skipped.pop(name, None)
            count(used, -1)
        if not hosts:
            kept.names.pop(name, None)
            continue
        kept.names[name] = hosts
        server, problem, used, key = _named(name, hosts, table, True, cache)
        kept.shared[name] = (server, problem, used, key)
        if problem is not None:
            kept.shared_skipped[name] = problem
            continue
        cache.remember(key, (server, used))
        bisect.insort(servers, server, key=_server_order)
        tls = tls or server.tls_certificate is not None
        count(used, 1)
    backends, keys = list(previous.backends), kept.backend_keys
    for service, port in moved:
        at = bisect.bisect_left(keys, (service, port))
        present = at < len(keys) and keys[at] == (service, port)
        if present and (service, port) not in counts:
            del keys[at], backends[at]
            ports = kept.ports_of[service]
            ports.discard(port)
            if not ports:
                del kept.ports_of[service]
        elif not present and (service, port) in counts:
            keys.insert(at, (service, port))
            backends.insert(at, cache.current_backend(service, port, services, slices, None))
            kept.ports_of.setdefault(service, set()).add(port)
    for service in services_changed:
        for port in kept.ports_of.get(service, ()):
            at = bisect.bisect_left(keys, (service, port))
            backends[at] = cache.current_backend(service, port, services, slices, backends[at])
    certs, any_certificate = previous.certificates, previous.any_certificate
    if tls:  # a host that has or had a certificate: the certificates' host lists change
        all_servers = [*servers, *(s for t in previous.bound for s in t.servers)]
        certs, any_certificate = _certificates_of(all_servers, kept.any_candidate, secrets, now)
    skipped = (*sorted(kept.shared_skipped.values(), key=lambda s: (hostnames.specificity(s.hostname), s.hostname)),
               *kept.bound_skipped)
    result = Lowered(tuple(servers), tuple(backends), certs, skipped, previous.bound, previous.any_host,
                     any_certificate, gateway_wildcards.of(servers))
    kept.lowered = result
    return result


def merge(ingress: Iterable[Server], gateway: Iterable[Server]) -> tuple[Server, ...]:
    """Ingress Servers and lowered Gateway Servers as one tuple, by host name
    (see the module docstring for who wins on a host both have)."""
    merged = {s.hostname: s for s in ingress}
    for server in gateway:
        merged[server.hostname] = merge_server(merged.get(server.hostname), server)
    return tuple(merged[name] for name in sorted(merged))


def merge_server(ingress: Server | None, gateway: Server) -> Server:
    """One host's Server: the Ingress's (None: there is none) joined with the Gateway's (see ``merge``)."""
    if ingress is None:
        return gateway
    return replace(ingress, locations=merge_locations(ingress.locations, gateway.locations),
                   tls=ingress.tls or gateway.tls, tls_certificate=ingress.tls_certificate or gateway.tls_certificate)


def merge_locations(ingress: tuple[Location, ...], gateway: tuple[Location, ...]) -> tuple[Location, ...]:
    """One host's Ingress and Gateway locations: for the very same match and
    path the route's locations (all its candidates) replace the Ingress's,
    except that a path whose route entries all have conditions keeps the
    Ingress's location as its last candidate (for the requests none of them
    takes) when it is written alike, so the model's stable order keeps it
    after them; the router's order decides the rest."""
    def key(loc: Location) -> tuple:
        return (loc.match, prefix_base(loc.path) if loc.match is PathMatch.PREFIX else loc.path)
    mine = {key(loc) for loc in gateway}
    open_paths = {(key(loc), loc.path) for loc in gateway} - {
        (key(loc), loc.path) for loc in gateway if loc.conditions is None}
    kept = tuple(loc for loc in ingress if key(loc) not in mine or (key(loc), loc.path) in open_paths)
    return gateway + kept
