"""Model → view model: everything the template prints, already escaped.

The template only loops and prints; every decision (which nginx location
modifiers express a Kubernetes path type, which directive family a backend
protocol uses, whether a default applies) is taken here, in pure functions.

Every string in a view object is either a constant chosen by this module or
a user value that went through its validator and ``validate.quote``. Tokens
that are already quoted carry a ``_q`` suffix in their field name.

Which location answers a request (Kubernetes semantics on nginx's rules).
nginx takes an ``=`` location that matches; otherwise it remembers the
longest matching plain prefix location, then tries the regex locations in
file order and takes the first that matches; only when none does, the
remembered prefix. Left alone, any matching regex would beat a longer Prefix
path. So per server:

1. Exact paths are ``=`` locations: Exact beats everything (Kubernetes).
2. A server without Regex paths keeps Prefix paths as plain prefix
   locations: the longest one wins, which is the Kubernetes rule.
3. In a server with Regex paths, every Prefix path but ``/`` is rendered as
   a case-sensitive regex, ``^/foo(?:/|$)``, and the regex-form locations
   are ordered longest path first (length of the path as written; a Prefix
   path without its trailing ``/``), a Prefix before a Regex of equal
   length, then by path text. The first that matches wins, so the longest
   matching path wins whichever kind it is (ingress-nginx orders its regex
   hosts by path length the same way). ``Prefix /`` stays a plain prefix
   location and so answers only what nothing else matches.
4. Every server ends with a plain ``/``: the server's own ``Prefix /``,
   else a 404 (the translator adds a host's default backend as its ``/``
   when it has one), so nothing falls through to nginx's ``root html``.

Server names: exact names as they are; a wildcard ``*.example.com`` covers
exactly one DNS label (Kubernetes), whereas nginx's ``*.example.com`` also
matches ``a.b.example.com``, so it is rendered as the regex
``~^[^.]+\\.example\\.com$``. nginx tries exact names before regexes, so an
exact host always beats a wildcard one; regex names are tried in file order,
which is deterministic (servers sorted by hostname, aliases sorted) and
irrelevant anyway: two one-label wildcards with different suffixes never
match the same name.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import re
import threading
from dataclasses import dataclass, fields, replace
from pathlib import Path

from platformd.ingress import validate as v
from platformd.ingress.layout import NginxFiles
from platformd.ingress.model import (
    Backend,
    BackendProtocol,
    Configuration,
    Cors,
    GlobalSettings,
    LoadBalance,
    Location,
    PathMatch,
    Server,
    prefix_base,
)

__all__ = [
    "Bodies",
    "LocationBody",
    "LocationView",
    "LuaPhases",
    "NginxView",
    "RuntimePaths",
    "ServerView",
    "build",
    "lua_phases",
    "needs_lua_hooks",
]


@dataclass(frozen=True)
class RuntimePaths:
    """Where this nginx keeps its files. Chosen by us, never by users."""

    state_dir: Path
    lua_dir: Path
    default_cert: Path
    default_key: Path

    @property
    def files(self) -> NginxFiles:
        return NginxFiles(self.state_dir)

    @property
    def socket(self) -> Path:
        return self.files.socket

    @property
    def pid_file(self) -> Path:
        return self.files.pid_file

    @property
    def error_log(self) -> Path:
        return self.files.error_log

    @property
    def access_log(self) -> Path:
        return self.files.access_log

    @property
    def temp_dir(self) -> Path:
        return self.files.temp_dir


# The internal server answering 503 for requests whose backend is unknown or
# has no endpoints listens here, on the http port: the balancer sends such
# requests to it (balancer_by_lua cannot answer with a status of its own).
# A loopback address rather than a unix socket: workers may run as a user the
# state directory is closed to, and a crashed nginx leaves no file behind.
# nginx already listens on *:<http port>, so this costs no extra socket and
# no extra port; anyone connecting to it gets a 503 and nothing else.
UNAVAILABLE_ADDRESS = "127.0.0.2"

_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+@=,-]*$")
# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


def _plain_path(field: str, path: Path) -> str:
    text = str(path)
    if not _SAFE_PATH.fullmatch(text):
        raise v.ValidationError(field, text, "runtime paths must be absolute and plain (letters, digits, . _ / + @ = , -)")
    return text


def _file_path(field: str, path: Path) -> str:
    return v.quote(_plain_path(field, path))


@dataclass(frozen=True)
class LocationView:
    match_q: str  # the arguments of `location`, e.g. '= "/api"' or '~* "^/v[0-9]+"'
    upstream_name_q: str
    body: "LocationBody"


@dataclass(frozen=True)
class LocationBody:
    """What a location does once nginx chose it: everything after it sets
    ``$proxy_upstream_name``.

    Locations with equal settings share one body object (``Bodies``), which
    the renderer lays out once: at 10,000 Ingresses, laying out every
    location on its own was most of a render. Two locations behave alike
    exactly when their bodies are equal, which is what ``routes`` uses to
    tell a plain location from one that needs rendered directives.
    """

    proxy: bool  # False: answered by nginx itself (redirect)
    module: str  # "proxy" or "grpc": prefix of the pass/timeout directives
    pass_url: str  # upstream_balancer URL with scheme
    return_line: str | None  # e.g. '302 "https://example.com/"'
    ssl_redirect: str | None  # arguments of `return` for plain-HTTP requests
    rewrite: str | None  # arguments of `rewrite`
    access: tuple[str, ...]  # "allow 10.0.0.0/8", "deny all"
    limit_req: str | None
    limit_conn: str | None
    connect_timeout: int
    send_timeout: int
    read_timeout: int
    body_size: str
    buffering: str  # "on" / "off"
    host_header: str  # quoted value or the variable $host
    # False: the proxy_* request headers are exactly the http-level ones
    # (nginx.conf.j2), so the location inherits them instead of repeating
    # them; nginx then shares one compiled header table instead of building
    # one per location. True for gRPC and for a custom Host (upstream-vhost).
    own_headers: bool
    cors: "CorsView | None"
    hsts: bool  # the server is a TLS host (Server.tls) and HSTS is on (sent on https only)
    lua_access: bool  # render access_by_lua (see lua_phases)
    lua_log: bool  # render log_by_lua


@dataclass(frozen=True)
class CorsView:
    origin_regex_q: str | None  # None: any origin ("*")
    methods_q: str
    headers_q: str
    expose_q: str | None
    credentials: bool
    max_age: int


@dataclass(frozen=True)
class ServerView:
    names_q: tuple[str, ...]
    redirect: str | None
    locations: tuple[LocationView, ...]


@dataclass(frozen=True)
class LimitZone:
    directive: str  # limit_req_zone / limit_conn_zone
    args: str


@dataclass(frozen=True)
class NginxView:
    worker_processes: str
    worker_connections: int
    worker_shutdown_timeout: int
    worker_user: str | None
    pid_q: str
    error_log_q: str
    error_level: str
    lua_package_path_q: str
    temp_dir_q: dict[str, str]
    access_log_q: str | None
    log_format_q: str
    server_tokens: str
    keepalive_timeout: int
    keepalive_requests: int
    upstream_keepalive: int
    forwarded_headers: bool
    ssl_protocols: str
    ssl_ciphers_q: str
    default_cert_q: str
    default_key_q: str
    http_port: int
    https_port: int
    reuse_port: bool
    socket_q: str
    unavailable_address: str  # the 503 server's own loopback address
    hsts_q: str | None  # Strict-Transport-Security value, sent on https only
    limit_zones: tuple[LimitZone, ...]
    servers: tuple[ServerView, ...]
    default_locations: tuple[LocationView, ...]  # of the catch-all server "_"
    # What the catch-all server's router location does (lua/router.lua):
    # exactly a plain location, which is all the router serves (routes.py).
    router_body: LocationBody


def build(config: Configuration, paths: RuntimePaths) -> NginxView:
    """The view model for ``config``; raises ValidationError on a bad value."""
    settings = config.settings
    socket = str(paths.socket)
    if len(socket.encode()) > MAX_SOCKET_PATH:
        raise v.ValidationError("state_dir", socket, f"unix socket path longer than {MAX_SOCKET_PATH} bytes")
    bodies = Bodies(config)
    servers = _server_views.views(config.servers, bodies)
    default_locations = _default_locations(config, bodies)
    lua_dir = _plain_path("lua_dir", paths.lua_dir)
    temp = {name: _file_path("temp_dir", paths.temp_dir / name) for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    return NginxView(
        worker_processes=str(settings.workers.processes or "auto"),
        worker_connections=settings.workers.connections,
        worker_shutdown_timeout=settings.workers.shutdown_timeout,
        worker_user=v.user_name("workers.user", settings.workers.user) if settings.workers.user else None,
        pid_q=_file_path("pid", paths.pid_file),
        error_log_q=_file_path("error_log", paths.error_log),
        error_level=settings.logging.error_level,
        # Our modules first; ";;" appends the default path (resty.core, cjson).
        lua_package_path_q=v.quote(f"{lua_dir}/?.lua;{lua_dir}/?/init.lua;;"),
        temp_dir_q=temp,
        access_log_q=_file_path("access_log", paths.access_log) if settings.logging.access_log else None,
        log_format_q=v.quote(v.log_format("logging.format", settings.logging.format), allow_variables=True),
        server_tokens="on" if settings.server_tokens else "off",
        keepalive_timeout=settings.keepalive_timeout,
        keepalive_requests=settings.keepalive_requests,
        upstream_keepalive=settings.upstream_keepalive_connections,
        forwarded_headers=settings.use_forwarded_headers,
        ssl_protocols=" ".join(v.ssl_protocol("tls.protocols", p) for p in settings.tls.protocols),
        ssl_ciphers_q=v.quote(v.ssl_ciphers("tls.ciphers", settings.tls.ciphers)),
        default_cert_q=_file_path("default_cert", paths.default_cert),
        default_key_q=_file_path("default_key", paths.default_key),
        http_port=settings.listen.http_port,
        https_port=settings.listen.https_port,
        reuse_port=settings.listen.reuse_port,
        socket_q=v.quote("unix:" + _plain_path("socket", paths.socket)),
        unavailable_address=UNAVAILABLE_ADDRESS,
        hsts_q=_hsts(settings),
        limit_zones=tuple(bodies.zones),
        servers=servers,
        default_locations=default_locations,
        router_body=bodies.plain(PathMatch.PREFIX, tls=False, ssl_redirect=False),
    )


class _ServerViews:
    """The ServerView of each Server object of the last two builds.

    The translator reuses the Server objects of hosts that did not change,
    so after one new Ingress all but one server are the same objects, with
    the same Lua hooks of their backends: with equal settings, their views
    are too. Each build reads the views of the previous two builds and
    keeps the ones it used; other settings start afresh. A build works on
    its own snapshot of the cache, so concurrent builds stay correct (the
    last one to finish is remembered).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: tuple[dict[int, tuple], ...] = ()
        self._settings: GlobalSettings | None = None

    def views(self, servers: tuple[Server, ...], bodies: "Bodies") -> tuple[ServerView, ...]:
        with self._lock:
            recent, settings = self._recent, self._settings
        if settings is not bodies.settings and settings != bodies.settings:
            recent = ()  # compared once per build: each translation makes a new settings object
        used: dict[int, tuple] = {}
        views = []
        phases = bodies.phases
        for server in servers:
            # () when no backend has hooks: a different spelling of "none",
            # which at worst makes a view again when that changes.
            hooks = tuple(phases.get(loc.backend) for loc in server.locations if loc.backend) if phases else ()
            hit = None
            for cache in recent:
                hit = cache.get(id(server))
                if hit is not None:
                    break
            if hit is not None and hit[0] is server and hit[1] == hooks:
                for zone in hit[3]:
                    if zone not in bodies.zones:
                        bodies.zones.append(zone)
            else:
                before = len(bodies.zones)
                view = _server(server, bodies)
                # Rate-limited bodies are made per host, so the zones this
                # server added are all the zones it uses.
                hit = (server, hooks, view, tuple(bodies.zones[before:]))
            used[id(server)] = hit
            views.append(hit[2])
        with self._lock:
            self._recent, self._settings = (used, *recent[:1]), bodies.settings
        return tuple(views)


