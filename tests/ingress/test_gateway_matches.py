"""Gateway API matches and weighted backends, from the route table to the
router's payload, on plain data: gateway_matches (entry -> conditions and
split), gateway_lowering (candidates per path), route_choice and routes.py
(the payload), and the model's checks."""

from __future__ import annotations

import pytest

from platformd.ingress import validate as v
from platformd.ingress.gateway_matches import ANSWER_500, backends, conditions
from platformd.ingress.gateway_model import HeaderMatch, WeightedBackend
from platformd.ingress.model import Configuration, Location, PathMatch, Server
from platformd.ingress.route_choice import Conditions, ValueMatch
from platformd.ingress.routes import payload
from tests.ingress.gateway_objects import backend, gateway, grpc_route, http_route, path, rule, service
from tests.ingress.test_gateway_lowering import _lower


def _name(service: str, port: int) -> str:
    return f"{service.replace('/', '.')}.{port}.route"


def test_one_valid_backend_is_the_plain_case():
    assert backends([WeightedBackend("ns/a", 80, 1)], _name) == ("ns.a.80.route", (), (("ns/a", 80),))
    # Weight 0 takes nothing: the other backend takes every request.
    assert backends([WeightedBackend("ns/a", 80, 5), WeightedBackend("ns/b", 80, 0)], _name)[0] == "ns.a.80.route"


def test_several_backends_split_and_an_invalid_one_keeps_its_share():
    name, split, targets = backends([WeightedBackend("ns/a", 80, 3), WeightedBackend(None, 80, 1),
                                     WeightedBackend("ns/b", 8080, 0), WeightedBackend("ns/b", 80, 2)], _name)
    assert name is None
    assert split == (("ns.a.80.route", 3), (None, 1), ("ns.b.80.route", 2))
    assert targets == (("ns/a", 80), ("ns/b", 80))


@pytest.mark.parametrize("weighted", [[], [WeightedBackend("ns/a", 80, 0)], [WeightedBackend(None, 80, 1)]])
def test_no_backend_that_takes_requests_answers_500(weighted):
    name, split, _ = backends(weighted, _name)
    assert name is None and (split == ANSWER_500 or all(n is None for n, _ in split))


def test_conditions_of_a_match_beyond_its_path():
    assert conditions((), (), None) is None
    c = conditions((HeaderMatch("x-env", "canary"),), (HeaderMatch("q", "^a", True),), "POST")
    assert c == Conditions((ValueMatch("x-env", "canary"),), (ValueMatch("q", "^a", True),), "POST")
    assert c.payload() == {"headers": [["x-env", "canary", False]], "query": [["q", "^a", True]], "method": "POST"}


@pytest.mark.parametrize("headers, query, method", [
    ((ValueMatch("x-a", 'a"; evil'),), (), None),  # fine: a value is data, not config
])
def test_exact_values_are_data(headers, query, method):
    assert Conditions(headers, query, method).headers == headers


@pytest.mark.parametrize("headers, query, method", [
    ((ValueMatch("x a", "1"),), (), None),
    ((ValueMatch("X-Upper", "1"),), (), None),
    ((ValueMatch("x", "1\n2"),), (), None),
    ((ValueMatch("x", "a" * 5000),), (), None),
    ((ValueMatch("x", "(unclosed", True),), (), None),
    ((), (ValueMatch("", "1"),), None),
    ((), (ValueMatch("q\n", "1"),), None),
    ((), (), "GET;"),
    ((), (), None),
])
def test_hostile_or_empty_conditions_are_refused(headers, query, method):
    with pytest.raises(v.ValidationError):
        Conditions(headers, query, method)


