"""The read-only input of the Gateway API translation, and its options.

Like ``snapshot.Snapshot`` for Ingresses: the controller fills a
``GatewaySnapshot`` from its informer stores and hands it over whole; the
translation (``gateway_translate.build``) never talks to the API and never
mutates what it is given. Objects are the plain parsed JSON the API returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["DEFAULT_CONTROLLER_NAME", "GatewayOptions", "GatewaySnapshot", "SUPPORTED_VERSION"]

DEFAULT_CONTROLLER_NAME = "platform.io/gateway-controller"
# The Gateway API bundle this code implements (compared with the CRDs'
# gateway.networking.k8s.io/bundle-version annotation when a class is accepted).
SUPPORTED_VERSION = "v1.6.1"


@dataclass(frozen=True)
class GatewayOptions:
    """``listener_ports``: listener port -> local port for ports other than
    80 (served on ``http_port``) and 443 (on ``https_port``).
    ``tls_listener_ports``: those of ``listener_ports`` served with TLS (HTTPS
    listeners); the others serve plain HTTP.
    ``address_pool``: the addresses Gateways are given one each (empty: every
    Gateway shares ``publish_addresses``, which is what ``--publish-service`` /
    ``--publish-status-address`` / the node give Ingresses)."""

    controller_name: str = DEFAULT_CONTROLLER_NAME
    http_port: int = 80
    https_port: int = 443
    listener_ports: Mapping[int, int] = field(default_factory=dict)
    address_pool: tuple[str, ...] = ()
    publish_addresses: tuple[str, ...] = ()
    tls_listener_ports: frozenset[int] = frozenset()  # listener ports whose local port serves TLS

    def __post_init__(self) -> None:
        if not isinstance(self.listener_ports, MappingProxyType):
            object.__setattr__(self, "listener_ports", MappingProxyType(dict(self.listener_ports)))


@dataclass(frozen=True)
class GatewaySnapshot:
    """One consistent view of what the Gateway API translation reads.

    Order carries no meaning: the translation sorts what it needs.
    ``crd_versions``: the ``gateway.networking.k8s.io/bundle-version`` of the
    installed CRDs, if known (checked for ``SupportedVersion``).
    """

    gateway_classes: tuple[dict, ...] = ()
    gateways: tuple[dict, ...] = ()
    http_routes: tuple[dict, ...] = ()
    grpc_routes: tuple[dict, ...] = ()
    reference_grants: tuple[dict, ...] = ()
    services: Mapping[str, dict] = field(default_factory=dict)  # "ns/name" -> Service
    secrets: Mapping[str, dict] = field(default_factory=dict)  # "ns/name" -> Secret
    namespaces: Mapping[str, dict] = field(default_factory=dict)  # name -> Namespace
    crd_version: str | None = None

    def __post_init__(self) -> None:
        for name in ("gateway_classes", "gateways", "http_routes", "grpc_routes", "reference_grants"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("services", "secrets", "namespaces"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))
