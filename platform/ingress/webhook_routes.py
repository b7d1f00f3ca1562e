"""What the controller would report for one HTTPRoute or GRPCRoute, answered before it is stored.

Like ``webhook_review.IngressReviewer``, no rules of its own: ``RouteReviewer``
runs the controller's Gateway translation (``gateway_translate.build``) on
the controller's current Gateway API snapshot with the reviewed route in
place of the stored one, and answers with the conditions the controller
would write into the route's ``status.parents`` for our Gateways:

* errors (the request is denied): ``Accepted=False`` with any reason
  (``NoMatchingParent``, ``NotAllowedByListeners``,
  ``NoMatchingListenerHostname``, ``UnsupportedValue``: the route, or part
  of it, would not be served), ``PartiallyInvalid`` (rules dropped), and
  ``ResolvedRefs=False InvalidKind`` (a backendRef that is not a Service);
* warnings (allowed): the other ``ResolvedRefs=False`` reasons
  (``BackendNotFound``, ``RefNotPermitted``, ``UnsupportedProtocol``), which
  a Service or ReferenceGrant created later fixes: the rule answers 500
  meanwhile.

An error the old object of an UPDATE already had is only a warning, so
metadata edits of a route with a problem are not blocked. A route's status
depends on its Gateways, classes, namespaces, Services and ReferenceGrants,
never on other routes, so the translation runs on a snapshot holding the
reviewed route alone: a review costs one small translation whatever the
number of routes. DELETE and routes whose parentRefs name no Gateway of ours
are allowed without remarks. Until the informers have synced, reviews are
answered with a warning only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_translate import GRPC_ROUTE, HTTP_ROUTE, build
from platformd.ingress.webhook_admission import AdmissionRequest, Verdict

__all__ = ["GROUP", "NOT_SYNCED", "RouteReviewer", "WARNING_REASONS"]

GROUP = "gateway.networking.k8s.io"
#: ResolvedRefs reasons that an object created later fixes: warnings.
WARNING_REASONS = frozenset({"BackendNotFound", "RefNotPermitted", "UnsupportedProtocol"})
NOT_SYNCED = "the controller's Gateway API caches have not synced yet: the route was not checked"
_FIELDS = {HTTP_ROUTE: "http_routes", GRPC_ROUTE: "grpc_routes"}


def _key(obj: dict, namespace: str) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return f"{meta.get('namespace') or namespace}/{meta.get('name') or ''}"


def _with_namespace(obj: dict, namespace: str) -> dict:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if meta.get("namespace") or not namespace:
        return obj
    return {**obj, "metadata": {**meta, "namespace": namespace}}


def _parent_name(parent_ref: tuple) -> str:
    ref = dict(parent_ref)
    name = f"{ref.get('namespace') or ''}/{ref.get('name')}".lstrip("/")
    section = ref.get("sectionName")
    return f"{name}/{section}" if section else name


class RouteReviewer:
    """Reviews routes of one kind (see the module docstring).

    ``snapshot()``: the controller's current ``GatewaySnapshot``;
    ``options()``: its ``GatewayOptions``; ``synced()``: whether its stores
    hold the cluster yet. Thread-safe: it only reads and runs pure functions.
    """

    def __init__(self, kind: str, snapshot: Callable[[], GatewaySnapshot], options: Callable[[], GatewayOptions],
                 synced: Callable[[], bool], wall_clock: Callable[[], float] = time.time) -> None:
        if kind not in _FIELDS:
            raise ValueError(f"routes of kind {kind!r} are not reviewed")
        self.kind = kind
        self._snapshot = snapshot
        self._options = options
        self._synced = synced
        self._wall_clock = wall_clock

    def review(self, request: AdmissionRequest) -> Verdict:
        if request.operation not in ("CREATE", "UPDATE") or request.object is None:
            return Verdict()
        new = _with_namespace(request.object, request.namespace)
        if (new.get("metadata") or {}).get("deletionTimestamp"):
            return Verdict()
        if not self._synced():
            return Verdict(warnings=(NOT_SYNCED,))
        snapshot, options, now = self._snapshot(), self._options(), self._wall_clock()
        after = self._problems(snapshot, options, now, new, request.namespace)
        before = set()
        if request.old_object is not None:
            old = _with_namespace(request.old_object, request.namespace)
            before = {text for text, _ in self._problems(snapshot, options, now, old, request.namespace)}
        errors, warnings = [], []
        for text, is_error in after:
            if is_error and text not in before:
                errors.append(text)
            elif is_error:
                warnings.append(f"{text} (already so before this change)")
            else:
                warnings.append(text)
        return Verdict(tuple(errors), tuple(warnings))

    def _problems(self, snapshot: GatewaySnapshot, options: GatewayOptions, now: float, route: dict,
                  namespace: str) -> list[tuple[str, bool]]:
        """(message, is it an error) of each condition the controller would report against ``route``."""
        field = _FIELDS[self.kind]
        alone = replace(snapshot, **{"http_routes": (), "grpc_routes": (), field: (route,)})
        statuses = getattr(build(alone, options, now), field)
        status = statuses.get(_key(route, namespace))
        if status is None:
            return []  # no parentRef to a Gateway of ours
        out: list[tuple[str, bool]] = []
        for parent in status.parents:
            for c in parent.conditions:
                bad = (c.type == st.PARTIALLY_INVALID and c.status) or (c.type != st.PARTIALLY_INVALID and not c.status)
                if not bad:
                    continue
                error = c.type != st.RESOLVED_REFS or c.reason not in WARNING_REASONS
                text = f"parentRef {_parent_name(parent.parent_ref)}: {c.type}={'True' if c.status else 'False'} " \
                       f"{c.reason}: {c.message}"
                out.append((text, error))
        return out


def reviewers(gateway) -> dict[tuple[str, str], RouteReviewer]:
    """The route reviewers of a running ``GatewayController``, by (group, kind)."""
    return {(GROUP, kind): RouteReviewer(kind, gateway.snapshot, lambda: gateway.options, gateway.has_synced)
            for kind in _FIELDS}
