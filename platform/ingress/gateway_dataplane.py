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

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from platformd.ingress import validate as v
from platformd.ingress.gateway_lowering import Lowered, merge, merge_locations
from platformd.ingress.model import BoundHosts, Certificate, Configuration, Server

__all__ = ["GatewayPlane", "extend"]

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
        desired = with_listen_ports(desired, self.listen_ports)
        try:
            merged, self.left_out = extend(desired, lowered)
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