_server_views = _ServerViews()


def _server(server: Server, bodies: "Bodies") -> ServerView:
    where = f"server[{server.hostname}]"
    names = tuple(_server_name(v.hostname(f"{where}.names", n)) for n in server.names)
    redirect = None
    if server.redirect is not None:
        redirect = f"{server.redirect.code} {v.quote(v.redirect_target(f'{where}.redirect', server.redirect.target))}"
    locations = _locations(where, server.locations, server.hostname, bodies, tls=server.tls)
    return ServerView(names_q=names, redirect=redirect, locations=locations)


def _server_name(name: str) -> str:
    """A validated hostname as a ``server_name`` token (see module docstring)."""
    if not name.startswith("*."):
        return v.quote(name)
    suffix = name[2:]
    return v.quote("~^[^.]+" + re.escape("." + suffix) + "$")


def _locations(where: str, locations: tuple[Location, ...], host: str, bodies: "Bodies", *,
               tls: bool) -> tuple[LocationView, ...]:
    """The location blocks of one server, in the order nginx must see them."""
    exact_paths = {loc.path for loc in locations if loc.match is PathMatch.EXACT}
    regex_host = any(loc.match is PathMatch.REGEX for loc in locations)
    ordered: list[tuple[tuple, LocationView]] = []
    any_regex_form = False
    for index, loc in enumerate(locations):
        try:
            body = bodies.of(loc, host, tls)
            name_q = _name_q(loc.backend or "redirect")
            for match_q, regex_form in _location_matches(loc, exact_paths, regex_host):
                any_regex_form = any_regex_form or regex_form
                order = _regex_order(loc) if regex_form else (0, index)
                ordered.append((order, LocationView(match_q, name_q, body)))
        except v.ValidationError as exc:
            raise exc.within(f"{where}.location[{loc.path}]") from None
    if not any(_is_root_prefix(loc) for loc in locations):
        ordered.append(((2,), LocationView(_ROOT_Q, _NOT_FOUND_NAME_Q, bodies.not_found(tls))))
    if not any_regex_form:  # (0, index) then (2,): already in order
        return tuple(view for _, view in ordered)
    return tuple(view for _, view in sorted(ordered, key=lambda item: item[0]))