def test_locations_of_one_path_need_distinct_conditions_and_the_plain_one_last():
    cond = Conditions(method="GET")
    Server("a.example", locations=(Location("/", backend="a", conditions=cond), Location("/", backend="b")))
    with pytest.raises(v.ValidationError, match="duplicate"):
        Server("a.example", locations=(Location("/", backend="b"), Location("/", backend="a", conditions=cond)))
    with pytest.raises(v.ValidationError, match="duplicate"):
        Server("a.example", locations=(Location("/", backend="a", conditions=cond),
                                       Location("/", backend="b", conditions=cond)))
    with pytest.raises(v.ValidationError):
        Location("/", split=(("a", 0),))
    with pytest.raises(v.ValidationError):
        Location("/", split=(("bad name;", 1),))
    assert Location("/", split=((None, 1),)).backend is None


def test_lowering_keeps_every_candidate_of_a_path_in_precedence_order():
    route = http_route(hostnames=["web.example"], rules=[
        rule(backend("svc"), matches=[path("/")]),
        rule(backend("svc"), matches=[{**path("/"), "headers": [{"name": "X-Env", "value": "canary"}]}]),
        rule(backend("svc"), matches=[{**path("/"), "method": "POST"}]),
        rule(backend("svc"), matches=[{**path("/"), "queryParams": [{"name": "v", "value": "2"}]},
                                      {**path("/"), "queryParams": [{"name": "v", "value": "2"}]}]),
    ])
    out = _lower(gateway(), route, service())
    located = [(loc.conditions.method if loc.conditions else None,
                [h.name for h in loc.conditions.headers] if loc.conditions else None,
                [q.name for q in loc.conditions.query] if loc.conditions else None)
               for loc in out.servers[0].locations]
    # Method first, then header matches, then query matches, then none; the repeated match once.
    assert located == [("POST", [], []), (None, ["x-env"], []), (None, [], ["v"]), (None, None, None)]
    assert out.skipped == ()


def test_lowering_weights_invalid_backends_and_missing_backends():
    route = http_route(hostnames=["web.example"], rules=[
        rule(backend("svc", weight=3), backend("gone", weight=1), matches=[path("/split")]),
        rule(backend("gone"), matches=[path("/gone")]),
        {"matches": [path("/none")]},
    ])
    out = _lower(gateway(), route, service())
    by_path = {loc.path: loc for loc in out.servers[0].locations}
    assert by_path["/split"].split == (("default.svc.80.route", 3), (None, 1))
    assert by_path["/gone"].split == ANSWER_500 and by_path["/none"].split == ANSWER_500
    assert [b.name for b in out.backends] == ["default.svc.80.route"]


def test_grpc_entries_keep_their_grpc_conditions_so_http_requests_fall_through():
    grpc_content = ValueMatch("content-type", "^application/grpc", True)
    out = _lower(gateway(), grpc_route(hostnames=["rpc.example"], rules=[
        rule(matches=[{"method": {"service": "echo.Echo", "method": "Ping"},
                       "headers": [{"name": "x-tenant", "value": "a", "type": "RegularExpression"}]}]),
        rule(matches=[{"method": {"service": "echo.Echo", "method": "Ping"}}])]),
        http_route(hostnames=["rpc.example"], rules=[rule(matches=[path("/echo.Echo/Ping", "Exact")])]), service())
    tenant, plain_grpc, http = out.servers[0].locations
    assert tenant.conditions == Conditions((grpc_content, ValueMatch("x-tenant", "a", True)), (), "POST")
    assert plain_grpc.conditions == Conditions((grpc_content,), (), "POST")
    assert (http.path, http.conditions, http.proxy.protocol.value) == ("/echo.Echo/Ping", None, "HTTP")


def _route_of(table, path_kind, path):
    return table["hosts"]["a.example"][path_kind][path]


