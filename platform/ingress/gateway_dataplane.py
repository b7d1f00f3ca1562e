"""Serving the lowered Gateway routes: the Ingress controller's data plane,
with them merged into every configuration it submits.

The Ingress controller owns the one ``DataPlane`` and its sync loop; the
Gateway loop does not submit configurations of its own (two writers would
undo each other). ``GatewayPlane`` stands in for the ``DataPlane`` the
Ingress controller is given: ``submit(config)`` merges the latest lowered
Gateway Servers, Backends and Certificates (``publish``) into ``config``
and hands that to the real plane; everything else is the real plane's.
When a result comes back ok, ``on_applied(version)`` says which published
version is now served (the Gateway loop turns that into ``Programmed``).

Merging never breaks what the Ingresses serve: a Backend or Certificate the
configuration already has is kept (an endpoint sync patches the Ingress
copy, which has the same endpoints; a Certificate also gets the Gateway's
host names); Gateway hosts on a pool address or a mapped port go to
``Configuration.bound`` (joined with the Ingress paths of the same name on
the shared ports), listeners without hostname to the catch-all; the mapped
listener ports (``listen_ports``) are added to every configuration's
``listen`` settings; a Gateway Server whose name another
Server already serves as an alias is left out (and reported); if the merged
configuration is still refused by validation, the Ingress configuration is
submitted alone and ``last_error`` says why.
"""

from __future__ import annotations

import bisect
import logging
import operator
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from platformd.ingress import validate as v
from platformd.ingress.gateway_lowering import Lowered, merge, merge_locations, merge_server
from platformd.ingress.model import BoundHosts, Certificate, Configuration, Server

__all__ = ["GatewayPlane", "Merged", "extend", "extended", "splice"]

log = logging.getLogger(__name__)


def extend(config: Configuration, lowered: Lowered) -> tuple[Configuration, tuple[str, ...]]:
    """``config`` with ``lowered`` merged in, and the Gateway host names left out
    because another Server already serves them as an alias. Raises
    ``ValidationError`` when the result is not a valid Configuration."""
    if not (lowered.servers or lowered.bound or lowered.any_host or lowered.certificates):
        return config, ()
    aliases = {alias for server in config.servers for alias in server.aliases}
    servers = tuple(s for s in lowered.servers if s.hostname not in aliases)
    left_out = tuple(s.hostname for s in lowered.servers if s.hostname in aliases)
    backend_names = {b.name for b in config.backends}
    extended = replace(
        config, servers=merge(config.servers, servers),
        backends=config.backends + tuple(b for b in lowered.backends if b.name not in backend_names),
        certificates=_certificates(config.certificates, lowered.certificates),
        default_server_locations=merge_locations(config.default_server_locations, lowered.any_host),
        bound=_with_ingress_paths(config, lowered.bound),
        default_certificate=config.default_certificate or lowered.any_certificate,
        gateway_wildcards=tuple(s for s in lowered.wildcards if s.hostname not in aliases))
    return extended, left_out


@dataclass(frozen=True)
class Merged:
    """One ``extend``: its inputs (``config``, ``lowered``), its result and the
    host names it left out, and the alias names of ``config`` (for ``splice``)."""

    config: Configuration
    lowered: Lowered
    result: Configuration
    left_out: tuple[str, ...]
    aliases: frozenset[str]


def extended(config: Configuration, lowered: Lowered, last: Merged | None = None) -> Merged:
    """``extend(config, lowered)`` as a ``Merged``: spliced into ``last``
    where that is the same Ingress configuration (``splice``), else in full.
    Raises ``ValidationError`` as ``extend`` does."""
    if last is not None and last.config is config:
        spliced = splice(last, lowered)
        if spliced is not None:
            return spliced
    result, left_out = extend(config, lowered)
    return Merged(config, lowered, result, left_out, _aliases(config))


def _aliases(config: Configuration) -> frozenset[str]:
    return frozenset(alias for server in config.servers for alias in server.aliases)


#: Beyond this many Servers and Backends changed, a splice is no cheaper than a merge.
SPLICE_LIMIT = 500