@functools.lru_cache(maxsize=1 << 16)
def _name_q(backend: str) -> str:
    """A backend name as the quoted value of ``$proxy_upstream_name`` (pure; cached like ``_matches``)."""
    return v.quote(v.backend_name("backend", backend))


def _is_root_prefix(loc: Location) -> bool:
    return loc.match is PathMatch.PREFIX and prefix_base(loc.path) == "/"


def _regex_order(loc: Location) -> tuple:
    length = len(prefix_base(loc.path)) if loc.match is PathMatch.PREFIX else len(loc.path)
    return (1, -length, 0 if loc.match is PathMatch.PREFIX else 1, loc.path)


def _location_matches(loc: Location, exact_paths: set[str], regex_host: bool) -> tuple[tuple[str, bool], ...]:
    twin = loc.match is PathMatch.PREFIX and prefix_base(loc.path) in exact_paths
    return _matches(loc.match, loc.path, twin, regex_host)


# Paths repeat across hosts ("/", "/api"): the same few arguments, validated
# and quoted once. A pure function of small immutable arguments.
@functools.lru_cache(maxsize=8192)
def _matches(match: PathMatch, path: str, exact_twin: bool, regex_host: bool) -> tuple[tuple[str, bool], ...]:
    """``(location arguments, is a regex)`` expressing the Kubernetes path semantics.

    Prefix ``/foo`` must match ``/foo`` and ``/foo/...`` but not ``/foobar``,
    so it becomes ``= /foo`` plus ``/foo/``; an Exact path of the same name
    wins over the Prefix one (Kubernetes: Exact beats Prefix), so the ``=``
    half is left out then. In a server with Regex paths it is the regex
    ``^/foo(?:/|$)`` instead (module docstring, rule 3).
    """
    if match is PathMatch.EXACT:
        return (("= " + v.quote(v.path("path", path)), False),)
    if match is PathMatch.REGEX:
        pattern = v.regex("path", path)
        anchored = pattern if pattern.startswith("^") else "^" + pattern
        return (("~* " + v.quote(anchored, allow_variables=True), True),)
    base = prefix_base(v.path("path", path))
    if base == "/":
        return ((v.quote("/"), False),)
    if regex_host:
        return (("~ " + v.quote("^" + re.escape(base) + "(?:/|$)"), True),)
    matches = [(v.quote(base + "/"), False)]
    if not exact_twin:
        matches.insert(0, ("= " + v.quote(base), False))
    return tuple(matches)


