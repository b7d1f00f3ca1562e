"""Directive lanes: per-route settings that only an nginx directive can apply.

Most per-route settings are applied by the Lua router per request. A few
live in directives that take no variables (``proxy_http_version``,
``proxy_buffers``, ``proxy_ssl_trusted_certificate``, ``mirror`` ...). A
route that sets any of them carries them as ``Location.lane_directives``:
sorted, validated ``(directive, value)`` pairs. Such a route is proxied by a
generated named location: its base lane (``@platform_proxy_on``/``_off``,
``@platform_grpc``/``grpcs``) plus those directives. nginx.conf gets one
lane per distinct (base, directives) set in use, so a reload happens only
when a set first appears (or the last route using one goes); the routes
themselves stay data.

Until nginx runs a lane, the routes needing it are held back
(``hold_back``): the host keeps the version the running configuration
serves, or is not served yet. A route is never served without its
directives.

Values: ``DIRECTIVES`` maps each allowed directive to its validator, which
returns the text written after the directive name (already safe for
nginx.conf). Directives in ``FILE_DIRECTIVES`` take file content (a PEM
bundle) as their value; the view writes it to a content-addressed file in
the state directory (``files``) and the directive names that file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from platformd.ingress import custom_errors, mirror, traffic
from platformd.ingress import validate as v
from platformd.ingress.model import BackendProtocol, Configuration, GlobalSettings, Location, Server

__all__ = [
    "DIRECTIVES", "FILE_DIRECTIVES", "LaneIndex", "LaneSpec", "base_lane", "directives", "files", "hold_back", "lane_name",
    "used",
]


def _on_off(field: str, text: str) -> str:
    if text not in ("on", "off"):
        raise v.ValidationError(field, text, "must be on or off")
    return text


def _size(field: str, text: str) -> str:
    return v.size(field, text)


def _count(low: int, high: int) -> Callable[[str, str], str]:
    def check(field: str, text: str) -> str:
        if not re.fullmatch(r"[0-9]{1,9}", text) or not low <= int(text) <= high:
            raise v.ValidationError(field, text, f"must be an integer from {low} to {high}")
        return str(int(text))
    return check


def _http_version(field: str, text: str) -> str:
    if text not in ("1.0", "1.1"):
        raise v.ValidationError(field, text, "must be 1.0 or 1.1")
    return text


def _buffers(field: str, text: str) -> str:
    """``<number> <size>`` as proxy_buffers takes it."""
    parts = text.split(" ")
    if len(parts) != 2:
        raise v.ValidationError(field, text, "must be '<number> <size>'")
    return f"{_count(1, 1024)(field, parts[0])} {v.size(field, parts[1])}"


_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]{1,40}-----\n[A-Za-z0-9+/=\n]+-----END [A-Z0-9 ]{1,40}-----\n?")


def _pem(field: str, text: str) -> str:
    """PEM blocks only (the certificate modules checked what they mean)."""
    body = text.strip() + "\n"
    if len(body) > 1 << 20 or not re.fullmatch(rf"(?:{_PEM.pattern}\s*)+", body):
        raise v.ValidationError(field, "<pem>", "must be PEM blocks (at most 1 MiB)")
    return body


def _mirror_uri(field: str, text: str) -> str:
    """One of the template's fixed mirror locations (mirror.py)."""
    if not mirror.location_uri(text):
        raise v.ValidationError(field, text, "must be one of the fixed mirror locations")
    return text


def _ssl_name(field: str, text: str) -> str:
    return v.hostname(field, text, wildcard=False)


def _ssl_protocols(field: str, text: str) -> str:
    from platformd.ingress.backend_tls import protocols

    return protocols(field, text)


# directive -> validator(field, text) -> the text nginx.conf gets after the name.
# Each entry is a directive that takes no variables and that some route
# setting needs; add one only with the setting that needs it.
DIRECTIVES: dict[str, Callable[[str, str], str]] = {
    "proxy_http_version": _http_version,
    "proxy_request_buffering": _on_off,
    "client_body_buffer_size": _size,
    "proxy_buffer_size": _size,
    "proxy_buffers": _buffers,
    "proxy_busy_buffers_size": _size,
    "proxy_max_temp_file_size": _size,
    "proxy_ssl_verify": _on_off,
    "proxy_ssl_verify_depth": _count(0, 100),
    "proxy_ssl_server_name": _on_off,
    "proxy_ssl_trusted_certificate": _pem,
    "proxy_ssl_certificate": _pem,
    "proxy_ssl_certificate_key": _pem,
    "mirror": _mirror_uri,
    "mirror_request_body": _on_off,
    # backend TLS (backend_tls.py): the rest of proxy_ssl_*, and grpc_ssl_* for GRPCS
    "proxy_ssl_name": _ssl_name,
    "proxy_ssl_protocols": _ssl_protocols,
    "proxy_ssl_ciphers": v.ssl_ciphers,
    "grpc_ssl_verify": _on_off,
    "grpc_ssl_verify_depth": _count(0, 100),
    "grpc_ssl_server_name": _on_off,
    "grpc_ssl_name": _ssl_name,
    "grpc_ssl_protocols": _ssl_protocols,
    "grpc_ssl_ciphers": v.ssl_ciphers,
    "grpc_ssl_trusted_certificate": _pem,
    "grpc_ssl_certificate": _pem,
    "grpc_ssl_certificate_key": _pem,
}
# proxy-next-upstream conditions and timeout, proxy-redirect-*, proxy-cookie-*,
# limit-rate-after, enable-access-log (platformd.ingress.traffic).
DIRECTIVES.update(traffic.LANE_DIRECTIVES)
# custom-http-errors (platformd.ingress.custom_errors).
DIRECTIVES.update(custom_errors.LANE_DIRECTIVES)

