"""HTTPRoute and GRPCRoute translation on plain data: attachment, hostnames,
matches and their precedence, filters, backends and route status; one test
per rule of the spec."""

import pytest

from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_model import (
    Bind, Cors, HeaderMatch, HeaderModifier, Mirror, Redirect, Rewrite, WeightedBackend,
)
from tests.helpers.certs import self_signed
from tests.ingress.gateway_objects import (
    backend, entries, gateway, grant, grpc_route, host, http_route, https_listener, listener, listener_status,
    namespace, parent_conditions, path, rule, service, tls_secret, translate,
)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed("example.com", tmp_path_factory.mktemp("certs"))


def action(t, hostname="*", port=80, index=0):
    return host(t, hostname, port).entries[index].action


# --- attachment ---------------------------------------------------------------------------------

def test_simple_same_namespace_route_is_accepted_and_served():
    t = translate(gateway(), http_route(), service())
    assert parent_conditions(t) == {"Accepted": (True, "Accepted"), "ResolvedRefs": (True, "ResolvedRefs")}
    assert entries(t) == [("HTTPRoute default/route", 0, "PathPrefix", "/")]
    assert action(t).backends == (WeightedBackend("default/svc", 80, 1),)
    assert dict(t.http_routes["default/route"].parents[0].parent_ref) == {"name": "gw"}


def test_route_with_parent_ref_to_a_gateway_that_is_not_ours_gets_no_status():
    t = translate(gateway(), http_route(parents=[{"name": "elsewhere"}]))
    assert dict(t.http_routes) == {}


def test_parent_ref_to_another_kind_is_skipped():
    t = translate(gateway(), http_route(parents=[{"name": "gw", "kind": "Service", "group": ""}]))
    assert dict(t.http_routes) == {}


def test_section_name_selects_the_listener():
    gw = gateway(listeners=[listener("a", hostname="a.example"), listener("b", hostname="b.example")])
    t = translate(gw, http_route(parents=[{"name": "gw", "sectionName": "b"}]))
    assert [h.hostname for h in t.table.hosts] == ["b.example"]


def test_unknown_section_name_is_no_matching_parent():
    t = translate(gateway(), http_route(parents=[{"name": "gw", "sectionName": "nope"}]))
    assert parent_conditions(t)["Accepted"] == (False, "NoMatchingParent")
    assert t.table.hosts == ()


def test_parent_port_selects_listeners_and_a_wrong_port_is_no_matching_parent():
    ok = translate(gateway(), http_route(parents=[{"name": "gw", "port": 80}]))
    assert parent_conditions(ok)["Accepted"] == (True, "Accepted")
    bad = translate(gateway(), http_route(parents=[{"name": "gw", "port": 81}]))
    assert parent_conditions(bad)["Accepted"] == (False, "NoMatchingParent")


def test_route_from_another_namespace_is_not_allowed_by_default():
    route = http_route(namespace="other", parents=[{"name": "gw", "namespace": "default"}])
    t = translate(gateway(), route, service(namespace="other"))
    assert parent_conditions(t, "other/route")["Accepted"] == (False, "NotAllowedByListeners")
    assert listener_status(t).attached_routes == 0


def test_allowed_routes_all_and_selector():
    every = listener(allowedRoutes={"namespaces": {"from": "All"}})
    t = translate(gateway(listeners=[every]), http_route(namespace="other", parents=[{"name": "gw", "namespace": "default"}]))
    assert parent_conditions(t, "other/route")["Accepted"] == (True, "Accepted")
    chosen = listener(allowedRoutes={"namespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "web"}}}})
    ref = [{"name": "gw", "namespace": "default"}]
    yes = translate(gateway(listeners=[chosen]), http_route(namespace="web", parents=ref), namespace("web", team="web"))
    no = translate(gateway(listeners=[chosen]), http_route(namespace="db", parents=ref), namespace("db", team="db"))
    assert parent_conditions(yes, "web/route")["Accepted"] == (True, "Accepted")
    assert parent_conditions(no, "db/route")["Accepted"] == (False, "NotAllowedByListeners")


def test_selector_match_expressions():
    chosen = listener(allowedRoutes={"namespaces": {"from": "Selector", "selector": {
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "stage"]},
                             {"key": "legacy", "operator": "DoesNotExist"}]}}})
    ref = [{"name": "gw", "namespace": "default"}]
    yes = translate(gateway(listeners=[chosen]), http_route(namespace="a", parents=ref), namespace("a", env="prod"))
    no = translate(gateway(listeners=[chosen]), http_route(namespace="b", parents=ref), namespace("b", env="prod", legacy="1"))
    assert parent_conditions(yes, "a/route")["Accepted"][0] is True
    assert parent_conditions(no, "b/route")["Accepted"][0] is False