def test_the_payload_chains_candidates_and_ships_conditions_and_splits():
    cond = Conditions(headers=(ValueMatch("x-env", "canary"),))
    config = Configuration(servers=(Server("a.example", locations=(
        Location("/api", backend="api"),
        Location("/", backend="canary", conditions=cond),
        Location("/", split=(("a", 1), (None, 1)), conditions=Conditions(method="GET")),
        Location("/", backend="web"),
        Location("/v[0-9]+", match=PathMatch.REGEX, backend="r1", conditions=cond),
        Location("/v[0-9]+", match=PathMatch.REGEX, backend="r2"),
    )),))
    table = payload(config)
    root = _route_of(table, "prefix", "/")
    assert (root["backend"], root["when"]) == ("canary", {"headers": [["x-env", "canary", False]]})
    assert (root["next"]["split"], root["next"]["when"]) == ([["a", 1], [None, 1]], {"method": "GET"})
    assert root["next"]["next"]["backend"] == "web" and "when" not in root["next"]["next"]
    [regex] = table["hosts"]["a.example"]["regex"]
    assert (regex["backend"], regex["next"]["backend"], regex["pattern"]) == ("r1", "r2", "^/v[0-9]+")
    # A plain route ships as before (no new keys) and keeps the fast path; a chosen one does not.
    api = _route_of(table, "prefix", "/api")
    assert set(api) == {"backend", "policy", "rewrite", "zone"}
    assert table["policies"][api["policy"]]["fast"] is True
    assert table["policies"][root["policy"]]["fast"] is False
    assert table["policies"][root["next"]["next"]["policy"]]["fast"] is True


def test_prefix_paths_with_and_without_a_trailing_slash_are_one_chain():
    route = http_route(hostnames=["web.example"], rules=[
        rule(backend("svc"), matches=[path("/foo/")]),
        rule(backend("svc"), matches=[{**path("/foo"), "headers": [{"name": "x", "value": "1"}]}]),
    ])
    out = _lower(gateway(), route, service())
    assert out.skipped == ()
    assert [(loc.path, loc.conditions is None) for loc in out.servers[0].locations] == [("/foo", False),
                                                                                        ("/foo", True)]


def test_the_server_cache_reuses_unchanged_hosts_and_equals_a_fresh_lowering():
    from platformd.ingress.gateway_lowering import LoweringCache, lower
    from tests.ingress.gateway_objects import NOW, translate

    def routes(version):
        return [http_route("a", hostnames=["a.example"], rules=[rule(backend("svc"), matches=[path("/")])]),
                http_route("b", hostnames=["b.example"], rules=[rule(backend("svc"), matches=[
                    {**path("/"), "headers": [{"name": "v", "value": version}]}])])]

    def lowered(version, cache):
        t = translate(gateway(), *routes(version), service())
        return lower(t.table, http_port=80, https_port=443, services={"default/svc": service()},
                     slices=lambda key: (), secrets={}, now=NOW, cache=cache)

    cache = LoweringCache()
    first = lowered("1", cache)
    second = lowered("2", cache)
    assert second == lowered("2", None)  # the same result as without the cache
    assert second.servers[0] is first.servers[0]  # a.example: unchanged, the very same object
    assert second.servers[1] is not first.servers[1] and second.servers[1] != first.servers[1]
    assert second.backends[0] is first.backends[0]  # the same Service port with the same endpoints


def test_an_ingress_path_stays_the_fallback_of_a_route_path_with_conditions_only():
    from platformd.ingress.gateway_lowering import merge

    ingress = Server("a.example", locations=(Location("/", backend="ing-root"), Location("/api", backend="ing-api"),
                                             Location("/v1", backend="ing-v1")))
    route = Server("a.example", locations=(
        Location("/", backend="gw-canary", conditions=Conditions(headers=(ValueMatch("x-env", "canary"),))),
        Location("/api", backend="gw-api"),
        Location("/v1", backend="gw-post", conditions=Conditions(method="POST")),
        Location("/v1", backend="gw-v1")))
    [merged] = merge([ingress], [route])
    assert [(loc.path, loc.backend) for loc in merged.locations] == [
        ("/api", "gw-api"),  # the route names it plainly: it takes it
        ("/v1", "gw-post"), ("/v1", "gw-v1"),  # the route's own plain candidate ends the path
        ("/", "gw-canary"), ("/", "ing-root")]  # the Ingress answers what the condition does not take