def splice(last: Merged, lowered: Lowered) -> Merged | None:
    """``last`` with its lowering replaced by ``lowered``, touching only the
    Servers and Backends that are not the very objects ``last.lowered`` had
    (the lowering keeps unchanged ones: gateway_lowering.LoweringCache);
    equal to ``extend(last.config, lowered)``. None (merge in full) when
    more than the Servers and Backends changed (bound tables, the any-host
    locations, certificates, the wildcard Servers) or too many did. At 10,000 routes a merge
    costs ~7 ms per route change, a splice well under one."""
    old = last.lowered
    if lowered is old:
        return last
    if not (_same(old.bound, lowered.bound) and _same(old.any_host, lowered.any_host)
            and _same(old.certificates, lowered.certificates) and old.any_certificate == lowered.any_certificate
            and _same(old.wildcards, lowered.wildcards)):
        return None
    gone_servers, new_servers = _difference(old.servers, lowered.servers)
    gone_backends, new_backends = _difference(old.backends, lowered.backends)
    if len(gone_servers) + len(new_servers) + len(gone_backends) + len(new_backends) > SPLICE_LIMIT:
        return None
    config, result, aliases = last.config, last.result, last.aliases
    servers = list(result.servers)
    for server in gone_servers:  # the host goes back to what the Ingresses alone serve there, if anything
        if server.hostname not in aliases:
            at = bisect.bisect_left(servers, server.hostname, key=_HOSTNAME)
            ingress = _named(config.servers, server.hostname, _HOSTNAME)
            if ingress is None:
                del servers[at]
            else:
                servers[at] = ingress
    for server in new_servers:
        if server.hostname not in aliases:
            at = bisect.bisect_left(servers, server.hostname, key=_HOSTNAME)
            merged = merge_server(_named(config.servers, server.hostname, _HOSTNAME), server)
            if at < len(servers) and servers[at].hostname == server.hostname:
                servers[at] = merged
            else:
                servers.insert(at, merged)
    backends = list(result.backends)
    for backend in gone_backends:
        if _named(config.backends, backend.name, _NAME) is None:  # else the Ingress copy is kept
            at = bisect.bisect_left(backends, backend.name, key=_NAME)
            if at < len(backends) and backends[at].name == backend.name:
                del backends[at]
    for backend in new_backends:
        if _named(config.backends, backend.name, _NAME) is None:
            at = bisect.bisect_left(backends, backend.name, key=_NAME)
            backends.insert(at, backend)
    left_out = tuple(s.hostname for s in lowered.servers if s.hostname in aliases) if aliases else ()
    return Merged(config, lowered, replace(result, servers=tuple(servers), backends=tuple(backends)), left_out,
                  aliases)


_HOSTNAME = operator.attrgetter("hostname")
_NAME = operator.attrgetter("name")


def _same(a, b) -> bool:
    return a is b or a == b


def _difference(old: tuple, new: tuple) -> tuple[list, list]:
    """(items of ``old`` that are not in ``new``, items of ``new`` not in ``old``), by identity.

    The two are sorted alike and mostly the very same objects: the common
    head and tail are found with C loops (``map(operator.is_, ...)``), and
    only what lies between is compared item by item."""
    if old is new:
        return [], []
    shortest = min(len(old), len(new))
    head = list(map(operator.is_, old, new))
    start = head.index(False) if False in head else shortest
    tail = list(map(operator.is_, reversed(old), reversed(new)))
    end = min(tail.index(False) if False in tail else shortest, shortest - start)
    old, new = old[start:len(old) - end], new[start:len(new) - end]
    old_ids, new_ids = set(map(id, old)), set(map(id, new))
    return [x for x in old if id(x) not in new_ids], [x for x in new if id(x) not in old_ids]


def _named(items: tuple, name: str, key):
    """The item of ``items`` (sorted by ``key``, keys unique) whose key is ``name``, or None."""
    at = bisect.bisect_left(items, name, key=key)
    return items[at] if at < len(items) and key(items[at]) == name else None


