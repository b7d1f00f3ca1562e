"""Route backendRefs -> weighted Service ports, with the ResolvedRefs reasons.

A backendRef is valid when it names a core ``Service`` (else ``InvalidKind``)
in the route's namespace or one a ReferenceGrant opens to the route's kind
(else ``RefNotPermitted``), the Service exists and has the port (else
``BackendNotFound``), and the port's ``appProtocol`` is one the route kind
can speak (else ``UnsupportedProtocol``). An invalid backendRef keeps its
weight: that share of the requests is answered with 500, as the spec asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from platformd.common.resources import GATEWAY_API_GROUP
from platformd.ingress import gateway_fields as f
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_grants import Grants, Ref
from platformd.ingress.gateway_model import WeightedBackend

__all__ = ["Resolved", "resolve"]

# appProtocol values a backend may not have: we do not originate TLS to backends
# (BackendTLSPolicy is not supported) and gRPC needs HTTP/2 cleartext.
_UNSUPPORTED = {
    "HTTPRoute": {"https", "kubernetes.io/wss", "kubernetes.io/tls"},
    "GRPCRoute": {"https", "http", "kubernetes.io/ws", "kubernetes.io/wss", "kubernetes.io/tls"},
}


@dataclass(frozen=True, slots=True)
class Resolved:
    backend: WeightedBackend  # service None when invalid
    problem: st.Condition | None = None


def _service_port(service: Mapping, port: int) -> Mapping | None:
    for entry in f.items(f.mapping(service.get("spec")).get("ports")):
        if entry.get("port") == port:
            return entry
    return None


def resolve(ref: Mapping, route_kind: str, route_namespace: str, services: Mapping[str, dict],
            grants: Grants) -> Resolved:
    weight = max(0, f.integer(ref.get("weight", 1), 1))
    port = f.integer(ref.get("port"))
    group, kind = f.string(ref.get("group")), f.string(ref.get("kind")) or "Service"
    namespace = f.string(ref.get("namespace")) or route_namespace
    name = f.string(ref.get("name"))
    key = f"{namespace}/{name}"
    invalid = WeightedBackend(None, port, weight)

    def bad(reason: str, message: str) -> Resolved:
        return Resolved(invalid, st.Condition(st.RESOLVED_REFS, False, reason, message))

    if (group, kind) != ("", "Service"):
        return bad(st.R_INVALID_KIND, f"backendRef {group}/{kind} {key} is not a core Service")
    if not grants.permits(Ref(GATEWAY_API_GROUP, route_kind, route_namespace), Ref("", "Service", namespace, name)):
        return bad(st.R_REF_NOT_PERMITTED, f"backendRef to Service {key} is not allowed by a ReferenceGrant")
    service = services.get(key)
    if service is None:
        return bad(st.R_BACKEND_NOT_FOUND, f"Service {key} not found")
    service_port = _service_port(service, port)
    if service_port is None:
        return bad(st.R_BACKEND_NOT_FOUND, f"Service {key} has no port {port}")
    app_protocol = f.string(service_port.get("appProtocol")) or None
    if app_protocol and app_protocol.lower() in _UNSUPPORTED.get(route_kind, ()):
        return bad(st.R_UNSUPPORTED_PROTOCOL,
                   f"Service {key} port {port} has appProtocol {app_protocol}, which a {route_kind} cannot use")
    return Resolved(WeightedBackend(key, port, weight, app_protocol))