# Their value is file content; nginx.conf names a file holding it.
FILE_DIRECTIVES = frozenset({"proxy_ssl_trusted_certificate", "proxy_ssl_certificate", "proxy_ssl_certificate_key",
                             "grpc_ssl_trusted_certificate", "grpc_ssl_certificate", "grpc_ssl_certificate_key"})

# Directives that are repeated rather than set once (the value is one line).
# A directive listed here may appear several times in a set: `mirror`, one
# per copy of a request (mirror.lane_directives).
REPEATABLE: frozenset[str] = frozenset({"mirror"})


def directives(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Validated, sorted ``(directive, value)`` pairs for ``Location.lane_directives``.
    Raises ValidationError naming the directive for an unknown directive or a bad value."""
    out: dict[tuple[str, str], None] = {}
    seen: set[str] = set()
    for name, value in pairs:
        check = DIRECTIVES.get(name)
        if check is None:
            raise v.ValidationError("lane_directives", name, "is not a lane directive")
        if name in seen and name not in REPEATABLE:
            raise v.ValidationError("lane_directives", name, "is given twice")
        seen.add(name)
        out[(name, check(name, value))] = None
    return tuple(sorted(out))


def base_lane(loc: Location, settings: GlobalSettings) -> str:
    """The fixed lane that proxies ``loc`` without directives of its own
    (``@platform_proxy_on``/``_off`` by response buffering, or gRPC)."""
    proxy = loc.proxy
    if proxy.protocol is BackendProtocol.GRPC:
        return "@platform_grpc"
    if proxy.protocol is BackendProtocol.GRPCS:
        return "@platform_grpcs"
    buffering = settings.buffering if proxy.buffering is None else proxy.buffering
    return "@platform_proxy_" + ("on" if buffering else "off")


@dataclass(frozen=True, order=True)
class LaneSpec:
    """One generated lane: its base lane and the directives it adds."""

    base: str
    directives: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return lane_name(self.base, self.directives)


def lane_name(base: str, pairs: tuple[tuple[str, str], ...]) -> str:
    """The named location of ``base`` + ``pairs``: a digest, so the same set
    always gets the same name (in nginx.conf and in the route data)."""
    digest = hashlib.sha256(repr((base, pairs)).encode()).hexdigest()[:16]
    return f"@platform_lane_{digest}"


def used(config: Configuration, index: LaneIndex | None = None) -> tuple[LaneSpec, ...]:
    """The distinct lanes ``config``'s routes need, sorted (nginx.conf's order).
    ``index``: the caller's ``LaneIndex`` (cost proportional to the Servers
    that changed since its last configuration), or None (a fresh walk)."""
    return (index or LaneIndex()).used(config)


def _lanes_of(locations: Iterable[Location], settings: GlobalSettings) -> frozenset[LaneSpec]:
    return frozenset(LaneSpec(base_lane(loc, settings), loc.lane_directives)
                     for loc in locations if loc.lane_directives)


def _all_servers(config: Configuration) -> tuple[Server, ...]:
    servers = config.servers
    for table in config.bound:
        servers += table.servers
    return servers


class LaneIndex:
    """The lanes each Server needs, kept from one configuration to the next.

    Walking every location of 10,000 hosts three times per apply cost ~10 ms
    per route change; a derived configuration keeps its unchanged Servers as
    the very same objects (frozen), so only Servers that are new by identity
    are walked: the Servers of the last configuration seen and of the new one
    are compared as sets of ids (C speed, ~0.3 ms at 10,000).

    Contract: results equal a fresh walk (``tests/ingress/test_lanes.py``
    compares them over generated changes). Bound: it holds the Servers of the
    last configuration it saw (alive anyway: that is the running or desired
    one) and an entry per Server that needs a lane. Owner: one configuration
    stream (``caches.Caches.lanes``); not thread-safe (the applier's alone).
    """

    def __init__(self) -> None:
        self._servers: tuple[Server, ...] = ()  # those of the last configuration seen (pins their ids)
        self._buffering: object = None  # the setting base_lane reads; a change recomputes everything
        self._needing: dict[int, tuple[Server, frozenset[LaneSpec]]] = {}  # Servers needing lanes, by id

    def _update(self, config: Configuration) -> None:
        servers = _all_servers(config)
        settings = config.settings
        if settings.buffering != self._buffering:
            self._servers, self._needing, self._buffering = (), {}, settings.buffering
        if servers is self._servers:
            return
        old, new = set(map(id, self._servers)), dict(zip(map(id, servers), servers))
        for gone in old.difference(new):
            self._needing.pop(gone, None)
        for added in new.keys() - old:
            server = new[added]
            need = _lanes_of(server.locations, settings)
            if need:
                self._needing[added] = (server, need)
        self._servers = servers

    def needs(self, config: Configuration, server: Server) -> frozenset[LaneSpec]:
        """The lanes ``server`` (one of ``config``'s) needs."""
        self._update(config)
        hit = self._needing.get(id(server))
        return hit[1] if hit is not None and hit[0] is server else frozenset()

    def needing(self, config: Configuration) -> list[tuple[Server, frozenset[LaneSpec]]]:
        """The Servers of ``config`` (top level and bound) that need a lane, with those lanes."""
        self._update(config)
        return list(self._needing.values())

    def used(self, config: Configuration) -> tuple[LaneSpec, ...]:
        self._update(config)
        seen: set[LaneSpec] = set(_lanes_of(config.default_server_locations, config.settings))
        for table in config.bound:
            seen |= _lanes_of(table.any_host, config.settings)
        for _, need in self._needing.values():
            seen |= need
        return tuple(sorted(seen))


def file_path(directory: Path, content: str) -> Path:
    """Where the file of ``content`` lives (content-addressed)."""
    return directory / (hashlib.sha256(content.encode()).hexdigest()[:32] + ".pem")


def files(specs: Iterable[LaneSpec], directory: Path) -> dict[Path, str]:
    """The files the lanes' file directives name: path -> content."""
    out: dict[Path, str] = {}
    for spec in specs:
        for name, value in spec.directives:
            if name in FILE_DIRECTIVES:
                out[file_path(directory, value)] = value
    return out


def write_files(wanted: Mapping[Path, str]) -> None:
    """Write the lane files that are missing (0600; content-addressed, so an
    existing file is already right). Files no lane names are left: nginx may
    still run a configuration naming them."""
    for path, content in wanted.items():
        if path.exists():
            continue
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = tmp.open("w", encoding="utf-8")
        try:
            tmp.chmod(0o600)
            fd.write(content)
        finally:
            fd.close()
        tmp.replace(path)


def _needs(server_locations: Iterable[Location], settings: GlobalSettings, running: frozenset[LaneSpec]) -> bool:
    return any(loc.lane_directives and LaneSpec(base_lane(loc, settings), loc.lane_directives) not in running
               for loc in server_locations)


def hold_back(desired: Configuration, running: Configuration | None,
              running_lanes: Iterable[LaneSpec], index: LaneIndex | None = None) -> tuple[Configuration, tuple[str, ...]]:
    """``desired`` without what needs a lane nginx does not run yet: such a
    host keeps the running configuration's version of it when that one needs
    no missing lane, else it is left out; such host-less locations are left
    out. Returns the configuration and the host names held back.
    ``index``: as for ``used``."""
    have = frozenset(running_lanes)
    settings = desired.settings
    index = index or LaneIndex()
    missing = {id(server) for server, need in index.needing(desired) if not need <= have}
    if missing:
        missing &= set(map(id, desired.servers))  # bound tables are not held back here
    defaults = desired.default_server_locations
    if not missing and not _needs(defaults, settings, have):
        return desired, ()
    previous: dict[str, Server] = {}
    if running is not None:
        previous = {server.hostname: server for server in running.servers}
    servers: list[Server] = []
    held: list[str] = []
    for server in desired.servers:
        if id(server) not in missing:
            servers.append(server)
            continue
        held.append(server.hostname)
        old = previous.get(server.hostname)
        if old is not None and not _needs(old.locations, settings, have):
            servers.append(old)
    if _needs(defaults, settings, have):
        held.append("_")
        defaults = tuple(loc for loc in defaults if not _needs((loc,), settings, have))
    if not held:
        return desired, ()
    return replace(desired, servers=tuple(servers), default_server_locations=defaults), tuple(held)