def test_listener_kinds_restrict_route_kinds():
    only_grpc = listener(allowedRoutes={"kinds": [{"kind": "GRPCRoute"}]})
    t = translate(gateway(listeners=[only_grpc]), http_route())
    assert parent_conditions(t)["Accepted"] == (False, "NotAllowedByListeners")


def test_listener_that_is_not_accepted_takes_no_routes():
    t = translate(gateway(listeners=[listener("alt", 8000)]), http_route())
    assert parent_conditions(t)["Accepted"] == (False, "NotAllowedByListeners")


# --- hostnames ----------------------------------------------------------------------------------

@pytest.mark.parametrize("listener_host, route_hosts, served", [
    (None, None, ["*"]),
    (None, ["a.example.com", "*.b.example.com"], ["*.b.example.com", "a.example.com"]),
    ("a.example.com", None, ["a.example.com"]),
    ("a.example.com", ["a.example.com", "b.example.com"], ["a.example.com"]),
    ("a.example.com", ["*.example.com"], ["a.example.com"]),
    ("*.example.com", ["x.example.com", "y.other.com"], ["x.example.com"]),
    ("*.example.com", ["*.com"], ["*.example.com"]),
    ("*.example.com", ["*.x.example.com"], ["*.x.example.com"]),
    ("*.example.com", ["example.com"], []),
])
def test_hostname_intersection(listener_host, route_hosts, served):
    t = translate(gateway(listeners=[listener(hostname=listener_host)]), http_route(hostnames=route_hosts))
    assert sorted(h.hostname for h in t.table.hosts) == served
    expected = (True, "Accepted") if served else (False, "NoMatchingListenerHostname")
    assert parent_conditions(t)["Accepted"] == expected


def test_hosts_are_ordered_most_specific_first():
    t = translate(gateway(), http_route(hostnames=["*.example.com", "a.example.com", "*.a.example.com"]),
                  http_route("any"))
    assert [h.hostname for h in t.table.hosts] == ["a.example.com", "*.a.example.com", "*.example.com", "*"]


def test_listener_hostname_isolation_exact_listener_gets_its_own_host():
    gw = gateway(listeners=[listener("wild", hostname="*.example.com"), listener("foo", hostname="foo.example.com")])
    t = translate(gw, http_route("w", parents=[{"name": "gw", "sectionName": "wild"}]),
                  http_route("f", parents=[{"name": "gw", "sectionName": "foo"}]))
    assert entries(t, "foo.example.com") == [("HTTPRoute default/f", 0, "PathPrefix", "/")]
    assert entries(t, "*.example.com") == [("HTTPRoute default/w", 0, "PathPrefix", "/")]


# --- matches and precedence ---------------------------------------------------------------------

def test_matches_default_to_prefix_slash_and_keep_headers_query_method():
    match = {"path": {"type": "Exact", "value": "/a"}, "headers": [{"name": "X-Env", "value": "prod"},
             {"name": "x-re", "value": "^v[0-9]+$", "type": "RegularExpression"}],
             "queryParams": [{"name": "Debug", "value": "1"}], "method": "GET"}
    t = translate(gateway(), http_route(rules=[rule(matches=[match]), {"backendRefs": [backend()]}]))
    first, second = host(t).entries
    assert first.match.path.kind == "Exact" and first.match.method == "GET"
    assert first.match.headers == (HeaderMatch("x-env", "prod"), HeaderMatch("x-re", "^v[0-9]+$", True))
    assert first.match.query == (HeaderMatch("Debug", "1"),)
    assert (second.match.path.kind, second.match.path.value) == ("PathPrefix", "/")


