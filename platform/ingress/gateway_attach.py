"""Route attachment: which listeners a route's parentRefs attach it to.

For each parentRef naming one of our Gateways (group/kind default to
``gateway.networking.k8s.io``/``Gateway``, namespace to the route's), in order:

1. the listeners the ref selects: all, or those with ``sectionName`` /
   ``port`` equal -- none: ``Accepted=False NoMatchingParent``;
2. of those, the ones that take the route: Accepted, the route's kind among
   their supported kinds, the route's namespace allowed (``Same``, ``All``,
   ``Selector`` on the namespace's labels) -- none: ``NotAllowedByListeners``;
3. of those, the ones whose hostname intersects the route's hostnames --
   none: ``NoMatchingListenerHostname``.

parentRefs to other kinds or to Gateways that are not ours are not ours to
report on and are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from platformd.common.resources import GATEWAY_API_GROUP
from platformd.ingress import gateway_fields as f
from platformd.ingress import gateway_hostnames as hostnames
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_listeners import GatewayState, ListenerState

__all__ = ["Attachment", "ParentResult", "attach", "selector_matches"]


@dataclass(frozen=True, slots=True)
class Attachment:
    gateway: GatewayState
    listener: ListenerState
    hostnames: tuple[str, ...]  # served there: may be () when narrower sibling listeners take them all


@dataclass(frozen=True, slots=True)
class ParentResult:
    parent_ref: tuple[tuple[str, object], ...]  # as written, sorted items
    accepted: st.Condition
    attachments: tuple[Attachment, ...]


def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (an empty selector matches all)."""
    if not isinstance(selector, Mapping):
        return False
    for key, value in f.mapping(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expr in f.items(selector.get("matchExpressions")):
        key, op, values = f.string(expr.get("key")), expr.get("operator"), f.strings(expr.get("values"))
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _allows_namespace(listener: ListenerState, gateway: GatewayState, namespace: str,
                      namespaces: Mapping[str, dict]) -> bool:
    if listener.allowed_from == "All":
        return True
    if listener.allowed_from == "Selector":
        labels = f.mapping(f.mapping(f.mapping(namespaces.get(namespace)).get("metadata")).get("labels"))
        return selector_matches(listener.selector, labels)
    return namespace == gateway.namespace


def _selected(ref: Mapping, gateway: GatewayState) -> list[ListenerState]:
    section, port = ref.get("sectionName"), ref.get("port")
    return [lst for lst in gateway.listeners
            if (not section or lst.name == section) and (port is None or lst.port == port)]


def _siblings(listener: ListenerState, gateway: GatewayState) -> list[str | None]:
    """The hostnames of the Gateway's other served listeners on ``listener``'s port."""
    return [lst.hostname for lst in gateway.listeners if lst is not listener and lst.port == listener.port
            and lst.attachable and lst.conflicted is None]


def attach(route: Mapping, kind: str, gateways: Mapping[str, GatewayState],
           namespaces: Mapping[str, dict]) -> list[ParentResult]:
    """The result for each of the route's parentRefs that names one of ``gateways``."""
    namespace = f.string(f.mapping(route.get("metadata")).get("namespace"))
    spec = f.mapping(route.get("spec"))
    route_hostnames = tuple(f.strings(spec.get("hostnames")))
    results = []
    for ref in f.items(spec.get("parentRefs")):
        if (ref.get("group", GATEWAY_API_GROUP), ref.get("kind", "Gateway")) != (GATEWAY_API_GROUP, "Gateway"):
            continue
        gateway = gateways.get(f"{f.string(ref.get('namespace')) or namespace}/{f.string(ref.get('name'))}")
        if gateway is None:
            continue
        written = tuple(sorted((k, v) for k, v in ref.items() if isinstance(v, (str, int))))
        selected = _selected(ref, gateway)
        if not selected:
            what = " ".join(f"{k} {ref[k]}" for k in ("sectionName", "port") if ref.get(k) is not None)
            results.append(ParentResult(written, st.Condition(
                st.ACCEPTED, False, st.R_NO_MATCHING_PARENT, f"Gateway {gateway.key} has no listener with {what}"), ()))
            continue
        allowed = [lst for lst in selected if lst.attachable and (GATEWAY_API_GROUP, kind) in lst.kinds
                   and _allows_namespace(lst, gateway, namespace, namespaces)]
        if not allowed:
            results.append(ParentResult(written, st.Condition(
                st.ACCEPTED, False, st.R_NOT_ALLOWED_BY_LISTENERS,
                f"no listener of Gateway {gateway.key} allows this {kind} from namespace {namespace}"), ()))
            continue
        attachments = []
        for lst in allowed:
            names = hostnames.intersect(lst.hostname, route_hostnames)
            if names:  # attached; served only for the names no narrower sibling listener takes
                served = hostnames.isolated(lst.hostname, names, _siblings(lst, gateway))
                attachments.append(Attachment(gateway, lst, served))
        if not attachments:
            results.append(ParentResult(written, st.Condition(
                st.ACCEPTED, False, st.R_NO_MATCHING_LISTENER_HOSTNAME,
                f"no listener hostname of Gateway {gateway.key} matches the route's hostnames"), ()))
            continue
        results.append(ParentResult(written, st.Condition(st.ACCEPTED, True, st.R_ACCEPTED, "route is accepted"),
                                    tuple(attachments)))
    return results
