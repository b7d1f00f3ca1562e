"""Gateway API matches and backends through real nginx: header, query
parameter and method matches, the precedence across and within routes,
weighted backends, invalid and omitted backendRefs, and route status
generations. One test per GATEWAY-HTTP core scenario these features enable,
written from the Gateway API v1.6 specification (HTTPRouteMatch,
HTTPBackendRef) and the conformance suite's scenario descriptions."""

from __future__ import annotations

import collections

import httpx

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, path, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for
from tests.ingress_e2e.test_gateway_routing import _plain, _route_conditions, _seed_backends

HOST = "match.example"


def _serve(fake_api, ingress_controller, netns_backends, names, *routes):
    """A Gateway with ``routes`` over backends ``names``, controller ready."""
    backends = netns_backends(list(names))
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway()))
    _seed_backends(fake_api, backends, names)
    for route in routes:  # in this order: the API server stamps creationTimestamp
        fake_api.create(_plain(route))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    return running


def _send(running, path="/", method="GET", headers=None, params=None, host=HOST) -> httpx.Response:
    return httpx.request(method, f"http://127.0.0.1:{running.http_port}{path}", params=params,
                         headers={"Host": host, **(headers or {})}, timeout=10)


def _answer(response: httpx.Response) -> str:
    return response.text if response.status_code == 200 else str(response.status_code)


def _headers(*pairs, kind=None):
    return [{"name": n, "value": v, **({"type": kind} if kind else {})} for n, v in pairs]


def _wait(running, expected: str, **request) -> None:
    wait_for(lambda: _answer(_send(running, **request)) == expected, 20, message=f"{request} -> {expected}")


def test_header_matching(fake_api, ingress_controller, netns_backends):
    route = http_route(hostnames=[HOST], rules=[
        rule(backend("one"), matches=[{**path("/"), "headers": _headers(("version", "one"))}]),
        rule(backend("two"), matches=[{**path("/"), "headers": _headers(("version", "two"))}]),
        # More header matches win over fewer, whatever the rule order.
        rule(backend("orange"), matches=[{**path("/"), "headers": _headers(("version", "two"), ("color", "orange"))}]),
        # Several matches in one rule: any of them (OR).
        rule(backend("bluegreen"), matches=[{**path("/"), "headers": _headers(("color", "blue"))},
                                            {**path("/"), "headers": _headers(("color", "green"))}]),
        rule(backend("regex"), matches=[{**path("/"), "headers": _headers(("color", "^(red|yellow)$"),
                                                                           kind="RegularExpression")}]),
    ])
    running = _serve(fake_api, ingress_controller, netns_backends, ["one", "two", "orange", "bluegreen", "regex"], route)
    _wait(running, "one", headers={"version": "one"})
    cases = [
        ({"Version": "one"}, "one"),  # header names are case-insensitive
        ({"version": "two"}, "two"),
        ({"version": "two", "color": "orange"}, "orange"),
        ({"version": "one", "color": "orange"}, "one"),  # orange needs both
        ({"color": "blue"}, "bluegreen"),
        ({"color": "green"}, "bluegreen"),
        ({"color": "yellow"}, "regex"),
        ({"color": "yellowish"}, "404"),
        ({"version": "ONE"}, "404"),  # values are case-sensitive
        ({}, "404"),
    ]
    assert [(headers, _answer(_send(running, headers=headers))) for headers, _ in cases] == cases


def test_query_param_matching(fake_api, ingress_controller, netns_backends):
    route = http_route(hostnames=[HOST], rules=[
        rule(backend("whale"), matches=[{**path("/"), "queryParams": _headers(("animal", "whale"))}]),
        rule(backend("dolphin"), matches=[{**path("/"), "queryParams": _headers(("animal", "dolphin"))}]),
        rule(backend("both"), matches=[{**path("/"), "queryParams": _headers(("animal", "dolphin"), ("color", "blue"))}]),
        rule(backend("regex"), matches=[{**path("/"), "queryParams": _headers(("color", "^gr[ae]y$"),
                                                                               kind="RegularExpression")}]),
    ])
    running = _serve(fake_api, ingress_controller, netns_backends, ["whale", "dolphin", "both", "regex"], route)
    _wait(running, "whale", params={"animal": "whale"})
    cases = [
        ({"animal": "dolphin"}, "dolphin"),
        ({"animal": "dolphin", "color": "blue"}, "both"),
        ({"animal": "whale", "color": "blue"}, "whale"),
        ({"color": "grey"}, "regex"),
        ({"color": "gray", "animal": "whale"}, "whale"),  # two rules hold: the earlier one (same precedence)
        ({"ANIMAL": "whale"}, "404"),  # names are case-sensitive
        ({"animal": "whale%20shark"}, "404"),
        ({}, "404"),
    ]
    assert [(params, _answer(_send(running, params=params))) for params, _ in cases] == cases
    assert _answer(_send(running, "/?animal=dolphin&animal=whale")) == "dolphin"  # the first value


