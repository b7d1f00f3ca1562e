"""Command-line flags and start-up of the Gateway API part of ``platformd ingress``.

Kept apart from main.py so the Ingress start-up reads as before; main calls
``add_arguments``, ``create`` (None: Gateway API off or its CRDs missing,
said in one log line) and, with an API server, ``status_runner``.

Flags:

``--gateway-api auto|off``: auto (default) serves Gateway API objects when
  their CRDs are installed (checked once at start);
``--gateway-controller-name``: the GatewayClass controllerName that is ours;
``--gateway-address-pool``: addresses (list and/or CIDRs) to give Gateways
  one each (see gateway_addresses);
``--gateway-listener-port LISTENER=LOCAL[/https]``: serve listeners of port
  LISTENER on local port LOCAL, as plain HTTP or with "/https" TLS (repeatable;
  80 and 443 map to --http-port/--https-port). nginx.conf listens on LOCAL
  from the start, so a Gateway using it never reloads nginx.
"""

from __future__ import annotations

import argparse
import logging
from typing import NamedTuple

from platformd.common.runner import BoundedFrequencyRunner
from platformd.ingress.gateway_addresses import parse_pool
from platformd.ingress.gateway_controller import GatewayController, Serving, discover
from platformd.ingress.gateway_dataplane import GatewayPlane
from platformd.ingress.gateway_input import DEFAULT_CONTROLLER_NAME, GatewayOptions
from platformd.ingress.gateway_statuswriter import GatewayStatusWriter

__all__ = ["add_arguments", "create", "options_of", "publish_addresses_of", "status_runner", "wrap_plane"]

log = logging.getLogger(__name__)

#: Status is re-checked at least this often (someone else may overwrite it).
STATUS_RESYNC = 60.0


def _pool(text: str) -> tuple[str, ...]:
    try:
        return parse_pool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class ListenerPort(NamedTuple):
    listener: int
    local: int
    tls: bool = False


def _listener_port(text: str) -> ListenerPort:
    listener, sep, local = text.partition("=")
    local, slash, scheme = local.partition("/")
    try:
        pair = (int(listener), int(local))
    except ValueError:
        pair = (0, 0)
    if not sep or not all(1 <= p <= 65535 for p in pair) or (slash and scheme != "https"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected LISTENER=LOCAL or LISTENER=LOCAL/https, two ports")
    return ListenerPort(*pair, tls=bool(slash))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gateway-api", choices=("auto", "off"), default="auto",
                   help="serve Gateway API objects when their CRDs are installed (default auto)")
    p.add_argument("--gateway-controller-name", default=DEFAULT_CONTROLLER_NAME,
                   help=f"GatewayClass controllerName that is ours (default {DEFAULT_CONTROLLER_NAME})")
    p.add_argument("--gateway-address-pool", type=_pool, default=(),
                   help="addresses this data plane answers on, one per Gateway (list and/or CIDRs)")
    p.add_argument("--gateway-listener-port", type=_listener_port, action="append", default=[],
                   metavar="LISTENER=LOCAL[/https]",
                   help="serve Gateway listeners of port LISTENER on local port LOCAL (plain HTTP, or TLS with /https)")


def options_of(args: argparse.Namespace) -> GatewayOptions:
    ports = {p.listener: p.local for p in args.gateway_listener_port}
    locals_used = [args.http_port, args.https_port, *ports.values()]
    if len(set(locals_used)) != len(locals_used) or len(ports) != len(args.gateway_listener_port):
        raise ValueError("--gateway-listener-port maps two listener ports to one local port, or one twice")
    return GatewayOptions(controller_name=args.gateway_controller_name, http_port=args.http_port,
                          https_port=args.https_port, listener_ports=ports, address_pool=args.gateway_address_pool,
                          tls_listener_ports=frozenset(p.listener for p in args.gateway_listener_port if p.tls))


def wrap_plane(args: argparse.Namespace, plane):
    """What the Ingress controller submits through: a ``GatewayPlane`` around
    ``plane`` (it merges the Gateway routes in), or ``plane`` when off."""
    if args.gateway_api == "off":
        return plane
    ports = args.gateway_listener_port
    return GatewayPlane(plane, listen_ports=(tuple(sorted((p.local, p.listener) for p in ports if not p.tls)),
                                             tuple(sorted((p.local, p.listener) for p in ports if p.tls))))


def create(args: argparse.Namespace, source, api, factory_class, ingress_controller, publish_addresses,
           plane: GatewayPlane | None = None):
    """The GatewayController, or None (off, or the CRDs are not installed).

    ``factory_class(source, namespace=..., transform=...)`` builds its own
    InformerFactory (see gateway_controller: a failing Gateway API informer
    must not hold up Ingresses). ``plane``: the ``GatewayPlane`` the Ingress
    controller submits through (None: the table is not served)."""
    if args.gateway_api == "off":
        return None
    if api is not None:
        missing = discover(api)
        if missing is not None:
            log.info("Gateway API CRDs are not installed (%s): serving Ingresses only; "
                     "install the Gateway API v1.6 standard CRDs and restart to serve Gateways", missing)
            return None
    from platformd.common.informer import drop_field_management
    factory = factory_class(source, namespace=args.watch_namespace, transform=drop_field_management)
    serving = None
    if isinstance(plane, GatewayPlane):
        serving = Serving(plane, ingress_controller.trigger, ingress_controller.slices)
    controller = GatewayController(factory, options_of(args), services=ingress_controller.services,
                                   secrets=ingress_controller.secrets, publish_addresses=publish_addresses,
                                   serving=serving)
    log.info("Gateway API: serving GatewayClasses with controllerName %s", args.gateway_controller_name)
    return controller


def status_runner(args, api, gateway: GatewayController,
                  is_leader) -> tuple[BoundedFrequencyRunner, GatewayStatusWriter]:
    """The status writer and its runner, woken by every translation."""
    writer = GatewayStatusWriter(api, args.gateway_controller_name, is_leader=is_leader,
                                 translation=lambda: gateway.translation, get=gateway.get, keys=gateway.keys)
    runner = BoundedFrequencyRunner("gateway-status", writer.sync, 1.0, STATUS_RESYNC, 5.0)

    def on_translated(_translation, routes) -> None:
        writer.changed(routes)  # what to look at, then the wake-up
        runner.run()
    gateway.on_translated = on_translated
    return runner, writer


def publish_addresses_of(args: argparse.Namespace, status_writer) -> tuple[str, ...]:
    """What Gateways report without a pool: the Ingress status addresses."""
    if status_writer is not None:
        return tuple(e.get("ip") or e.get("hostname") for e in status_writer.addresses())
    text = args.publish_status_address or ""
    return tuple(a.strip() for a in text.split(",") if a.strip())

