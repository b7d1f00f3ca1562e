"""Gateway API status: the conditions translation decides, and the status
bodies written for them.

Translation produces, per object, plain frozen values (``Condition``s with
``observed_generation``); ``render_*`` turns one into the ``status`` body to
write, given what the object shows now:

* ``lastTransitionTime`` is kept from the current condition of the same type
  when its status did not change (else ``now``), so an unchanged status
  renders byte-identical and nothing is written;
* a route's ``status.parents`` keeps the entries of other controllers (their
  ``controllerName`` differs) and replaces ours; parents we stopped serving
  are dropped.

Condition types and reasons are the spec's names (gateway-api apis/v1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from platformd.ingress import gateway_fields as fields

__all__ = [
    "ClassStatus", "Condition", "GatewayStatus", "ListenerStatus", "ParentStatus", "RouteStatus",
    "not_programmed", "render_class", "render_gateway", "render_route",
]

# Condition types
ACCEPTED = "Accepted"
PROGRAMMED = "Programmed"
RESOLVED_REFS = "ResolvedRefs"
CONFLICTED = "Conflicted"
SUPPORTED_VERSION = "SupportedVersion"
PARTIALLY_INVALID = "PartiallyInvalid"

# Reasons (shared names first)
R_ACCEPTED = "Accepted"
R_PROGRAMMED = "Programmed"
R_RESOLVED_REFS = "ResolvedRefs"
R_PENDING = "Pending"
R_INVALID = "Invalid"
R_NO_CONFLICTS = "NoConflicts"
# GatewayClass
R_INVALID_PARAMETERS = "InvalidParameters"
R_SUPPORTED_VERSION = "SupportedVersion"
R_UNSUPPORTED_VERSION = "UnsupportedVersion"
# Gateway
R_LISTENERS_NOT_VALID = "ListenersNotValid"
R_UNSUPPORTED_ADDRESS = "UnsupportedAddress"
R_ADDRESS_NOT_ASSIGNED = "AddressNotAssigned"
R_ADDRESS_NOT_USABLE = "AddressNotUsable"
# Listener
R_PORT_UNAVAILABLE = "PortUnavailable"
R_UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"
R_HOSTNAME_CONFLICT = "HostnameConflict"
R_PROTOCOL_CONFLICT = "ProtocolConflict"
R_INVALID_CERTIFICATE_REF = "InvalidCertificateRef"
R_INVALID_ROUTE_KINDS = "InvalidRouteKinds"
R_REF_NOT_PERMITTED = "RefNotPermitted"
# Route
R_NOT_ALLOWED_BY_LISTENERS = "NotAllowedByListeners"
R_NO_MATCHING_LISTENER_HOSTNAME = "NoMatchingListenerHostname"
R_NO_MATCHING_PARENT = "NoMatchingParent"
R_UNSUPPORTED_VALUE = "UnsupportedValue"
R_BACKEND_NOT_FOUND = "BackendNotFound"
R_INVALID_KIND = "InvalidKind"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class ClassStatus:
    generation: int
    conditions: tuple[Condition, ...]
    supported_features: tuple[str, ...] = ()  # gateway_features.SUPPORTED when accepted


@dataclass(frozen=True, slots=True)
class ListenerStatus:
    name: str
    supported_kinds: tuple[tuple[str, str], ...]  # (group, kind)
    attached_routes: int
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class GatewayStatus:
    generation: int
    addresses: tuple[tuple[str, str], ...]  # (type, value)
    conditions: tuple[Condition, ...]
    listeners: tuple[ListenerStatus, ...]


@dataclass(frozen=True, slots=True)
class ParentStatus:
    parent_ref: tuple[tuple[str, object], ...]  # the route's parentRef as written, as sorted items
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class RouteStatus:
    generation: int
    parents: tuple[ParentStatus, ...]


def _condition_dicts(conditions: Iterable[Condition], generation: int, current: Iterable[Mapping],
                     now: str) -> list[dict]:
    before = {fields.string(c.get("type")): c for c in fields.items(current)}
    out = []
    for c in conditions:
        status = "True" if c.status else "False"
        old = before.get(c.type)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        out.append({"type": c.type, "status": status, "reason": c.reason, "message": c.message,
                    "observedGeneration": generation, "lastTransitionTime": since or now})
    return out


def _current(obj: Mapping) -> Mapping:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def render_class(status: ClassStatus, obj: Mapping, now: str) -> dict:
    current = _current(obj)
    body = dict(current)
    body["conditions"] = _condition_dicts(status.conditions, status.generation,
                                          current.get("conditions"), now)
    if status.supported_features:
        body["supportedFeatures"] = [{"name": name} for name in status.supported_features]
    else:
        body.pop("supportedFeatures", None)
    return body


def render_gateway(status: GatewayStatus, obj: Mapping, now: str) -> dict:
    current = _current(obj)
    listeners_now = {fields.string(entry.get("name")): entry for entry in fields.items(current.get("listeners"))}
    body = {
        "conditions": _condition_dicts(status.conditions, status.generation, current.get("conditions"), now),
        "listeners": [{
            "name": listener.name,
            "supportedKinds": [{"group": g, "kind": k} for g, k in listener.supported_kinds],
            "attachedRoutes": listener.attached_routes,
            "conditions": _condition_dicts(listener.conditions, status.generation,
                                           fields.mapping(listeners_now.get(listener.name)).get("conditions"), now),
        } for listener in status.listeners],
    }
    if status.addresses:
        body["addresses"] = [{"type": t, "value": v} for t, v in status.addresses]
    return body


def _same_parent(a: Mapping, b: Mapping) -> bool:
    keys = ("group", "kind", "namespace", "name", "sectionName", "port")
    defaults = {"group": "gateway.networking.k8s.io", "kind": "Gateway"}
    return all((a.get(k) or defaults.get(k)) == (b.get(k) or defaults.get(k)) for k in keys)


def render_route(status: RouteStatus, obj: Mapping, controller_name: str, now: str) -> dict:
    current = _current(obj)
    existing = fields.items(current.get("parents"))
    others = [p for p in existing if p.get("controllerName") != controller_name]
    ours_now = [p for p in existing if p.get("controllerName") == controller_name]
    parents = []
    for parent in status.parents:
        ref = dict(parent.parent_ref)
        old = next((p for p in ours_now if _same_parent(fields.mapping(p.get("parentRef")), ref)), {})
        parents.append({"parentRef": ref, "controllerName": controller_name,
                        "conditions": _condition_dicts(parent.conditions, status.generation,
                                                       old.get("conditions"), now)})
    return {**current, "parents": others + parents}


def not_programmed(status: GatewayStatus, message: str) -> GatewayStatus:
    """``status`` with every ``Programmed=True`` (Gateway and listeners) turned
    into ``Programmed=False Pending``: for a table the data plane does not
    serve (yet). Other conditions are left as they are."""
    pending = Condition(PROGRAMMED, False, R_PENDING, message)

    def swap(conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
        return tuple(pending if c.type == PROGRAMMED and c.status else c for c in conditions)

    listeners = tuple(ListenerStatus(lst.name, lst.supported_kinds, lst.attached_routes, swap(lst.conditions))
                      for lst in status.listeners)
    return GatewayStatus(status.generation, status.addresses, swap(status.conditions), listeners)