def _certificates(ingress: tuple[Certificate, ...], gateway: tuple[Certificate, ...]) -> tuple[Certificate, ...]:
    """Both, one per id: the Ingress copy of a Secret both use, also serving the
    Gateway's host names (a host of a bound table has no Server among the
    Ingress ones to point at it)."""
    by_id = {c.id: c for c in ingress}
    for cert in gateway:
        current = by_id.get(cert.id)
        if current is None:
            by_id[cert.id] = cert
        elif not set(cert.hostnames) <= set(current.hostnames):
            by_id[cert.id] = replace(current, hostnames=(*current.hostnames, *cert.hostnames))
    return tuple(by_id.values())


def _with_ingress_paths(config: Configuration, tables: tuple[BoundHosts, ...]) -> tuple[BoundHosts, ...]:
    """``tables`` where a Gateway host on --http-port / --https-port also has
    the paths of the Ingress host of the same name (the route's location
    replacing the Ingress's for the same match and path, as ``merge`` does):
    on one address and port, one name is one host whichever API made it."""
    listen = config.settings.listen
    ingress = {name: server for server in config.servers for name in server.names}
    out = []
    for table in tables:
        if table.port in (listen.http_port, listen.https_port) and any(s.hostname in ingress for s in table.servers):
            servers = tuple(_joined(ingress.get(s.hostname), s) for s in table.servers)
            table = replace(table, servers=servers)
        out.append(table)
    return tuple(out)


def _joined(ingress: Server | None, gateway: Server) -> Server:
    if ingress is None:
        return gateway
    return replace(gateway, locations=merge_locations(ingress.locations, gateway.locations),
                   tls=gateway.tls or ingress.tls, tls_certificate=gateway.tls_certificate or ingress.tls_certificate)


def with_listen_ports(config: Configuration, ports: tuple[tuple[tuple[int, int], ...], ...]) -> Configuration:
    """``config`` whose nginx.conf also listens on the mapped Gateway listener
    ports (``--gateway-listener-port``; (local, listener) pairs, plain and
    TLS): fixed at start, so never a reload."""
    listen = config.settings.listen
    if (listen.gateway_ports, listen.gateway_tls_ports) == ports:
        return config
    listen = replace(listen, gateway_ports=ports[0], gateway_tls_ports=ports[1])
    return replace(config, settings=replace(config.settings, listen=listen))


class GatewayPlane:
    """See the module docstring. ``plane``: the real ``DataPlane``."""

    def __init__(self, plane, on_applied: Callable[[int], None] | None = None,
                 listen_ports: tuple[tuple[tuple[int, int], ...], ...] = ((), ())) -> None:
        self._plane = plane
        self.listen_ports = listen_ports
        self.on_applied = on_applied
        self._lock = threading.Lock()
        self._published: tuple[int, Lowered] = (0, Lowered())  # replaced whole
        # The last merge, and the last configuration given listen ports: submit
        # is called under the Ingress controller's model lock, one at a time.
        self._merged: Merged | None = None
        self._listened: tuple[Configuration, Configuration] | None = None
        self.last_error: str | None = None
        self.left_out: tuple[str, ...] = ()

    def __getattr__(self, name: str):
        return getattr(self._plane, name)

    def publish(self, version: int, lowered: Lowered) -> None:
        """Merge ``lowered`` into every configuration submitted from now on."""
        with self._lock:
            self._published = (version, lowered)

    def submit(self, desired: Configuration):
        version, lowered = self._published
        if self._listened is None or self._listened[0] is not desired:  # the same object each re-apply
            self._listened = (desired, with_listen_ports(desired, self.listen_ports))
        desired = self._listened[1]
        try:
            self._merged = extended(desired, lowered, self._merged)
            merged, self.left_out = self._merged.result, self._merged.left_out
            self.last_error = None
        except v.ValidationError as exc:
            merged, self.last_error = desired, f"Gateway routes left out: {exc}"
            log.warning("%s", self.last_error)
            version = -1  # nothing of the Gateway table is served by this configuration
        waiter = self._plane.submit(merged)

        def wait(superseded=None):
            result = waiter(superseded) if superseded is not None else waiter()
            if result is not None and result.ok and version >= 0 and self.on_applied is not None:
                self.on_applied(version)
            return result
        return wait
