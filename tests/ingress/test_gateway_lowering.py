"""Lowering the Gateway route table onto the router's model (Servers,
Locations, Backends), on plain data: what is lowered, what is left out and why."""

import pytest

from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_lowering import backend_name, lower, merge
from platformd.ingress.translate import _ServiceRef
from platformd.ingress.gateway_dataplane import extend
from platformd.ingress.model import (
    Backend, BackendProtocol, Configuration, Endpoint, Location, PathMatch, RequestRedirect, Server, TrafficShapingPolicy,
)
from tests.helpers.certs import self_signed
from tests.ingress.gateway_objects import (
    NOW, backend, gateway, grpc_route, http_route, https_listener, listener, path, rule, service, tls_secret, translate,
)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed("example.com", tmp_path_factory.mktemp("certs"))


def _slice(name, ip, port=8080):
    return {"metadata": {"name": f"{name}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}]}


def _lower(*objects, secrets=None, options=None):
    t = translate(*objects, options=options)
    services = {f"default/{o['metadata']['name']}": o for o in objects if o["kind"] == "Service"}
    slices = {"default/svc": (_slice("svc", "10.1.0.5"),)}
    return lower(t.table, http_port=80, https_port=443, services=services or {"default/svc": service()},
                 slices=lambda key: slices.get(key, ()), secrets=secrets or {}, now=NOW)


def test_plain_paths_become_a_server_with_locations_and_backends():
    rules = [rule(matches=[path("/api", "Exact")]), rule(matches=[path("/app")]),
             rule(matches=[path("/v[0-9]+", "RegularExpression")])]
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=rules), service())
    [server] = out.servers
    assert server.hostname == "web.example" and not server.tls
    assert {(loc.match, loc.path, loc.backend) for loc in server.locations} == {
        (PathMatch.EXACT, "/api", "default.svc.80.route"), (PathMatch.PREFIX, "/app", "default.svc.80.route"),
        (PathMatch.REGEX, "/v[0-9]+", "default.svc.80.route")}
    [be] = out.backends
    assert (be.name, be.endpoints) == ("default.svc.80.route", (Endpoint("10.1.0.5", 8080),))
    assert out.skipped == ()


def test_backend_names_are_unambiguous_and_never_an_ingress_backend():
    # Service web-api in adv-team and api in adv-team-web stay apart (with
    # "-" as separator both were "adv-team-web-api-80").
    assert backend_name("ns/web", 8080) == "ns.web.8080.route"
    assert backend_name("adv-team/web-api", 80) != backend_name("adv-team-web/api", 80)
    assert backend_name("ns/web", 8080) != _ServiceRef("ns", "web", 8080).backend_name


def test_an_ingress_canary_on_the_same_service_port_never_steers_route_traffic():
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[rule(matches=[path("/")])]), service())
    ingress_backend = Backend(_ServiceRef("default", "svc", 80).backend_name, alternative_backends=("default.canary.80",))
    canary = Backend("default.canary.80", traffic_shaping_policy=TrafficShapingPolicy(weight=100))
    merged, _ = extend(Configuration(backends=(ingress_backend, canary)), out)
    [location] = next(s for s in merged.servers if s.hostname == "web.example").locations
    [backend] = [b for b in merged.backends if b.name == location.backend]
    assert backend.alternative_backends == () and backend.endpoints == (Endpoint("10.1.0.5", 8080),)


def test_shadowed_duplicate_paths_keep_the_first():
    old = http_route("old", hostnames=["web.example"], rules=[rule(backend("a"), matches=[path("/")])])
    new = http_route("new", hostnames=["web.example"], created="2026-02-01T00:00:00Z",
                     rules=[rule(backend("b"), matches=[path("/")])])
    out = _lower(gateway(), old, new, service("a"), service("b"))
    assert [loc.backend for loc in out.servers[0].locations] == ["default.a.80.route"]


@pytest.mark.parametrize("rules, reason", [
    ([rule(filters=[{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "svc", "port": 80}}}] * 17)],
     "at most 16 copies"),
    ([rule(filters=[{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "Host", "value": "b"}]}}])],
     "hop-by-hop"),
])
def test_what_the_router_cannot_say_leaves_the_host_out_with_the_reason(rules, reason):
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=rules), service(), service("svc2"))
    assert out.servers == ()
    [skipped] = out.skipped
    assert skipped.hostname == "web.example" and reason in skipped.reason