def test_method_matching(fake_api, ingress_controller, netns_backends):
    route = http_route(hostnames=[HOST], rules=[
        rule(backend("post"), matches=[{**path("/"), "method": "POST"}]),
        rule(backend("get"), matches=[{**path("/"), "method": "GET"}]),
        # A method match wins over header matches; a longer path over a method.
        rule(backend("header"), matches=[{**path("/"), "headers": _headers(("version", "two"))}]),
        rule(backend("path"), matches=[path("/path")]),
    ])
    running = _serve(fake_api, ingress_controller, netns_backends, ["post", "get", "header", "path"], route)
    _wait(running, "post", method="POST")
    cases = [
        ("GET", "/", {}, "get"),
        ("POST", "/", {"version": "two"}, "post"),
        ("PUT", "/", {"version": "two"}, "header"),
        ("DELETE", "/", {}, "404"),
        ("POST", "/path/x", {}, "path"),
    ]
    assert [(m, p, h, _answer(_send(running, p, method=m, headers=h))) for m, p, h, _ in cases] == cases


def test_matching_across_routes(fake_api, ingress_controller, netns_backends):
    # "first" is created first: older, or as old and first by name.
    old = http_route("first", hostnames=[HOST, "other.example"], rules=[
        rule(backend("v1"), matches=[path("/")]),
        rule(backend("v1-v2"), matches=[{**path("/"), "headers": _headers(("version", "two"))}]),
    ])
    new = http_route("second", hostnames=[HOST], rules=[
        # The same match as the older route's: the older route wins the tie.
        rule(backend("v2"), matches=[{**path("/"), "headers": _headers(("version", "two"))}]),
        # A longer path wins over the other route's header match.
        rule(backend("v2"), matches=[path("/v2")]),
        # More conditions win over the other route's fewer.
        rule(backend("v2"), matches=[{**path("/"), "headers": _headers(("version", "two"), ("color", "blue"))}]),
    ])
    running = _serve(fake_api, ingress_controller, netns_backends, ["v1", "v1-v2", "v2"], old, new)
    _wait(running, "v2", path="/v2")
    cases = [
        ("/", {}, HOST, "v1"),
        ("/", {"version": "two"}, HOST, "v1-v2"),
        ("/v2/x", {"version": "two"}, HOST, "v2"),
        ("/x", {"version": "two", "color": "blue"}, HOST, "v2"),
        ("/v2", {}, "other.example", "v1"),  # the newer route has only one of the hostnames
    ]
    assert [(p, h, host, _answer(_send(running, p, headers=h, host=host))) for p, h, host, _ in cases] == cases


def test_path_match_order(fake_api, ingress_controller, netns_backends):
    route = http_route(hostnames=[HOST], rules=[
        rule(backend("prefix-match"), matches=[path("/match")]),
        rule(backend("prefix-match-exact"), matches=[path("/match/exact")]),
        rule(backend("exact"), matches=[path("/match/exact/one", "Exact")]),
        rule(backend("prefix-exact-one"), matches=[path("/match/exact/one")]),
        rule(backend("method"), matches=[{**path("/match"), "method": "POST"}]),
        rule(backend("headers"), matches=[{**path("/match"), "headers": _headers(("a", "1"), ("b", "1"))}]),
        rule(backend("query"), matches=[{**path("/match/exact"), "queryParams": _headers(("q", "1"))}]),
    ])
    names = ["prefix-match", "prefix-match-exact", "exact", "prefix-exact-one", "method", "headers", "query"]
    running = _serve(fake_api, ingress_controller, netns_backends, names, route)
    _wait(running, "exact", path="/match/exact/one")
    cases = [
        ("GET", "/match/exact/one", {}, "exact"),  # Exact before the equally long Prefix
        ("GET", "/match/exact/one/two", {}, "prefix-exact-one"),  # the longest Prefix
        ("GET", "/match/exact", {}, "prefix-match-exact"),
        ("GET", "/match/exact?q=1", {}, "query"),  # a query match before none on the same path
        ("GET", "/match/exactly", {}, "prefix-match"),  # Prefix matches whole path elements
        ("POST", "/match/x", {"a": "1", "b": "1"}, "method"),  # a method before two headers
        ("GET", "/match/x", {"a": "1", "b": "1"}, "headers"),
        ("POST", "/match/exact", {}, "prefix-match-exact"),  # a longer path before a method
        ("GET", "/other", {}, "404"),
    ]
    assert [(m, p, h, _answer(_send(running, p, method=m, headers=h))) for m, p, h, _ in cases] == cases