def test_precedence_exact_then_prefix_and_regex_by_length_then_root():
    # The Lua router's order for Ingress paths: a regex beats only shorter prefixes.
    rules = [rule(matches=[path("/")]), rule(matches=[path("/a")]), rule(matches=[path("/a/b/")]),
             rule(matches=[path("/a", "Exact")]), rule(matches=[path("/r.*", "RegularExpression")]),
             rule(matches=[path("/a/b", "RegularExpression")]), rule(matches=[path("/.", "RegularExpression")])]
    t = translate(gateway(), http_route(rules=rules))
    assert [(k, v) for _, _, k, v in entries(t)] == [
        ("Exact", "/a"), ("PathPrefix", "/a/b/"), ("RegularExpression", "/r.*"), ("RegularExpression", "/a/b"),
        ("PathPrefix", "/a"), ("RegularExpression", "/."), ("PathPrefix", "/")]


def test_precedence_method_then_header_count_then_query_count():
    rules = [rule(matches=[path("/")]),
             rule(matches=[{**path("/"), "queryParams": [{"name": "q", "value": "1"}]}]),
             rule(matches=[{**path("/"), "headers": [{"name": "a", "value": "1"}]}]),
             rule(matches=[{**path("/"), "headers": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]}]),
             rule(matches=[{**path("/"), "method": "POST"}])]
    t = translate(gateway(), http_route(rules=rules))
    assert [r for _, r, _, _ in entries(t)] == [4, 3, 2, 1, 0]


def test_precedence_across_routes_oldest_then_name_then_rule_order():
    young = http_route("a-young", created="2026-03-01T00:00:00Z")
    old = http_route("z-old", created="2026-01-01T00:00:00Z")
    same_age = http_route("b-same", created="2026-03-01T00:00:00Z", rules=[rule(), rule()])
    t = translate(gateway(), young, old, same_age)
    assert [(r, i) for r, i, _, _ in entries(t)] == [
        ("HTTPRoute default/z-old", 0), ("HTTPRoute default/a-young", 0), ("HTTPRoute default/b-same", 0),
        ("HTTPRoute default/b-same", 1)]


def test_matching_across_routes_longer_path_wins_over_older_route():
    old = http_route("old", created="2026-01-01T00:00:00Z", rules=[rule(matches=[path("/")])])
    new = http_route("new", created="2026-02-01T00:00:00Z", rules=[rule(matches=[path("/v2")])])
    t = translate(gateway(), old, new)
    assert [r for r, _, _, _ in entries(t)] == ["HTTPRoute default/new", "HTTPRoute default/old"]


def test_bad_regular_expression_is_unsupported_value():
    t = translate(gateway(), http_route(rules=[rule(matches=[path("/(", "RegularExpression")])]))
    assert parent_conditions(t)["Accepted"] == (False, "UnsupportedValue")
    assert t.table.hosts == ()


def test_a_regular_expression_only_python_accepts_is_unsupported_value():
    """Lua's engine (PCRE) matches the route, so it decides: ``(?a)`` is valid
    for Python's re, not for PCRE."""
    t = translate(gateway(), http_route(rules=[rule(matches=[path("/(?a)x", "RegularExpression")])]))
    assert parent_conditions(t)["Accepted"] == (False, "UnsupportedValue")
    assert t.table.hosts == ()


def test_one_unsupported_rule_is_dropped_and_reported_partially_invalid():
    rules = [rule(matches=[path("/ok")]), rule(matches=[path("/x")], filters=[
        {"type": "ExtensionRef", "extensionRef": {"group": "acme.io", "kind": "Thing", "name": "t"}}])]
    t = translate(gateway(), http_route(rules=rules))
    conds = parent_conditions(t)
    assert conds["Accepted"] == (True, "Accepted") and conds["PartiallyInvalid"] == (True, "UnsupportedValue")
    assert [v for _, _, _, v in entries(t)] == ["/ok"]


# --- backends ------------------------------------------------------------------------------------

def test_weights_are_kept_and_zero_weight_gets_no_traffic():
    t = translate(gateway(), http_route(rules=[rule(backend("a", weight=3), backend("b", weight=1), backend("c", weight=0))]),
                  service("a"), service("b"), service("c"))
    assert action(t).backends == (WeightedBackend("default/a", 80, 3), WeightedBackend("default/b", 80, 1))


