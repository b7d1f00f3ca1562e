"""The desired state of the ingress data plane, as frozen dataclasses.

A ``Configuration`` is built whole (by the translator from Kubernetes objects,
or by hand in tests) and handed to the data plane, which never mutates it.

Invariants every object keeps from construction on:

* every user-derived string has passed its validator in ``validate`` (an
  invalid value raises ``ValidationError`` naming the field, so a bad object
  cannot exist);
* collections are tuples in a canonical order (sorted in ``__post_init__``),
  so two equal configurations compare equal, hash equal and render
  byte-identical nginx.conf whatever order the caller listed things in.

The classes have ``__slots__`` (no per-object ``__dict__``: 40-50 bytes less
for each of the ~150,000 objects a 10,000-Ingress model has), so nothing can
hang extra attributes on them; caches keep their own tables. A
``Configuration`` can be weakly referenced: caches tie entries to its life.

What is *dynamic* (pushed to Lua without a reload) and what is *shape*
(rendered into nginx.conf) is decided in ``decide``; the model itself does not
care.
"""

from __future__ import annotations

import enum
import itertools
import operator
from dataclasses import dataclass, field
from typing import Iterable

from platformd.ingress import headers as headers_mod
from platformd.ingress import validate as v
from platformd.ingress.deadline import Deadline
from platformd.ingress.mirror import Mirror
from platformd.ingress.backend_tls import BackendTlsAsk
from platformd.ingress.client_tls import ClientTls
from platformd.ingress.host_tls import HostTls
from platformd.ingress.passthrough import Passthrough
from platformd.ingress.traffic import Traffic
from platformd.ingress.route_choice import Conditions, check_split

__all__ = [
    "AccessControl",
    "AffinityMode",
    "Backend",
    "BackendProtocol",
    "Certificate",
    "Configuration",
    "Cors",
    "Endpoint",
    "GlobalSettings",
    "Hsts",
    "Listen",
    "LoadBalance",
    "Location",
    "Logging",
    "PathMatch",
    "ProxySettings",
    "RateLimit",
    "Redirect",
    "Server",
    "SessionAffinity",
    "Timeouts",
    "Tls",
    "TrafficShapingPolicy",
    "Workers",
    "check_path",
    "prefix_base",
    "service_backend_name",
]


def _set(obj: object, name: str, value: object) -> None:
    # Normalising a frozen dataclass in __post_init__ is the one place we
    # bypass frozenness; after construction the object never changes.
    object.__setattr__(obj, name, value)