@dataclass(frozen=True)
class LuaPhases:
    """Which Lua hooks besides ``balancer_by_lua`` a location's requests need."""

    access: bool = False  # canary choice, sticky cookie, EWMA in-flight count
    log: bool = False  # EWMA response times


_PLAIN = LuaPhases()


def _algorithm(backend: Backend) -> str:
    """Which lua/balancer module serves ``backend`` (balancer.lua's algorithm_for)."""
    if backend.upstream_hash_by:
        return "chash"
    if backend.session_affinity is not None:
        return "sticky_" + backend.session_affinity.mode.value
    return backend.load_balance.value


def lua_phases(config: Configuration) -> dict[str, LuaPhases]:
    """Lua hooks per backend name that locations use; absent means balancer only.

    Plain backends (round robin or consistent hashing, no canary) are served
    by ``balancer_by_lua`` alone, which spares every request a Lua coroutine
    (access phase) and ngx.ctx: that is most of the Lua balancer's cost over
    a static upstream. A backend with canaries, cookie affinity or EWMA needs
    the access phase (canary choice, Set-Cookie, in-flight counts), and EWMA
    anywhere among it and its canaries the log phase. These are properties
    of a backend that are otherwise dynamic; ``decide`` compares this mapping
    too, so changing one of them is a reload (see decide.py). Must agree with
    ``needs_access`` in lua/balancer.lua.
    """
    hooked = {b.name: b for b in config.backends if needs_lua_hooks(b)}
    if not hooked:
        return {}  # the usual case: no need to find which backends are used
    by_name = {b.name: b for b in config.backends}
    used = {loc.backend for server in config.servers for loc in server.locations}
    used.update(loc.backend for loc in config.default_server_locations)
    used.add(config.default_backend)
    phases: dict[str, LuaPhases] = {}
    for name in sorted(used & hooked.keys()):
        backend = hooked[name]
        algorithms = {_algorithm(backend)} | {
            _algorithm(by_name[alt]) for alt in backend.alternative_backends if alt in by_name
        }
        phases[name] = LuaPhases(access=True, log="ewma" in algorithms)
    return phases