def test_all_zero_weights_or_no_backends_answer_500():
    zero = translate(gateway(), http_route(rules=[rule(backend(weight=0))]))
    assert action(zero).status == 500 and action(zero).backends == ()
    none = translate(gateway(), http_route(rules=[{"matches": [path("/")]}]))
    assert action(none).status == 500
    assert parent_conditions(none) == {"Accepted": (True, "Accepted"), "ResolvedRefs": (True, "ResolvedRefs")}


def test_missing_service_is_backend_not_found_and_its_rule_answers_500_while_others_serve():
    rules = [rule(backend("gone"), matches=[path("/bad")]), rule(matches=[path("/good")])]
    t = translate(gateway(), http_route(rules=rules), service())
    assert parent_conditions(t) == {"Accepted": (True, "Accepted"), "ResolvedRefs": (False, "BackendNotFound")}
    by_path = {e.match.path.value: e.action for e in host(t).entries}
    assert by_path["/bad"].status == 500
    assert by_path["/good"].backends == (WeightedBackend("default/svc", 80, 1),)


def test_invalid_backend_keeps_its_share_as_500():
    t = translate(gateway(), http_route(rules=[rule(backend(), backend("gone", weight=1))]), service())
    assert action(t).backends == (WeightedBackend("default/svc", 80, 1), WeightedBackend(None, 80, 1))
    assert action(t).status is None


def test_service_port_must_exist():
    t = translate(gateway(), http_route(rules=[rule(backend(port=8080))]), service())
    assert parent_conditions(t)["ResolvedRefs"] == (False, "BackendNotFound")


def test_backend_of_another_kind_is_invalid_kind():
    t = translate(gateway(), http_route(rules=[rule(backend(group="acme.io", kind="Bucket"))]))
    assert parent_conditions(t)["ResolvedRefs"] == (False, "InvalidKind")
    assert action(t).status == 500


def test_cross_namespace_backend_needs_a_reference_grant():
    route = http_route(rules=[rule(backend(namespace="backends"))])
    svc = service(namespace="backends")
    denied = translate(gateway(), route, svc)
    assert parent_conditions(denied)["ResolvedRefs"] == (False, "RefNotPermitted")
    assert action(denied).status == 500
    allowed = translate(gateway(), route, svc, grant("backends", "default"))
    assert parent_conditions(allowed)["ResolvedRefs"] == (True, "ResolvedRefs")
    assert action(allowed).backends == (WeightedBackend("backends/svc", 80, 1),)
    wrong_kind = translate(gateway(), route, svc, grant("backends", "default", from_kind="GRPCRoute"))
    assert parent_conditions(wrong_kind)["ResolvedRefs"] == (False, "RefNotPermitted")


def test_backend_app_protocol_the_route_cannot_speak_is_unsupported_protocol():
    t = translate(gateway(), http_route(), service(app_protocol="kubernetes.io/wss"))
    assert parent_conditions(t)["ResolvedRefs"] == (False, "UnsupportedProtocol")
    h2c = translate(gateway(), http_route(), service(app_protocol="kubernetes.io/h2c"))
    assert action(h2c).backends[0].app_protocol == "kubernetes.io/h2c"


# --- filters ------------------------------------------------------------------------------------

def test_request_and_response_header_modifiers():
    filters = [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{"name": "X-Set", "value": "1"}], "add": [{"name": "X-Add", "value": "2"}],
                    "remove": ["X-Gone"]}},
               {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{"name": "X-Resp", "value": "3"}]}}]
    t = translate(gateway(), http_route(rules=[rule(filters=filters)]))
    assert action(t).request_headers == HeaderModifier((("X-Set", "1"),), (("X-Add", "2"),), ("X-Gone",))
    assert action(t).response_headers == HeaderModifier((("X-Resp", "3"),), (), ())


def test_redirect_defaults_to_the_listener_scheme_and_port_and_302():
    redirect = [{"type": "RequestRedirect", "requestRedirect": {"hostname": "new.example"}}]
    t = translate(gateway(listeners=[listener("alt", 8000)]), http_route(rules=[{"filters": redirect}]),
                  options=GatewayOptions(listener_ports={8000: 18000}))
    assert action(t, port=18000).redirect == Redirect(302, "http", "new.example", 8000)


