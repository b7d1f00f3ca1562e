"""The HTTPRoute / GRPCRoute admission review: exactly the conditions the
controller would report for the route (webhook_routes), on plain data."""

from __future__ import annotations

import pytest

from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.webhook_admission import AdmissionRequest
from platformd.ingress.webhook_routes import NOT_SYNCED, RouteReviewer
from tests.ingress.gateway_objects import (
    NOW, backend, gateway, gateway_class, grpc_route, http_route, listener, path, rule, service, translate,
)


def _snapshot(*routes, services=("svc",)):
    return GatewaySnapshot(gateway_classes=(gateway_class(),),
                           gateways=(gateway(listeners=[listener("http", hostname="*.example.com")]),),
                           http_routes=routes, services={f"default/{n}": service(n) for n in services})


def _review(route, old=None, kind="HTTPRoute", synced=True, snapshot=None):
    reviewer = RouteReviewer(kind, lambda: snapshot or _snapshot(), GatewayOptions, lambda: synced, lambda: NOW)
    return reviewer.review(AdmissionRequest(
        uid="u", group="gateway.networking.k8s.io", version="v1", kind=kind,
        operation="UPDATE" if old else "CREATE", namespace="default", name=route["metadata"]["name"],
        object=route, old_object=old))


def _controller_reports(route, kind="http_routes"):
    """What the full translation (the controller) says of the route."""
    t = translate(gateway_class(), gateway(listeners=[listener("http", hostname="*.example.com")]), route,
                  service("svc"))
    parents = getattr(t, kind)["default/" + route["metadata"]["name"]].parents
    return {(c.type, c.reason) for p in parents for c in p.conditions
            if (c.type == "PartiallyInvalid") == c.status}


def test_a_good_route_is_allowed_without_remarks():
    verdict = _review(http_route(hostnames=["a.example.com"], rules=[rule(matches=[path("/")])]))
    assert verdict.allowed and verdict.warnings == ()


@pytest.mark.parametrize("route, reason", [
    (http_route(hostnames=["a.other.org"]), "NoMatchingListenerHostname"),
    (http_route(parents=[{"name": "gw", "sectionName": "nope"}], hostnames=["a.example.com"]), "NoMatchingParent"),
    (http_route(hostnames=["a.example.com"], rules=[
        rule(matches=[{**path("/"), "headers": [{"name": "x", "value": "(", "type": "RegularExpression"}]}])]),
     "UnsupportedValue"),
    (http_route(hostnames=["a.example.com"], rules=[rule(backend("svc", kind="Pod"))]), "InvalidKind"),
])
def test_what_the_controller_would_refuse_is_denied_with_its_message(route, reason):
    verdict = _review(route)
    assert not verdict.allowed and any(reason in e for e in verdict.errors), verdict
    # Exactly the controller's conditions: each reported one appears in the answer.
    for ctype, creason in _controller_reports(route):
        assert any(f"{ctype}=" in text and creason in text for text in verdict.errors + verdict.warnings)


def test_a_partly_invalid_route_is_denied_for_its_dropped_rules():
    route = http_route(hostnames=["a.example.com"], rules=[
        rule(matches=[path("/")]), rule(matches=[path("(", "RegularExpression")])])
    verdict = _review(route)
    assert [e.split(":")[1].strip() for e in verdict.errors] == ["PartiallyInvalid=True UnsupportedValue"]


def test_missing_services_and_grants_are_warnings():
    verdict = _review(http_route(hostnames=["a.example.com"], rules=[rule(backend("later"))]))
    assert verdict.allowed and any("BackendNotFound" in w for w in verdict.warnings)
    verdict = _review(http_route(hostnames=["a.example.com"], rules=[rule(backend("svc", namespace="other"))]))
    assert verdict.allowed and any("RefNotPermitted" in w for w in verdict.warnings)


def test_an_error_the_old_object_had_is_only_a_warning():
    route = http_route(hostnames=["a.other.org"])
    relabelled = {**route, "metadata": {**route["metadata"], "labels": {"team": "a"}}}
    verdict = _review(relabelled, old=route)
    assert verdict.allowed and any("already so" in w for w in verdict.warnings)


def test_other_routes_do_not_change_the_answer_and_foreign_parents_are_left_alone():
    route = http_route(hostnames=["a.example.com"])
    busy = _snapshot(*(http_route(f"r{i}", hostnames=["a.example.com"]) for i in range(50)))
    assert _review(route, snapshot=busy) == _review(route)
    foreign = http_route(parents=[{"name": "theirs"}], hostnames=["a.other.org"])
    assert _review(foreign).allowed and _review(foreign).warnings == ()


def test_grpc_routes_and_unsynced_caches():
    bad = grpc_route(hostnames=["a.other.org"], rules=[rule(matches=[{"method": {"service": "a.B"}}])])
    assert not _review(bad, kind="GRPCRoute").allowed
    verdict = _review(bad, kind="GRPCRoute", synced=False)
    assert verdict.allowed and verdict.warnings == (NOT_SYNCED,)