def test_fixed_redirect_grpc_cors_and_host_rewrite_are_lowered():
    redirect = {"filters": [{"type": "RequestRedirect", "requestRedirect": {
        "scheme": "https", "hostname": "new.example", "statusCode": 301,
        "path": {"type": "ReplaceFullPath", "replaceFullPath": "/moved"}}}], "matches": [path("/old")]}
    rewrite = rule(matches=[path("/api")], filters=[
        {"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example",
                                              "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}},
        {"type": "CORS", "cors": {"allowOrigins": ["https://a.example"], "allowMethods": ["GET"], "maxAge": 10}}])
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[redirect, rewrite]), service())
    by_path = {loc.path: loc for loc in out.servers[0].locations}
    assert by_path["/old"].request_redirect == RequestRedirect(301, "https", "new.example", None, "ReplaceFullPath",
                                                               "/moved")
    api = by_path["/api"]
    assert (api.proxy.upstream_vhost, api.rewrite_target, api.rewrite_rest) == ("internal.example", "/v2$1", True)
    assert api.cors.allow_origins == ("https://a.example",) and api.cors.max_age == 10
    assert not api.cors.allow_credentials


def test_grpc_route_goes_to_the_grpc_lane():
    grpc = _lower(gateway(), grpc_route(hostnames=["rpc.example"], rules=[
        rule(matches=[{"method": {"service": "echo.Echo", "method": "Ping"}}]),
        rule(matches=[{"method": {"service": "echo.Echo"}}])]), service())
    locations = {(loc.match, loc.path): loc.proxy.protocol for loc in grpc.servers[0].locations}
    assert locations == {(PathMatch.EXACT, "/echo.Echo/Ping"): BackendProtocol.GRPC,
                         (PathMatch.PREFIX, "/echo.Echo"): BackendProtocol.GRPC}
    with_header = _lower(gateway(), grpc_route(hostnames=["rpc.example"], rules=[
        rule(matches=[{"method": {"service": "a.B"}, "headers": [{"name": "x", "value": "1"}]}])]), service())
    [location] = with_header.servers[0].locations  # served with the header as a condition (test_gateway_matches)
    assert [(h.name, h.value) for h in location.conditions.headers] == [("content-type", "^application/grpc"),
                                                                         ("x", "1")]


@pytest.mark.parametrize("kind, match, value, target, rest", [
    ("ReplacePrefixMatch", path("/api"), "/v2", "/v2$1", True),
    ("ReplacePrefixMatch", path("/api/"), "/v2/", "/v2$1", True),  # trailing slashes do not count
    ("ReplacePrefixMatch", path("/api"), "/", "/$2", True),
    ("ReplacePrefixMatch", path("/api"), "", "/$2", True),
    ("ReplaceFullPath", path("/api"), "/one", "/one", False),
    ("ReplaceFullPath", path("/api", kind="Exact"), "/one", "/one", False),
    ("ReplaceFullPath", path("/a.*", kind="RegularExpression"), "/one", "/one", False),
])
def test_path_rewrites_are_lowered_for_the_router(kind, match, value, target, rest):
    field = "replacePrefixMatch" if kind == "ReplacePrefixMatch" else "replaceFullPath"
    rewrite = rule(matches=[match], filters=[{"type": "URLRewrite", "urlRewrite": {
        "path": {"type": kind, field: value}}}])
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[rewrite]), service())
    assert out.skipped == ()
    [location] = out.servers[0].locations
    assert (location.rewrite_target, location.rewrite_rest) == (target, rest)


def test_a_dollar_in_a_rewritten_path_leaves_the_host_out_with_the_reason():
    rewrite = rule(matches=[path("/api")], filters=[{"type": "URLRewrite", "urlRewrite": {
        "path": {"type": "ReplaceFullPath", "replaceFullPath": "/a$1"}}}])
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[rewrite]), service())
    assert out.servers == () and "'$' in the path" in out.skipped[0].reason


def test_same_host_on_http_and_https_is_one_server_without_ssl_redirect(cert):
    secret = tls_secret("cert", *cert)
    gw = gateway(listeners=[listener(hostname="example.com"), https_listener(hostname="example.com")])
    out = _lower(gw, http_route(), secret, service(), secrets={"default/cert": secret})
    [server] = out.servers
    assert server.tls and not any(loc.ssl_redirect for loc in server.locations)


def test_merge_route_wins_the_same_path_and_keeps_other_ingress_paths():
    ingress = Server("web.example", locations=(Location("/", backend="ing-a"), Location("/old", backend="ing-b")))
    other = Server("other.example", locations=(Location("/", backend="ing-c"),))
    route = Server("web.example", locations=(Location("/", backend="gw-a"),
                                             Location("/new", match=PathMatch.EXACT, backend="gw-b")))
    merged = merge([ingress, other], [route, Server("only.example", locations=(Location("/", backend="gw-c"),))])
    assert [s.hostname for s in merged] == ["only.example", "other.example", "web.example"]
    web = merged[2]
    assert {(loc.match, loc.path, loc.backend) for loc in web.locations} == {
        (PathMatch.PREFIX, "/", "gw-a"), (PathMatch.PREFIX, "/old", "ing-b"), (PathMatch.EXACT, "/new", "gw-b")}