@pytest.mark.parametrize("spec, expected", [
    ({"scheme": "https"}, Redirect(302, "https", None, None)),
    ({"scheme": "https", "port": 8443}, Redirect(302, "https", None, 8443)),
    ({"port": 80}, Redirect(302, "http", None, None)),
    ({"statusCode": 301}, Redirect(301, "http", None, None)),
    ({"statusCode": 308, "path": {"type": "ReplaceFullPath", "replaceFullPath": "/new"}},
     Redirect(308, "http", None, None, "ReplaceFullPath", "/new")),
])
def test_redirect_scheme_port_status_and_path(spec, expected):
    t = translate(gateway(), http_route(rules=[{"filters": [{"type": "RequestRedirect", "requestRedirect": spec}]}]))
    assert action(t).redirect == expected


def test_redirect_replace_prefix_match_carries_the_matched_prefix():
    filters = [{"type": "RequestRedirect", "requestRedirect": {
        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}}]
    t = translate(gateway(), http_route(rules=[{"matches": [path("/v1")], "filters": filters}]))
    assert action(t).redirect == Redirect(302, "http", None, None, "ReplacePrefixMatch", "/v2", "/v1")


def test_replace_prefix_match_without_one_prefix_match_is_dropped():
    filters = [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}]
    t = translate(gateway(), http_route(rules=[rule(matches=[path("/a", "Exact")], filters=filters)]))
    assert parent_conditions(t)["Accepted"] == (False, "UnsupportedValue")


def test_url_rewrite_hostname_and_prefix():
    filters = [{"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example",
                                                      "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}]
    t = translate(gateway(), http_route(rules=[rule(matches=[path("/api")], filters=filters)]))
    assert action(t).rewrite == Rewrite("internal.example", "ReplacePrefixMatch", "/", "/api")


def test_request_mirror_with_percent_and_fraction():
    filters = [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "shadow", "port": 80}, "percent": 25}},
               {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "shadow", "port": 80},
                                                           "fraction": {"numerator": 1, "denominator": 3}}}]
    t = translate(gateway(), http_route(rules=[rule(filters=filters)]), service(), service("shadow"))
    assert action(t).mirrors == (Mirror("default/shadow", 80, 25, 100), Mirror("default/shadow", 80, 1, 3))


def test_request_mirror_to_a_missing_service_is_skipped_and_reported():
    filters = [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "gone", "port": 80}}}]
    t = translate(gateway(), http_route(rules=[rule(filters=filters)]), service())
    assert action(t).mirrors == () and action(t).backends
    assert parent_conditions(t)["ResolvedRefs"] == (False, "BackendNotFound")


def test_cors_filter():
    filters = [{"type": "CORS", "cors": {"allowOrigins": ["https://a.example"], "allowCredentials": True,
                                         "allowMethods": ["GET", "POST"], "allowHeaders": ["X-A"],
                                         "exposeHeaders": ["X-B"], "maxAge": 60}}]
    t = translate(gateway(), http_route(rules=[rule(filters=filters)]))
    assert action(t).cors == Cors(("https://a.example",), True, ("GET", "POST"), ("X-A",), ("X-B",), 60)


def test_timeouts():
    t = translate(gateway(), http_route(rules=[rule(timeouts={"request": "10s", "backendRequest": "1500ms"})]))
    assert (action(t).request_timeout, action(t).backend_timeout) == (10.0, 1.5)
    zero = translate(gateway(), http_route(rules=[rule(timeouts={"request": "0s"})]))
    assert action(zero).request_timeout is None


def test_backend_filters_are_unsupported():
    ref = backend(filters=[{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "a", "value": "b"}]}}])
    t = translate(gateway(), http_route(rules=[rule(ref)]))
    assert parent_conditions(t)["Accepted"] == (False, "UnsupportedValue")


# --- HTTPS, multiple Gateways ---------------------------------------------------------------------

