"""Gateway API matches and backends through real nginx: header, query
parameter and method matches, the precedence across and within routes,
weighted backends, invalid and omitted backendRefs, and route status
generations. One test per GATEWAY-HTTP core scenario these features enable,
written from the Gateway API v1.6 specification (HTTPRouteMatch,
HTTPBackendRef) and the conformance suite's scenario descriptions."""

from __future__ import annotations

import collections
import subprocess

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
        rule(backend("web", namespace="other"), matches=[path("/cross")]),  # RefNotPermitted: no ReferenceGrant
    ])
    running = _serve(fake_api, ingress_controller, netns_backends, ["web"], route)
    _wait(running, "500", path="/missing")
    assert [_answer(_send(running, p)) for p in ("/", "/missing", "/kind", "/zero", "/cross", "/x")] == [
        "web", "500", "500", "500", "500", "web"]
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


def _curl_h2(running, host: str, path: str, headers: dict) -> str:
    """POST over HTTP/2 (TLS) as a gRPC client does; the body answered, or the status."""
    args = ["curl", "-sk", "--http2", "-X", "POST", "--data-binary", "", "-o", "-", "-w", "\n%{http_code}",
            "--resolve", f"{host}:{running.https_port}:127.0.0.1", f"https://{host}:{running.https_port}{path}"]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    body, _, code = subprocess.run(args, capture_output=True, text=True, timeout=10).stdout.rpartition("\n")
    return body if code == "200" else code


class _H2cBackends:
    """nginx answering each name over cleartext HTTP/2 (as gRPC backends speak)
    on ``port`` of its address, inside the network namespace of ``backends``."""

    def __init__(self, backends, port: int = 9090) -> None:
        import shutil as _shutil
        import tempfile
        from pathlib import Path
        self.port, self._dir = port, Path(tempfile.mkdtemp(prefix="pd-h2c-"))
        self._rm = lambda: _shutil.rmtree(self._dir, ignore_errors=True)
        servers = "".join(f" server {{ listen {b.ip}:{port} http2; location / {{ return 200 \"{b.name}\"; }} }}\n"
                          for b in backends.backends)
        (self._dir / "nginx.conf").write_text(
            f"user root;\nworker_processes 1;\npid {self._dir}/nginx.pid;\nerror_log {self._dir}/error.log;\n"
            f"events {{ worker_connections 64; }}\nhttp {{ access_log off;\n client_body_temp_path {self._dir}/body;\n"
            f"{servers}}}\n")
        self._proc = subprocess.Popen(["ip", "netns", "exec", backends.netns, "/usr/sbin/nginx", "-p", str(self._dir),
                                       "-c", str(self._dir / "nginx.conf"), "-e", str(self._dir / "error.log"),
                                       "-g", "daemon off;"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._rm()


def test_grpc_route_matches_service_method_and_headers_on_the_grpc_lane(fake_api, ingress_controller, netns_backends,
                                                                        tmp_path):
    from tests.helpers.certs import self_signed
    from tests.ingress.gateway_objects import grpc_route, https_listener

    host = "rpc.example"
    cert, key = self_signed(host, tmp_path)
    backends = netns_backends(["tenant", "ping", "service"])
    h2c = _H2cBackends(backends)
    try:
        fake_api.create(o.tls_secret("cert", cert, key))
        fake_api.create(_plain(gateway_class()))
        fake_api.create(_plain(gateway(listeners=[https_listener(hostname=host)])))
        for b in backends.backends:
            fake_api.create(o.service(b.name, port=80))
            fake_api.create(o.endpoint_slice(b.name, [b.ip], port=h2c.port))
        fake_api.create(_plain(grpc_route(hostnames=[host], rules=[
            rule(backend("tenant"), matches=[{"method": {"service": "echo.Echo", "method": "Ping"},
                                             "headers": _headers(("x-tenant", "^a"), kind="RegularExpression")}]),
            rule(backend("ping"), matches=[{"method": {"service": "echo.Echo", "method": "Ping"}}]),
            rule(backend("service"), matches=[{"method": {"service": "echo.Echo"}}]),
        ])))
        running = ingress_controller("--publish-status-address", "192.0.2.1")
        running.wait_ready()
        grpc = {"content-type": "application/grpc", "te": "trailers"}
        wait_for(lambda: _curl_h2(running, host, "/echo.Echo/Ping", grpc) == "ping", 20, message="gRPC served")
        assert _curl_h2(running, host, "/echo.Echo/Ping", {**grpc, "x-tenant": "abc"}) == "tenant"
        assert _curl_h2(running, host, "/echo.Echo/Ping", {**grpc, "x-tenant": "b"}) == "ping"
        assert _curl_h2(running, host, "/echo.Echo/Other", grpc) == "service"
        assert _curl_h2(running, host, "/other.Svc/Ping", grpc) == "404"
        # Not gRPC (no application/grpc content type): the gRPC entries do not take it.
        assert _curl_h2(running, host, "/echo.Echo/Ping", {"content-type": "text/plain"}) == "404"
    finally:
        h2c.stop()


def test_a_header_matched_route_beside_an_ingress_on_the_same_path(fake_api, ingress_controller, netns_backends):
    """Moving a host to Gateway API one condition at a time: the route takes
    the requests its header match holds for, the Ingress keeps the rest."""
    route = http_route(hostnames=[HOST], rules=[
        rule(backend("canary"), matches=[{**path("/"), "headers": _headers(("x-env", "canary"))}])])
    fake_api.create(o.ingress_class())
    fake_api.create(o.ingress("old", HOST, [("/", "stable", 80)]))
    running = _serve(fake_api, ingress_controller, netns_backends, ["stable", "canary"], route)
    _wait(running, "canary", headers={"x-env": "canary"})
    assert _answer(_send(running, "/x")) == "stable"
    assert _answer(_send(running, "/x", headers={"x-env": "other"})) == "stable"