def _checked(prefix: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except v.ValidationError as exc:
        raise exc.within(prefix) from None


# --- backends ---------------------------------------------------------------


class LoadBalance(str, enum.Enum):
    ROUND_ROBIN = "round_robin"
    EWMA = "ewma"


class AffinityMode(str, enum.Enum):
    BALANCED = "balanced"
    PERSISTENT = "persistent"


@dataclass(frozen=True, order=True, slots=True)
class Endpoint:
    address: str
    port: int

    def __post_init__(self) -> None:
        _set(self, "address", v.ip_address("endpoint.address", self.address))
        v.port("endpoint.port", self.port)


@dataclass(frozen=True, slots=True)
class SessionAffinity:
    """Cookie affinity (the only kind ingress-nginx has)."""

    cookie_name: str = "INGRESSCOOKIE"
    mode: AffinityMode = AffinityMode.BALANCED
    max_age: int | None = None  # seconds; None = session cookie
    path: str = "/"
    samesite: str = ""
    secure: bool = False  # Secure even on plain HTTP (https answers always have it)
    domain: str = ""
    expires: int | None = None  # seconds from now, as an Expires date; None = none
    change_on_failure: bool = False  # a failed sticky endpoint: retry elsewhere and re-pin the cookie
    conditional_samesite_none: bool = False  # omit SameSite=None for clients known to mishandle it
    canary_behavior: str = "sticky"  # "legacy": sessions do not keep requests on a canary's side

    def __post_init__(self) -> None:
        v.cookie_name("session_affinity.cookie_name", self.cookie_name)
        _set(self, "mode", AffinityMode(self.mode))
        if self.max_age is not None:
            v.positive_int("session_affinity.max_age", self.max_age)
        v.cookie_path("session_affinity.path", self.path)
        v.samesite("session_affinity.samesite", self.samesite)
        if self.domain:
            from platformd.ingress.traffic import cookie_domain

            cookie_domain("session_affinity.domain", self.domain)
        if self.expires is not None:
            v.positive_int("session_affinity.expires", self.expires)
        if self.canary_behavior not in ("sticky", "legacy"):
            raise v.ValidationError("session_affinity.canary_behavior", self.canary_behavior,
                                    "must be sticky or legacy")


@dataclass(frozen=True, slots=True)
class TrafficShapingPolicy:
    """How a canary (alternative) backend takes traffic from its primary.

    Precedence, as in ingress-nginx: header (``header_value`` or
    ``header_pattern`` if set, else "always"/"never"), then cookie
    ("always"/"never"), then ``weight`` out of ``weight_total``.
    """

    weight: int = 0
    weight_total: int = 100
    header: str = ""
    header_value: str = ""
    header_pattern: str = ""
    cookie: str = ""

    def __post_init__(self) -> None:
        v.positive_int("traffic_shaping_policy.weight_total", self.weight_total)
        v.positive_int("traffic_shaping_policy.weight", self.weight, maximum=self.weight_total, allow_zero=True)
        if self.header:
            v.header_name("traffic_shaping_policy.header", self.header)
        v.header_value("traffic_shaping_policy.header_value", self.header_value)
        if self.header_pattern:
            v.header_pattern("traffic_shaping_policy.header_pattern", self.header_pattern)
        if self.cookie:
            v.cookie_name("traffic_shaping_policy.cookie", self.cookie)


def service_backend_name(namespace: str, service: str, port: int | str) -> str:
    """The Backend name of a Service port for Ingresses: "namespace.service.port"
    (Gateway routes add ".route": ``gateway_lowering.backend_name``). Namespaces and Service and port names are
    DNS labels, which never contain ".", so no two Service ports share a name
    (with "-" as separator, Service web-api in adv-team and api in adv-team-web
    were both "adv-team-web-api-80": one route served the other namespace's pods)."""
    return f"{namespace}.{service}.{port}"


@dataclass(frozen=True, slots=True)
class Backend:
    """A named set of endpoints and how to balance over them.

    Everything here lives in Lua only; nginx.conf refers to a backend by name.
    """

    name: str
    endpoints: tuple[Endpoint, ...] = ()
    load_balance: LoadBalance = LoadBalance.ROUND_ROBIN
    upstream_hash_by: str = ""  # non-empty selects consistent hashing
    session_affinity: SessionAffinity | None = None  # set selects sticky
    alternative_backends: tuple[str, ...] = ()  # canaries of this backend
    traffic_shaping_policy: TrafficShapingPolicy | None = None  # set on a canary
    upstream_hash_by_subset_size: int = 0  # >0: hash onto subsets of this many endpoints

    def __post_init__(self) -> None:
        name = v.backend_name("backend.name", self.name)
        where = f"backend[{name}]"
        _set(self, "endpoints", _sorted_endpoints(self.endpoints))
        _set(self, "load_balance", _checked(where, _enum, LoadBalance, "load_balance", self.load_balance))
        _checked(where, v.upstream_hash_by, "upstream_hash_by", self.upstream_hash_by)
        _checked(where, v.positive_int, "upstream_hash_by_subset_size", self.upstream_hash_by_subset_size,
                 maximum=1000, allow_zero=True)
        alternatives = tuple(sorted(set(self.alternative_backends)))
        for alt in alternatives:
            _checked(where, v.backend_name, "alternative_backends", alt)
        _set(self, "alternative_backends", alternatives)


def _sorted_endpoints(endpoints: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    """Without duplicates, in ``Endpoint`` order; compared as plain tuples,
    which is the same order without a Python-level ``__lt__``/``__hash__``
    per comparison (sorting 60,000 endpoints was a tenth of a translation)."""
    unique = {(e.address, e.port): e for e in endpoints}
    return tuple(unique[key] for key in sorted(unique))


def _enum(kind: type[enum.Enum], field_name: str, value: object):
    if value.__class__ is kind:  # the common case, without Enum's lookup
        return value
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise v.ValidationError(field_name, value, f"must be one of {allowed}") from None


# --- certificates -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Certificate:
    """A PEM certificate chain with its key and the hostnames it serves.

    ``id`` is the caller's stable reference (e.g. ``namespace/secret``);
    servers point at it with ``Server.tls_certificate``.
    """

    id: str
    cert_pem: str = field(repr=False)
    key_pem: str = field(repr=False)
    hostnames: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        cid = v.certificate_id("certificate.id", self.id)
        v.pem_bundle(f"certificate[{cid}]", self.cert_pem, self.key_pem)
        names = {_checked(f"certificate[{cid}]", v.hostname, "hostnames", h) for h in self.hostnames}
        _set(self, "hostnames", tuple(sorted(names)))


# --- locations --------------------------------------------------------------


class PathMatch(str, enum.Enum):
    """How a location's path matches (Kubernetes pathType plus use-regex)."""

    EXACT = "exact"  # the path and nothing else
    PREFIX = "prefix"  # element-wise prefix: /foo matches /foo and /foo/bar, not /foobar
    REGEX = "regex"  # case-insensitive PCRE anchored at the start, like ingress-nginx


class BackendProtocol(str, enum.Enum):
    HTTP = "HTTP"
    HTTPS = "HTTPS"
    GRPC = "GRPC"
    GRPCS = "GRPCS"
    AUTO_HTTP = "AUTO_HTTP"  # the client's scheme: HTTP requests over HTTP, HTTPS over HTTPS


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Upstream timeouts in seconds; None inherits the global default."""

    connect: int | None = None
    send: int | None = None
    read: int | None = None

    def __post_init__(self) -> None:
        for name in ("connect", "send", "read"):
            value = getattr(self, name)
            if value is not None:
                v.positive_int(f"timeouts.{name}", value, maximum=86400)


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """How a location talks to its backend. None inherits the global default."""

    protocol: BackendProtocol = BackendProtocol.HTTP
    timeouts: Timeouts = Timeouts()
    body_size: str | None = None  # client_max_body_size, e.g. "8m"; "0" = unlimited
    buffering: bool | None = None
    upstream_vhost: str = ""  # Host header sent upstream; "" keeps the client's

    def __post_init__(self) -> None:
        _set(self, "protocol", _enum(BackendProtocol, "proxy.protocol", self.protocol))
        if self.body_size is not None:
            _set(self, "body_size", v.size("proxy.body_size", self.body_size))
        if self.upstream_vhost:
            _set(self, "upstream_vhost", v.upstream_vhost("proxy.upstream_vhost", self.upstream_vhost))


@dataclass(frozen=True, slots=True)
class AccessControl:
    """Source address filtering. ``allow`` non-empty means deny everyone else."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _set(self, "allow", tuple(sorted({v.cidr("access.allow", c) for c in self.allow})))
        _set(self, "deny", tuple(sorted({v.cidr("access.deny", c) for c in self.deny})))


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Per client address limits; 0 disables the limit."""

    rps: int = 0
    connections: int = 0
    burst_multiplier: int = 5
    rpm: int = 0  # requests per minute (limit-rpm), the same burst multiplier
    allowlist: tuple[str, ...] = ()  # client networks no limit applies to (limit-allowlist)
    req_status: int = 503  # the ConfigMap's limit-req-status-code
    conn_status: int = 503  # the ConfigMap's limit-conn-status-code

    def __post_init__(self) -> None:
        v.positive_int("rate_limit.rps", self.rps, maximum=1_000_000, allow_zero=True)
        v.positive_int("rate_limit.connections", self.connections, maximum=1_000_000, allow_zero=True)
        v.positive_int("rate_limit.burst_multiplier", self.burst_multiplier, maximum=1000)
        v.positive_int("rate_limit.rpm", self.rpm, maximum=60_000_000, allow_zero=True)
        _set(self, "allowlist", tuple(sorted({v.cidr("rate_limit.allowlist", c) for c in self.allowlist})))
        for name in ("req_status", "conn_status"):
            v.positive_int(f"rate_limit.{name}", getattr(self, name), maximum=599)

    @property
    def enabled(self) -> bool:
        return bool(self.rps or self.connections or self.rpm)


@dataclass(frozen=True, slots=True)
class Cors:
    allow_origins: tuple[str, ...] = ("*",)
    allow_methods: tuple[str, ...] = ("GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS")
    allow_headers: tuple[str, ...] = (
        "DNT", "Keep-Alive", "User-Agent", "X-Requested-With", "If-Modified-Since",
        "Cache-Control", "Content-Type", "Range", "Authorization",
    )
    expose_headers: tuple[str, ...] = ()
    allow_credentials: bool = True
    max_age: int = 1728000

    def __post_init__(self) -> None:
        origins = tuple(sorted({v.cors_origin("cors.allow_origins", o) for o in self.allow_origins}))
        if not origins:
            raise v.ValidationError("cors.allow_origins", self.allow_origins, "must not be empty")
        _set(self, "allow_origins", origins)
        _set(self, "allow_methods", tuple(sorted({v.http_method("cors.allow_methods", m) for m in self.allow_methods})))
        _set(self, "allow_headers", tuple(sorted({v.header_name("cors.allow_headers", h) for h in self.allow_headers})))
        _set(self, "expose_headers", tuple(sorted({v.header_name("cors.expose_headers", h) for h in self.expose_headers})))
        v.positive_int("cors.max_age", self.max_age, allow_zero=True)


@dataclass(frozen=True, slots=True)
class Redirect:
    """Answer with a redirect instead of proxying (permanent/temporal-redirect, app-root)."""

    target: str
    code: int = 302

    def __post_init__(self) -> None:
        v.redirect_target("redirect.target", self.target)
        if self.code not in (301, 302, 303, 307, 308):
            raise v.ValidationError("redirect.code", self.code, "must be one of 301, 302, 303, 307, 308")


@dataclass(frozen=True, slots=True)
class RequestRedirect:
    """A Gateway API RequestRedirect whose answer depends on the request
    (lua/redirect.lua builds ``Location`` per request): ``scheme`` and ``port``
    are final (``port`` None: left out, the scheme's well-known one);
    ``hostname`` None keeps the request's host; ``path_kind`` None keeps the
    request's path, "ReplaceFullPath" puts ``path``, "ReplacePrefixMatch"
    replaces the matched Prefix ``prefix`` with ``path``. The query is kept."""

    code: int
    scheme: str
    hostname: str | None = None
    port: int | None = None
    path_kind: str | None = None
    path: str | None = None
    prefix: str | None = None

    def __post_init__(self) -> None:
        if self.code not in (301, 302, 303, 307, 308):
            raise v.ValidationError("redirect.code", self.code, "must be one of 301, 302, 303, 307, 308")
        if self.scheme not in ("http", "https"):
            raise v.ValidationError("redirect.scheme", self.scheme, "must be http or https")
        if self.hostname is not None:
            _set(self, "hostname", v.hostname("redirect.hostname", self.hostname, wildcard=False))
        if self.port is not None:
            v.port("redirect.port", self.port)
        if self.path_kind not in (None, "ReplaceFullPath", "ReplacePrefixMatch"):
            raise v.ValidationError("redirect.path_kind", self.path_kind, "must be ReplaceFullPath or ReplacePrefixMatch")
        if self.path_kind is not None:
            v.path("redirect.path", self.path)
        if self.path_kind == "ReplacePrefixMatch":
            v.path("redirect.prefix", self.prefix)


@dataclass(frozen=True, slots=True)
class Location:
    """One path of one server.

    ``backend`` names a ``Backend``; it may be None only when ``redirect``,
    ``request_redirect`` or ``split`` is set. ``rewrite_target`` rewrites the URI before proxying, using the
    location's path as the regex (so REGEX paths give capture groups; ``rewrite_rest``: what follows a prefix).
    ``ssl_redirect`` redirects plain-HTTP requests to HTTPS (ssl-redirect and
    force-ssl-redirect both end up here; the translator decides when).
    """

    path: str
    match: PathMatch = PathMatch.PREFIX
    backend: str | None = None
    proxy: ProxySettings = ProxySettings()
    access: AccessControl = AccessControl()
    rate_limit: RateLimit = RateLimit()
    cors: Cors | None = None
    rewrite_target: str | None = None
    redirect: Redirect | None = None
    ssl_redirect: bool = False
    # Settings only an nginx directive applies: validated, sorted (directive,
    # value) pairs; the route is proxied by a generated lane (lanes.py).
    lane_directives: tuple[tuple[str, str], ...] = ()
    # platformd.ingress.auth.Auth: basic/digest users, external auth, satisfy
    # (validated there; holds credentials, never printed).
    auth: object = None
    request_redirect: RequestRedirect | None = None  # Gateway API; answered instead of proxying
    headers: tuple = ()  # a headers.Program: request/response header operations, applied per request
    mirror: Mirror | None = None  # copy each request to another target (mirror.py)
    # proxy-ssl-*: what the Ingress asks of backend TLS; the translator turns it
    # into lane_directives once the Secret is read (backend_tls.apply).
    backend_tls: "BackendTlsAsk | None" = None
    traffic: Traffic = Traffic()  # platformd.ingress.traffic
    # Gateway API (route_choice): answer only when these hold; several
    # locations may share a path when their conditions differ (tried in order).
    conditions: Conditions | None = None
    # Weighted backends instead of ``backend``: ((name | None: answer 500, weight), ...).
    split: tuple[tuple[str | None, int], ...] = ()
    # Gateway API timeouts: per attempt in milliseconds, with a whole-request deadline
    # (platformd.ingress.deadline); set per attempt in the lane's balancer phase.
    deadline: Deadline | None = None
    # Gateway URLRewrite ReplacePrefixMatch on a PREFIX path: the rewrite's pattern is
    # "^<path>(/(.*))?$" (routes.rewrite_pattern), so ``rewrite_target`` keeps the rest as $1/$2.
    rewrite_rest: bool = False

    def __post_init__(self) -> None:
        match = _enum(PathMatch, "location.match", self.match)
        _set(self, "match", match)
        where = f"location[{self.path!r}]"
        _checked(where, check_path, match, self.path)
        if self.split:
            _checked(where, check_split, "split", self.split)
        if self.backend is None and self.redirect is None and self.request_redirect is None and not self.split:
            raise v.ValidationError(f"{where}.backend", None, "a location needs a backend or a redirect")
        if self.backend is not None:
            _checked(where, v.backend_name, "backend", self.backend)
        if self.rewrite_target is not None:
            _checked(where, v.rewrite_target, "rewrite_target", self.rewrite_target)
        if self.lane_directives:
            from platformd.ingress import lanes  # lanes imports this module

            _set(self, "lane_directives", _checked(where, lanes.directives, self.lane_directives))
        if self.mirror is not None:  # `mirror` takes no variable: the copy needs a lane (mirror.py)
            from platformd.ingress import lanes, mirror as mirror_mod

            pairs = _checked(where, mirror_mod.lane_directives, self.mirror, self.proxy.protocol.value)
            extra = tuple(p for p in pairs if p not in self.lane_directives)
            if extra:
                _set(self, "lane_directives", _checked(where, lanes.directives, self.lane_directives + extra))
        if self.headers:
            _set(self, "headers", _checked(where, headers_mod.check_program, "headers", self.headers))

    @property
    def sort_key(self) -> tuple:
        # Canonical order only; the order nginx sees (which decides between
        # regex locations) is chosen in view._locations.
        order = {PathMatch.EXACT: 0, PathMatch.PREFIX: 1, PathMatch.REGEX: 2}[self.match]
        return (order, -len(self.path), self.path)


def check_path(match: PathMatch, path: str) -> str:
    """``path`` if it is valid for ``match`` (what ``Location`` checks of it)."""
    if match is PathMatch.REGEX:
        v.regex("path", path)
        if not path.startswith("/") and not path.startswith("^/"):
            raise v.ValidationError("path", path, "a regex path must start with '/'")
        return path
    return v.path("path", path)


# --- servers ----------------------------------------------------------------


def _canonical_locations(field_name: str, locations: Iterable[Location]) -> tuple[Location, ...]:
    """``locations`` in canonical order; two locations for one path and match are an error."""
    ordered = tuple(sorted(locations, key=lambda loc: loc.sort_key))  # stable: conditions keep their order
    seen: set[tuple] = set()
    for loc in ordered:
        key = (loc.match, prefix_base(loc.path) if loc.match is PathMatch.PREFIX else loc.path)
        # One location per path and match, and before it any number with
        # distinct conditions (an unconditional one ends the path's list).
        if key in seen or (key, loc.conditions) in seen:
            raise v.ValidationError(field_name, loc.path, f"duplicate {loc.match.value} path")
        seen.add(key if loc.conditions is None else (key, loc.conditions))
    return ordered


def prefix_base(path: str) -> str:
    """The canonical form of a Prefix path: without trailing '/' (except '/')."""
    stripped = path.rstrip("/")
    return stripped or "/"


@dataclass(frozen=True, slots=True)
class Server:
    """One virtual host.

    ``tls_certificate`` refers to a ``Certificate.id``; certificates are served
    by Lua per SNI, so changing it needs no reload. ``tls`` says the host is
    meant to be served over TLS (an Ingress lists it under ``spec.tls``),
    whether or not its certificate is usable: its https answers carry HSTS. ``redirect`` redirects the
    whole host (e.g. from-to-www) and takes precedence over its locations.
    """

    hostname: str
    aliases: tuple[str, ...] = ()
    tls_certificate: str | None = None
    locations: tuple[Location, ...] = ()
    tls: bool = False
    redirect: Redirect | None = None
    client_tls: ClientTls | None = None  # auth-tls-*: client certificates (client_tls.py)
    host_tls: HostTls | None = None  # ssl-ciphers, ssl-prefer-server-ciphers (host_tls.py)

    def __post_init__(self) -> None:
        host = v.hostname("server.hostname", self.hostname)
        _set(self, "hostname", host)
        where = f"server[{host}]"
        aliases = {_checked(where, v.hostname, "aliases", a) for a in self.aliases} - {host}
        _set(self, "aliases", tuple(sorted(aliases)))
        if self.tls_certificate is not None:
            _checked(where, v.certificate_id, "tls_certificate", self.tls_certificate)
        _set(self, "locations", _canonical_locations(f"{where}.locations", self.locations))

    @property
    def names(self) -> tuple[str, ...]:
        return (self.hostname, *self.aliases)


# --- global settings --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listen:
    http_port: int = 80
    https_port: int = 443
    reuse_port: bool = False
    # (local port, listener port) of Gateway listeners other than 80/443
    # (--gateway-listener-port): fixed at start, so they never cause a reload.
    gateway_ports: tuple[tuple[int, int], ...] = ()
    gateway_tls_ports: tuple[tuple[int, int], ...] = ()  # the same, served with TLS (HTTPS listeners)
    # --enable-ssl-passthrough: the stream module owns https_port (passthrough.py)
    ssl_passthrough: bool = False

    def __post_init__(self) -> None:
        v.port("listen.http_port", self.http_port)
        v.port("listen.https_port", self.https_port)
        pairs = (*self.gateway_ports, *self.gateway_tls_ports)
        for pair in pairs:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise v.ValidationError("listen.gateway_ports", pair, "must be (local port, listener port)")
            v.port("listen.gateway_ports", pair[0])
            v.port("listen.gateway_ports", pair[1])
        ports = [local for local, _ in pairs]
        if len({self.http_port, self.https_port, *ports}) != 2 + len(ports):
            raise v.ValidationError("listen.gateway_ports", self.gateway_ports, "a local port is listed twice")


@dataclass(frozen=True, slots=True)
class Workers:
    processes: int | None = None  # None = auto
    connections: int = 16384
    shutdown_timeout: int = 240  # seconds old workers get to finish on reload
    user: str | None = None  # run workers as this user (only when the master is root)

    def __post_init__(self) -> None:
        if self.processes is not None:
            v.positive_int("workers.processes", self.processes, maximum=1024)
        v.positive_int("workers.connections", self.connections, maximum=1_000_000)
        v.positive_int("workers.shutdown_timeout", self.shutdown_timeout, maximum=86400, allow_zero=True)
        if self.user is not None:
            v.user_name("workers.user", self.user)


@dataclass(frozen=True, slots=True)
class Hsts:
    enabled: bool = True
    max_age: int = 31536000
    include_subdomains: bool = True
    preload: bool = False

    def __post_init__(self) -> None:
        v.positive_int("hsts.max_age", self.max_age, allow_zero=True)


@dataclass(frozen=True, slots=True)
class Tls:
    protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    ciphers: str = (
        "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
        "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
    )
    hsts: Hsts = Hsts()
    redirect_code: int = 308  # for ssl_redirect locations

    def __post_init__(self) -> None:
        protocols = tuple(sorted({v.ssl_protocol("tls.protocols", p) for p in self.protocols}))
        if not protocols:
            raise v.ValidationError("tls.protocols", self.protocols, "must not be empty")
        _set(self, "protocols", protocols)
        v.ssl_ciphers("tls.ciphers", self.ciphers)
        if self.redirect_code not in (301, 302, 307, 308):
            raise v.ValidationError("tls.redirect_code", self.redirect_code, "must be 301, 302, 307 or 308")


DEFAULT_LOG_FORMAT = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_length $request_time '
    '[$proxy_upstream_name] $upstream_addr $upstream_response_length '
    "$upstream_response_time $upstream_status $request_id"
)


@dataclass(frozen=True, slots=True)
class Logging:
    format: str = DEFAULT_LOG_FORMAT
    access_log: bool = True
    error_level: str = "notice"

    def __post_init__(self) -> None:
        v.log_format("logging.format", self.format)
        if self.error_level not in ("debug", "info", "notice", "warn", "error", "crit"):
            raise v.ValidationError("logging.error_level", self.error_level, "must be an nginx log level")


@dataclass(frozen=True, slots=True)
class GlobalSettings:
    """Process-wide nginx settings (ingress-nginx's ConfigMap, grouped)."""

    listen: Listen = Listen()
    workers: Workers = Workers()
    logging: Logging = Logging()
    tls: Tls = Tls()
    timeouts: Timeouts = Timeouts(connect=5, send=60, read=60)
    body_size: str = "1m"
    buffering: bool = False
    keepalive_timeout: int = 75
    keepalive_requests: int = 1000
    upstream_keepalive_connections: int = 320
    use_forwarded_headers: bool = False
    server_tokens: bool = False
    headers: tuple = ()  # a headers.Program every route runs first (proxy-set-headers, add-headers)

    def __post_init__(self) -> None:
        _set(self, "body_size", v.size("body_size", self.body_size))
        for name in ("connect", "send", "read"):
            if getattr(self.timeouts, name) is None:
                raise v.ValidationError(f"timeouts.{name}", None, "global timeouts must be set")
        v.positive_int("keepalive_timeout", self.keepalive_timeout, maximum=86400, allow_zero=True)
        v.positive_int("keepalive_requests", self.keepalive_requests)
        v.positive_int("upstream_keepalive_connections", self.upstream_keepalive_connections, maximum=100_000)


# --- the whole ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BoundHosts:
    """Hosts served only to requests that arrive on local ``address`` (None:
    any) and local ``port``: Gateways on their own pool address or on a mapped
    listener port (lua/bound.lua). ``any_host``: the locations of the listener
    without hostname (``*``), for names none of ``servers`` has."""

    address: str | None
    port: int
    servers: tuple[Server, ...] = ()
    any_host: tuple[Location, ...] = ()

    def __post_init__(self) -> None:
        if self.address is not None:
            _set(self, "address", v.ip_address("bound.address", self.address))
        v.port("bound.port", self.port)
        where = f"bound[{self.address or '*'}:{self.port}]"
        _set(self, "servers", _unique_sorted(self.servers, _HOSTNAME, f"{where}.servers"))
        _check_names(self.servers)
        _set(self, "any_host", _canonical_locations(f"{where}.any_host", self.any_host))

    @property
    def key(self) -> str:
        """How the router names this table: "<address> <port>", "*" for any address."""
        return f"{self.address or '*'} {self.port}"


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Configuration:
    """Everything the data plane serves.

    The catch-all server (nginx's ``server_name _``, any host no ``Server``
    names) serves ``default_server_locations`` (Ingress rules without a host)
    and, for everything else, ``default_backend``; None answers 404 there.
    A ``Prefix /`` among ``default_server_locations`` takes the place of the
    ``default_backend`` location. A named server without a ``Prefix /`` of its
    own answers 404 for paths none of its locations match.

    ``default_certificate`` (a ``Certificate.id``) is served for TLS names no
    certificate covers; None leaves the built-in self-signed one.
    """

    servers: tuple[Server, ...] = ()
    backends: tuple[Backend, ...] = ()
    certificates: tuple[Certificate, ...] = ()
    settings: GlobalSettings = GlobalSettings()
    default_backend: str | None = None
    default_server_locations: tuple[Location, ...] = ()
    default_certificate: str | None = None
    bound: tuple[BoundHosts, ...] = ()  # Gateway hosts of one local address / port (lua/bound.lua)
    passthrough: tuple[Passthrough, ...] = ()  # ssl-passthrough hosts (rendered: a change reloads)
    # Gateway wildcard hosts of the shared table again, their own locations only: matched
    # for more than one label when nothing else matched (gateway_wildcards, lua/wildcards.lua).
    gateway_wildcards: tuple[Server, ...] = ()

    def __post_init__(self) -> None:
        _set(self, "servers", _unique_sorted(self.servers, _HOSTNAME, "servers"))
        _set(self, "backends", _unique_sorted(self.backends, _NAME, "backends"))
        _set(self, "certificates", _unique_sorted(self.certificates, _ID, "certificates"))
        if self.servers is not _names_checked[0]:
            _check_names(self.servers)
            _names_checked[0] = self.servers
        if self.default_backend is not None:
            v.backend_name("default_backend", self.default_backend)
        _set(self, "default_server_locations",
             _canonical_locations("default_server_locations", self.default_server_locations))
        if self.default_certificate is not None:
            v.certificate_id("default_certificate", self.default_certificate)
        if len({b.key for b in self.bound}) != len(self.bound):
            raise v.ValidationError("bound", [b.key for b in self.bound], "two tables for one address and port")
        _set(self, "bound", tuple(sorted(self.bound, key=lambda b: b.key)))
        if self.gateway_wildcards:
            if any(not s.hostname.startswith("*.") or s.aliases for s in self.gateway_wildcards):
                raise v.ValidationError("gateway_wildcards", [s.hostname for s in self.gateway_wildcards],
                                        "must be wildcard Servers without aliases")
            _set(self, "gateway_wildcards", _unique_sorted(self.gateway_wildcards, _HOSTNAME, "gateway_wildcards"))

    def backend(self, name: str) -> Backend | None:
        for backend in self.backends:
            if backend.name == name:
                return backend
        return None


_HOSTNAME = operator.attrgetter("hostname")
_NAME = operator.attrgetter("name")
_ID = operator.attrgetter("id")
_ALIASES = operator.attrgetter("aliases")

# The last servers tuple whose names were checked. ``replace`` of a
# Configuration (an endpoint change, at 20 ms a time at 10,000 Ingresses
# before this) keeps the tuple, and a tuple never changes, so its check stands.
_names_checked: list[tuple | None] = [None]


def _check_names(servers: tuple[Server, ...]) -> None:
    """No name (hostname or alias) is served by two Servers. ``servers`` come
    from ``_unique_sorted``, so hostnames are already distinct: only aliases
    can clash, and few Servers have any. The full walk below (3 ms at 10,000
    Servers, on every derived Configuration) runs only to name a clash."""
    with_aliases = list(filter(_ALIASES, servers))
    if not with_aliases:
        return
    aliases = [name for server in with_aliases for name in server.aliases]
    if len(set(aliases)) == len(aliases) and set(map(_HOSTNAME, servers)).isdisjoint(aliases):
        return
    names: dict[str, str] = {}
    for server in servers:
        for name in server.names:
            if name in names:
                raise v.ValidationError(
                    f"server[{server.hostname}].aliases", name, f"already served by server[{names[name]}]"
                )
            names[name] = server.hostname


def _unique_sorted(items: Iterable, key, field_name: str) -> tuple:
    if isinstance(items, tuple):
        keys = list(map(key, items))
        if all(map(operator.lt, keys, itertools.islice(keys, 1, None))):
            # Already canonical (a ``replace`` of a Configuration): keep the
            # tuple itself, which caches keyed by identity rely on.
            return items
    ordered = sorted(items, key=key)
    for before, after in zip(ordered, ordered[1:]):
        if key(before) == key(after):
            if before == after:
                continue
            raise v.ValidationError(field_name, key(after), "two different entries share this name")
    deduped = []
    for item in ordered:
        if not deduped or key(deduped[-1]) != key(item):
            deduped.append(item)
    return tuple(deduped)