def test_route_on_https_listener_serves_on_the_https_port(cert):
    t = translate(gateway(listeners=[https_listener(hostname="example.com")]), http_route(), tls_secret("cert", *cert))
    assert [h.bind for h in t.table.hosts] == [Bind(None, 443, "HTTPS", 443)]
    redirect = translate(gateway(listeners=[https_listener()]), tls_secret("cert", *cert),
                         http_route(rules=[{"filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "x.example"}}]}]))
    assert action(redirect, port=443).redirect == Redirect(302, "https", "x.example", None)


def test_route_attached_to_two_gateways_in_a_pool_serves_on_both_addresses():
    options = GatewayOptions(address_pool=("10.0.0.1", "10.0.0.2"))
    t = translate(gateway("a"), gateway("b", created="2026-02-01T00:00:00Z"),
                  http_route("ra", parents=[{"name": "a"}], rules=[rule(matches=[path("/a")])]),
                  http_route("rb", parents=[{"name": "b"}], rules=[rule(matches=[path("/b")])]), options=options)
    assert entries(t, address="10.0.0.1") == [("HTTPRoute default/ra", 0, "PathPrefix", "/a")]
    assert entries(t, address="10.0.0.2") == [("HTTPRoute default/rb", 0, "PathPrefix", "/b")]


def test_route_to_a_conflicted_listener_is_accepted_but_not_served():
    t = translate(gateway("old"), gateway("new", created="2026-02-01T00:00:00Z"),
                  http_route(parents=[{"name": "new"}]))
    assert parent_conditions(t)["Accepted"] == (True, "Accepted")
    assert t.table.hosts == ()


def test_observed_generation_follows_the_route():
    t = translate(gateway(), http_route(generation=7))
    assert t.http_routes["default/route"].generation == 7


# --- GRPCRoute ------------------------------------------------------------------------------------

def test_grpc_service_and_method_matching():
    rules = [rule(matches=[{"method": {"service": "echo.Echo", "method": "Ping"}}]),
             rule(matches=[{"method": {"service": "echo.Echo"}}]),
             rule(matches=[{"method": {"method": "Ping"}}]),
             rule(matches=[{"method": {"type": "RegularExpression", "service": "echo\\..*"}}])]
    t = translate(gateway(), grpc_route(rules=rules))
    assert parent_conditions(t, "default/grpc", kind="grpc") == {"Accepted": (True, "Accepted"),
                                                                "ResolvedRefs": (True, "ResolvedRefs")}
    got = {e.rule: (e.match.path.kind, e.match.path.value) for e in host(t).entries}
    assert got == {0: ("Exact", "/echo.Echo/Ping"), 1: ("PathPrefix", "/echo.Echo"),
                   2: ("RegularExpression", "^/[^/]+/Ping$"), 3: ("RegularExpression", "^/echo\\..*/[^/]+$")}
    assert all(e.match.headers[0] == HeaderMatch("content-type", "^application/grpc", True) and e.action.grpc
               for e in host(t).entries)


def test_grpc_entries_come_before_http_entries_on_a_host():
    t = translate(gateway(), http_route(rules=[rule(matches=[path("/x", "Exact")])]), grpc_route())
    assert [r for r, _, _, _ in entries(t)] == ["GRPCRoute default/grpc", "HTTPRoute default/route"]


def test_grpc_precedence_longer_service_then_method_then_headers():
    rules = [rule(matches=[{"method": {"service": "a.B"}}]),
             rule(matches=[{"method": {"service": "a.Bc"}}]),
             rule(matches=[{"method": {"service": "a.B"}, "headers": [{"name": "x", "value": "1"}]}])]
    t = translate(gateway(), grpc_route(rules=rules))
    assert [i for _, i, _, _ in entries(t)] == [1, 2, 0]


def test_grpc_header_filters_and_weights():
    filters = [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "x", "value": "1"}]}}]
    t = translate(gateway(), grpc_route(rules=[rule(backend("a", weight=2), backend("b"), filters=filters)]),
                  service("a", app_protocol="kubernetes.io/h2c"), service("b"))
    act = action(t)
    assert act.request_headers == HeaderModifier((), (("x", "1"),), ())
    assert [(b.service, b.weight) for b in act.backends] == [("default/a", 2), ("default/b", 1)]


def test_grpc_backend_with_http1_app_protocol_is_unsupported_protocol():
    t = translate(gateway(), grpc_route(), service(app_protocol="http"))
    assert parent_conditions(t, "default/grpc", kind="grpc")["ResolvedRefs"] == (False, "UnsupportedProtocol")