def test_weights_split_requests_and_weight_zero_gets_none(fake_api, ingress_controller, netns_backends):
    route = http_route(hostnames=[HOST], rules=[
        rule(backend("heavy", weight=70), backend("light", weight=30), backend("zero", weight=0))])
    running = _serve(fake_api, ingress_controller, netns_backends, ["heavy", "light", "zero"], route)
    wait_for(lambda: _answer(_send(running)) in ("heavy", "light"), 20, message="weighted route served")
    total = 1000
    counts = collections.Counter(_answer(_send(running)) for _ in range(total))
    # Binomial: standard deviation sqrt(1000 * 0.7 * 0.3) = 14.5; 5 of them either side.
    assert set(counts) <= {"heavy", "light"}, counts
    assert abs(counts["heavy"] - 700) <= 73 and counts["heavy"] + counts["light"] == total, counts


def test_invalid_backends_answer_500_for_their_share_and_the_rest_serves(fake_api, ingress_controller,
                                                                         netns_backends):
    route = http_route(hostnames=[HOST], rules=[
        rule(backend("web"), matches=[path("/")]),
        rule(backend("gone"), matches=[path("/missing")]),  # BackendNotFound
        rule(backend("web", kind="Pod", group=""), matches=[path("/kind")]),  # InvalidKind
        rule(backend("web", weight=1), backend("gone", weight=1), matches=[path("/half")]),
        rule(backend("web", weight=0), matches=[path("/zero")]),  # all weights zero
    ])
    running = _serve(fake_api, ingress_controller, netns_backends, ["web"], route)
    _wait(running, "500", path="/missing")
    assert [_answer(_send(running, p)) for p in ("/", "/missing", "/kind", "/zero", "/x")] == [
        "web", "500", "500", "500", "web"]
    half = collections.Counter(_answer(_send(running, "/half")) for _ in range(200))
    assert set(half) == {"web", "500"} and 60 <= half["web"] <= 140, half  # sd 7: far inside
    conditions = _route_conditions(fake_api, "route")
    assert conditions["Accepted"] == ("True", "Accepted")
    assert conditions["ResolvedRefs"][0] == "False"
    assert conditions["ResolvedRefs"][1] in ("BackendNotFound", "InvalidKind")


def test_omitted_backend_refs_answer_500(fake_api, ingress_controller, netns_backends):
    route = http_route(hostnames=[HOST], rules=[
        {"matches": [path("/none")]},  # no backendRefs, no filter that answers
        rule(backend("web"), matches=[path("/")]),
    ])
    running = _serve(fake_api, ingress_controller, netns_backends, ["web"], route)
    _wait(running, "500", path="/none")
    assert _answer(_send(running, "/none/more")) == "500"
    assert _answer(_send(running, "/")) == "web"
    wait_for(lambda: _route_conditions(fake_api, "route").get("Accepted") == ("True", "Accepted"), 20,
             message="route Accepted")


def _observed(fake_api, kind, name) -> set:
    obj = fake_api.get(kind, "default", name) or {}
    status = obj.get("status") or {}
    conds = list(status.get("conditions") or ())
    for parent in status.get("parents") or ():
        conds += parent.get("conditions") or ()
    return {c.get("observedGeneration") for c in conds}


def test_observed_generation_bump(fake_api, ingress_controller, netns_backends):
    route = http_route(hostnames=[HOST], rules=[rule(backend("one"))])
    running = _serve(fake_api, ingress_controller, netns_backends, ["one", "two"], route)
    _wait(running, "one")
    wait_for(lambda: _observed(fake_api, "HTTPRoute", "route") == {1}, 20, message="route observedGeneration 1")
    wait_for(lambda: _observed(fake_api, "Gateway", "gw") == {1}, 20, message="gateway observedGeneration 1")
    features = fake_api.get("GatewayClass", "", "platform")["status"]["supportedFeatures"]
    assert {"name": "HTTPRouteMethodMatching"} in features and {"name": "HTTPRouteQueryParamMatching"} in features

    changed = fake_api.get("HTTPRoute", "default", "route")
    changed["spec"]["rules"][0]["backendRefs"][0]["name"] = "two"
    fake_api.update(changed)
    assert fake_api.get("HTTPRoute", "default", "route")["metadata"]["generation"] == 2
    wait_for(lambda: _observed(fake_api, "HTTPRoute", "route") == {2}, 20, message="route observedGeneration 2")
    _wait(running, "two")

    gw = fake_api.get("Gateway", "default", "gw")
    gw["spec"]["listeners"][0]["allowedRoutes"] = {"namespaces": {"from": "All"}}
    fake_api.update(gw)
    wait_for(lambda: _observed(fake_api, "Gateway", "gw") == {2}, 20, message="gateway observedGeneration 2")
    assert _answer(_send(running)) == "two"
