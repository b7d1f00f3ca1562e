"""Malformed Gateway API objects (any field any JSON value, as the file source
may hand them over) never stop the translation, the status rendering or the
lowering, and never stop the other objects from being served."""

from __future__ import annotations

import copy
import random

import pytest

from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_lowering import lower
from tests.ingress.gateway_objects import (
    CONTROLLER, backend, entries, gateway, gateway_class, grant, grpc_route, http_route, https_listener, listener,
    namespace, rule, service, translate,
)

GARBAGE = [None, 1, -5, "x", "", [], {}, [1], ["a"], [{}], {"a": 1}, True, 3.5, [None], {"name": 3}]

FULL_ROUTE = http_route(hostnames=["a.example"], parents=[{"name": "gw", "sectionName": "http", "port": 80}], rules=[
    rule(backend("svc", weight=2), matches=[{
        "path": {"type": "Exact", "value": "/a"}, "headers": [{"name": "x", "value": "1"}],
        "queryParams": [{"name": "q", "value": "1"}], "method": "GET"}], filters=[
        {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "a", "value": "b"}], "remove": ["c"]}},
        {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "svc", "port": 80}, "fraction": {"numerator": 1}}},
        {"type": "CORS", "cors": {"allowOrigins": ["*"], "maxAge": 3}}], timeouts={"request": "1s"}),
    {"filters": [{"type": "RequestRedirect", "requestRedirect": {
        "scheme": "https", "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/x"}}}],
     "matches": [{"path": {"type": "PathPrefix", "value": "/r"}}]},
    {"filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "h", "path": {
        "type": "ReplaceFullPath", "replaceFullPath": "/y"}}}], "backendRefs": [backend()]}])
BASE = [
    gateway(listeners=[listener(), https_listener(), listener("x", 8000, hostname="a.example", allowedRoutes={
        "namespaces": {"from": "Selector", "selector": {
            "matchLabels": {"a": "b"}, "matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}},
        "kinds": [{"kind": "HTTPRoute"}]})], addresses=[{"type": "IPAddress", "value": "10.0.0.1"}]),
    FULL_ROUTE,
    grpc_route(rules=[rule(matches=[{"method": {"service": "a.B", "method": "C", "type": "RegularExpression"},
                                     "headers": [{"name": "x", "value": "y", "type": "RegularExpression"}]}])]),
    grant("default", "other"), gateway_class(), service(), namespace("default", a="b"),
]
OPTIONS = GatewayOptions(address_pool=("10.0.0.1",), listener_ports={8000: 18000})


def _mutate(obj, rng):
    obj = copy.deepcopy(obj)
    paths = []

    def walk(o, p):
        children = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
        for k, v in children:
            paths.append(p + (k,))
            walk(v, p + (k,))
    walk(obj, ())
    for _ in range(rng.randint(1, 3)):
        p = rng.choice(paths)
        try:
            cur = obj
            for k in p[:-1]:
                cur = cur[k]
            cur[p[-1]] = rng.choice(GARBAGE)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation replaced a parent
    return obj


def _objects(rng):
    out = []
    for o in BASE:
        o = _mutate(o, rng) if rng.random() < 0.5 else o
        if isinstance(o, dict) and isinstance(o.get("kind"), str) and isinstance(o.get("metadata"), dict):
            o["metadata"].setdefault("name", "n")
            if not isinstance(o["metadata"]["name"], str):
                o["metadata"]["name"] = "n"
            out.append(o)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_malformed_objects_translate_render_and_lower_without_exceptions(seed):
    rng = random.Random(seed)
    for _ in range(150):
        t = translate(*_objects(rng), services={"default/svc": service()}, options=OPTIONS)
        for status in t.gateways.values():
            st.render_gateway(status, _mutate({"status": {"conditions": [{"type": "Accepted", "status": "True"}],
                                                          "listeners": [{"name": "http", "conditions": []}]}}, rng), "t")
        for status in t.http_routes.values():
            st.render_route(status, _mutate({"status": {"parents": [{"parentRef": {"name": "gw"},
                                                                     "controllerName": CONTROLLER}]}}, rng),
                            CONTROLLER, "t")
        lower(t.table, http_port=80, https_port=443, services={"default/svc": service()}, slices=lambda k: (),
              secrets={}, now=0)


def test_a_malformed_route_gets_status_and_others_keep_serving():
    broken = http_route("broken", hostnames=["b.example"], rules="not a list")
    odd = http_route("odd", hostnames=["c.example"], rules=[{"matches": [{"path": {"type": 7, "value": []}}],
                                                             "backendRefs": [{"name": "svc", "port": "80"}]}])
    t = translate(gateway(), http_route(hostnames=["a.example"]), broken, odd, service())
    assert entries(t, "a.example") == [("HTTPRoute default/route", 0, "PathPrefix", "/")]
    assert "default/broken" in t.http_routes and "default/odd" in t.http_routes
    odd_parent = {c.type: (c.status, c.reason) for c in t.http_routes["default/odd"].parents[0].conditions}
    assert odd_parent["ResolvedRefs"] == (False, "BackendNotFound")  # port "80" is no port