_NEEDS_ACCESS = frozenset({"ewma", "sticky_balanced", "sticky_persistent"})


def needs_lua_hooks(backend: Backend) -> bool:
    """Whether locations using ``backend`` need Lua hooks besides the balancer
    (``_algorithm(backend) in _NEEDS_ACCESS``, without making the name: this
    is asked of every backend of every configuration)."""
    if backend.alternative_backends:
        return True
    if backend.upstream_hash_by:
        return False  # chash
    return backend.session_affinity is not None or backend.load_balance is LoadBalance.EWMA


_PASS = {
    BackendProtocol.HTTP: ("proxy", "http://upstream_balancer"),
    BackendProtocol.HTTPS: ("proxy", "https://upstream_balancer"),
    BackendProtocol.GRPC: ("grpc", "grpc://upstream_balancer"),
    BackendProtocol.GRPCS: ("grpc", "grpcs://upstream_balancer"),
}


def _zone_name(kind: str, host: str, path: str) -> str:
    digest = hashlib.sha256(f"{host}\x00{path}".encode()).hexdigest()[:16]
    return f"{kind}_{digest}"


_ROOT_Q = v.quote("/")
_NOT_FOUND_NAME_Q = v.quote("default-404")
# Location fields a body depends on besides its path (derived, so a field
# added to Location is part of the key without anyone remembering to).
_body_fields = operator.attrgetter(*(f.name for f in fields(Location) if f.name not in ("path", "backend")))


