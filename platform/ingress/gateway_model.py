"""The Gateway API route model: what the data plane serves for Gateways and routes.

``gateway_translate.build`` produces one ``GatewayTable`` from a store
snapshot; it is frozen and self-contained (no reference back to API objects),
so it can be compared, diffed and handed to the Lua router's adapter whole.

Shape (all tuples sorted, so equal inputs give equal tables):

    GatewayTable.hosts: HostRoutes, one per (bind, hostname)
        bind      = Bind(address, port, protocol, listener_port)
                    address None: every local address (no --gateway-address-pool);
                    port: the data plane's local port; listener_port: the port the
                    Gateway's listener names (what redirects must show)
        hostname  = "foo.example.com", "*.example.com" or "*" (any host)
        entries   = RouteEntry, in match order: the first entry whose match
                    holds answers the request
    GatewayTable.certificates: TlsBinding, per HTTPS (bind, listener hostname)

Lookup contract for the data plane: pick the bind by local address and port
(an exact address before None); in it the exact hostname, else the longest
wildcard suffix ("*.example.com" matches "a.b.example.com", not
"example.com"), else "*"; then walk that host's entries in order. A request
no entry matches gets 404. A host found never falls through to a less
specific one (the spec's hostname precedence).

An action with ``status`` set (500) answers with it: a rule whose backends
are all invalid, all weight 0 or absent, or that uses a filter we cannot
honour. A ``WeightedBackend`` whose ``service`` is None is an invalid
backend's share of the traffic: requests picked for it get 500.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Bind", "Cors", "GatewayTable", "HeaderMatch", "HeaderModifier", "HostRoutes", "Match",
    "Mirror", "PathMatch", "Redirect", "Rewrite", "RouteAction", "RouteEntry", "TlsBinding",
    "WeightedBackend",
]


@dataclass(frozen=True, slots=True, order=True)
class Bind:
    """Where requests arrive: local address (None = any) and port, with the
    listener's protocol ("HTTP"/"HTTPS") and public port."""

    address: str | None
    port: int
    protocol: str
    listener_port: int


@dataclass(frozen=True, slots=True)
class PathMatch:
    kind: str  # "Exact" | "PathPrefix" | "RegularExpression"
    value: str


@dataclass(frozen=True, slots=True)
class HeaderMatch:
    """A header (or query parameter) condition; ``regex``: ``value`` is a
    PCRE pattern matched anywhere unless anchored. Header names are lower case."""

    name: str
    value: str
    regex: bool = False


@dataclass(frozen=True, slots=True)
class Match:
    path: PathMatch
    headers: tuple[HeaderMatch, ...] = ()
    query: tuple[HeaderMatch, ...] = ()  # names are case sensitive
    method: str | None = None


@dataclass(frozen=True, slots=True)
class HeaderModifier:
    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Redirect:
    """A finished redirect: ``scheme`` and ``port`` already resolved against the
    listener (``port`` None: leave it out of ``Location``, it is the scheme's
    well-known one); ``hostname`` None keeps the request's host (without port);
    ``path_kind`` None keeps the path, "ReplaceFullPath" puts ``path``,
    "ReplacePrefixMatch" replaces the matched ``prefix`` with ``path``."""

    status: int
    scheme: str
    hostname: str | None
    port: int | None
    path_kind: str | None = None
    path: str | None = None
    prefix: str | None = None


@dataclass(frozen=True, slots=True)
class Rewrite:
    """URLRewrite: ``hostname`` replaces Host; path as in ``Redirect``."""

    hostname: str | None = None
    path_kind: str | None = None
    path: str | None = None
    prefix: str | None = None


@dataclass(frozen=True, slots=True, order=True)
class WeightedBackend:
    """A Service port (``service`` = "ns/name") with its weight; ``service`` None
    stands for an invalid backendRef's share: answered with 500."""

    service: str | None
    port: int
    weight: int
    app_protocol: str | None = None  # the Service port's appProtocol ("kubernetes.io/h2c", ...)


@dataclass(frozen=True, slots=True)
class Mirror:
    """Copy requests to ``service``:``port`` (responses ignored), a
    ``numerator``/``denominator`` share of them."""

    service: str
    port: int
    numerator: int = 100
    denominator: int = 100


@dataclass(frozen=True, slots=True)
class Cors:
    allow_origins: tuple[str, ...] = ()
    allow_credentials: bool = False
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: int = 5


@dataclass(frozen=True, slots=True)
class RouteAction:
    """What one rule does. Exactly one of ``status``, ``redirect`` and
    ``backends`` decides the answer (in that order)."""

    backends: tuple[WeightedBackend, ...] = ()
    status: int | None = None
    redirect: Redirect | None = None
    rewrite: Rewrite | None = None
    request_headers: HeaderModifier | None = None
    response_headers: HeaderModifier | None = None
    mirrors: tuple[Mirror, ...] = ()
    cors: Cors | None = None
    request_timeout: float | None = None  # seconds; None: no limit
    backend_timeout: float | None = None
    grpc: bool = False  # proxied as gRPC (HTTP/2 to the backend)


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One match of one rule; ``route`` ("HTTPRoute ns/name") and ``rule``
    (its index) say where it came from (for logs and metrics)."""

    match: Match
    action: RouteAction
    route: str
    rule: int


@dataclass(frozen=True, slots=True)
class HostRoutes:
    bind: Bind
    hostname: str
    entries: tuple[RouteEntry, ...]


@dataclass(frozen=True, slots=True)
class TlsBinding:
    """The certificate Secrets ("ns/name", usable ones only) an HTTPS listener
    serves for ``hostname`` ("*": any SNI) on ``bind``."""

    bind: Bind
    hostname: str
    secrets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GatewayTable:
    hosts: tuple[HostRoutes, ...] = ()
    certificates: tuple[TlsBinding, ...] = ()

    def host(self, bind: Bind, hostname: str) -> HostRoutes | None:
        """The routes of exactly ``hostname`` on ``bind`` (no wildcard lookup)."""
        for host in self.hosts:
            if host.bind == bind and host.hostname == hostname:
                return host
        return None