class Bodies:
    """The ``LocationBody`` of each location of one configuration.

    Equal settings give the same body object. The path and host matter only
    to rewrites (the path is the pattern) and rate limits (the zone is named
    after host and path), so only those bodies are made per path; the
    backend never matters (it is the location's ``$proxy_upstream_name``)
    except through its Lua hooks. ``zones`` collects the limit zones the
    bodies use, in the order first needed.
    """

    def __init__(self, config: Configuration, phases: dict[str, LuaPhases] | None = None) -> None:
        self.settings = config.settings
        self.phases = lua_phases(config) if phases is None else phases
        self.zones: list[LimitZone] = []
        self._made: dict[tuple, LocationBody] = {}
        # The same lookup keyed by the identities of the settings objects:
        # locations of one Ingress (and all without annotations) share
        # them, and hashing the frozen settings by value is most of a
        # lookup. Each entry keeps the objects its key names by id alive,
        # so an id cannot be reused while it exists.
        self._by_id: dict[tuple, tuple[tuple, LocationBody]] = {}

    def of(self, loc: Location, host: str, tls: bool) -> LocationBody:
        hooks = self.phases.get(loc.backend or "", _PLAIN)
        # The 503 server the balancer falls back to speaks plain
        # HTTP/1.1; HTTPS and gRPC upstreams get their 503 from the
        # access phase instead.
        access = hooks.access or loc.proxy.protocol is not BackendProtocol.HTTP
        own = (host, loc.path) if loc.rate_limit.enabled or loc.rewrite_target is not None else None
        settings = _body_fields(loc)
        fast = (*map(id, settings), own, tls, access, hooks.log)
        hit = self._by_id.get(fast)
        if hit is not None:
            return hit[1]
        key = (settings, own, tls, access, hooks.log)
        body = self._made.get(key)
        if body is None:
            body = _location_body(loc, host, self.settings, self.zones, tls, lua_access=access, lua_log=hooks.log)
            self._made[key] = body
        self._by_id[fast] = (settings, body)
        return body

    def plain(self, match: PathMatch, tls: bool, ssl_redirect: bool) -> LocationBody:
        """The body of a location with no settings of its own: an HTTP
        backend without Lua hooks and the global defaults for everything."""
        key = ("plain", match, tls, ssl_redirect)
        body = self._made.get(key)
        if body is None:
            loc = Location(path="/", match=match, backend="plain", ssl_redirect=ssl_redirect)
            body = self._made[key] = _location_body(loc, "_", self.settings, [], tls)
        return body

    def not_found(self, tls: bool) -> LocationBody:
        """The body of ``location /`` answering 404, for a server without a ``Prefix /``."""
        key = ("404", tls)
        body = self._made.get(key)
        if body is None:
            plain = _location_body(Location(path="/", backend="default-404"), "_", self.settings, [], tls)
            body = self._made[key] = replace(plain, proxy=False, return_line="404")
        return body


def _location_body(loc: Location, host: str, settings: GlobalSettings, zones: list[LimitZone],
                   tls: bool, *, lua_access: bool = False, lua_log: bool = False) -> LocationBody:
    module, pass_url = _PASS[loc.proxy.protocol]
    host_header = (
        v.quote(v.upstream_vhost("proxy.upstream_vhost", loc.proxy.upstream_vhost))
        if loc.proxy.upstream_vhost
        else "$host"
    )
    timeouts = loc.proxy.timeouts
    limit_req = limit_conn = None
    if loc.rate_limit.rps:
        name = _zone_name("rps", host, loc.path)
        zone = LimitZone("limit_req_zone", f"$binary_remote_addr zone={name}:5m rate={loc.rate_limit.rps}r/s")
        if zone not in zones:
            zones.append(zone)
        limit_req = f"zone={name} burst={loc.rate_limit.rps * loc.rate_limit.burst_multiplier} nodelay"
    if loc.rate_limit.connections:
        name = _zone_name("conn", host, loc.path)
        zone = LimitZone("limit_conn_zone", f"$binary_remote_addr zone={name}:5m")
        if zone not in zones:
            zones.append(zone)
        limit_conn = f"{name} {loc.rate_limit.connections}"
    return LocationBody(
        proxy=loc.redirect is None,
        module=module,
        pass_url=pass_url,
        return_line=(
            f"{loc.redirect.code} {v.quote(v.redirect_target('redirect.target', loc.redirect.target))}"
            if loc.redirect is not None
            else None
        ),
        ssl_redirect=_ssl_redirect(settings) if loc.ssl_redirect else None,
        rewrite=_rewrite(loc),
        access=_access(loc),
        limit_req=limit_req,
        limit_conn=limit_conn,
        connect_timeout=timeouts.connect or settings.timeouts.connect,
        send_timeout=timeouts.send or settings.timeouts.send,
        read_timeout=timeouts.read or settings.timeouts.read,
        body_size=v.size("proxy.body_size", loc.proxy.body_size or settings.body_size),
        buffering="on" if (settings.buffering if loc.proxy.buffering is None else loc.proxy.buffering) else "off",
        host_header=host_header,
        own_headers=module != "proxy" or host_header != "$host",
        cors=_cors(loc.cors) if loc.cors is not None else None,
        hsts=tls and settings.tls.hsts.enabled,
        lua_access=lua_access,
        lua_log=lua_log,
    )


def _ssl_redirect(settings: GlobalSettings) -> str:
    port = settings.listen.https_port
    authority = "$host" if port == 443 else f"$host:{port}"
    return f"{settings.tls.redirect_code} https://{authority}$request_uri"


def _rewrite(loc: Location) -> str | None:
    if loc.rewrite_target is None:
        return None
    target = v.rewrite_target("rewrite_target", loc.rewrite_target)
    if loc.match is PathMatch.REGEX:
        pattern = v.regex("path", loc.path)
        pattern = pattern if pattern.startswith("^") else "^" + pattern
        pattern = "(?i)" + pattern
    else:
        pattern = "^" + re.escape(v.path("path", loc.path))
    # `break`: rewrite in place and keep proxying from this location.
    return f"{v.quote(pattern, allow_variables=True)} {v.quote(target, allow_variables=True)} break"


def _access(loc: Location) -> tuple[str, ...]:
    lines = [f"deny {v.cidr('access.deny', c)}" for c in loc.access.deny]
    lines += [f"allow {v.cidr('access.allow', c)}" for c in loc.access.allow]
    if loc.access.allow:
        lines.append("deny all")
    return tuple(lines)


def _cors(cors: Cors) -> CorsView:
    origins = [v.cors_origin("cors.allow_origins", o) for o in cors.allow_origins]
    origin_regex_q = None
    if "*" not in origins:
        alternatives = "|".join(re.escape(o).replace(r"\*", "[A-Za-z0-9-]+") for o in origins)
        origin_regex_q = v.quote(f"^(?:{alternatives})$", allow_variables=True)
    return CorsView(
        origin_regex_q=origin_regex_q,
        methods_q=v.quote(", ".join(cors.allow_methods)),
        headers_q=v.quote(", ".join(cors.allow_headers)),
        expose_q=v.quote(", ".join(cors.expose_headers)) if cors.expose_headers else None,
        credentials=cors.allow_credentials,
        max_age=cors.max_age,
    )


def _hsts(settings: GlobalSettings) -> str | None:
    hsts = settings.tls.hsts
    if not hsts.enabled:
        return None
    value = f"max-age={hsts.max_age}"
    if hsts.include_subdomains:
        value += "; includeSubDomains"
    if hsts.preload:
        value += "; preload"
    return v.quote(value)


def _default_locations(config: Configuration, bodies: Bodies) -> tuple[LocationView, ...]:
    """The catch-all server's locations: host-less rules, then the default ``/``.

    The default ``/`` proxies to the default backend if there is one, else
    answers 404; a host-less ``Prefix /`` rule takes its place.
    """
    locations = config.default_server_locations
    if config.default_backend is not None and not any(_is_root_prefix(loc) for loc in locations):
        locations = (*locations, Location(path="/", backend=config.default_backend))
    return _locations("default_server", locations, "_", bodies, tls=False)
