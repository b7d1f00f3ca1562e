"""Listener isolation on the shared ports (GatewayHTTPListenerIsolation), on
plain data: the Gateway's wildcard hosts are handed over a second time
(gateway_wildcards), with the Gateway's own locations only, and reach the
routes meta section as "wildcards"; Ingress wildcards never do."""

from platformd.ingress import routes
from platformd.ingress.gateway_dataplane import extend
from platformd.ingress.model import Configuration, Location, Server
from tests.ingress.gateway_objects import backend, gateway, http_route, listener, path, rule, service
from tests.ingress.test_gateway_lowering import _lower

LISTENERS = [listener("empty-hostname"), listener("wildcard-example-com", hostname="*.example.com"),
             listener("wildcard-foo-example-com", hostname="*.foo.example.com"),
             listener("abc-foo-example-com", hostname="abc.foo.example.com")]


def _routes():
    return [http_route(f"to-{section}", parents=[{"name": "gw", "sectionName": section}],
                       rules=[rule(backend("svc"), matches=[path(f"/{section}")])])
            for section in ("empty-hostname", "wildcard-example-com", "wildcard-foo-example-com",
                            "abc-foo-example-com")]


def test_each_listener_is_a_host_of_its_own_routes_and_wildcards_are_handed_over():
    out = _lower(gateway(listeners=LISTENERS), *_routes(), service())
    by_name = {s.hostname: [loc.path for loc in s.locations] for s in out.servers}
    assert by_name == {"*.example.com": ["/wildcard-example-com"], "*.foo.example.com": ["/wildcard-foo-example-com"],
                       "abc.foo.example.com": ["/abc-foo-example-com"]}
    assert [loc.path for loc in out.any_host] == ["/empty-hostname"]
    assert sorted(s.hostname for s in out.wildcards) == ["*.example.com", "*.foo.example.com"]
    assert all(w in out.servers for w in out.wildcards)


def test_the_wildcards_keep_the_gateways_own_locations_when_an_ingress_shares_the_name():
    out = _lower(gateway(listeners=LISTENERS), *_routes(), service())
    ingress = Configuration(servers=(Server("*.example.com", locations=(Location("/ingress", backend="old"),)),
                                     Server("*.ing.example.com", locations=(Location("/", backend="old"),))))
    merged, _ = extend(ingress, out)
    shared = {s.hostname: {loc.path for loc in s.locations} for s in merged.servers}
    assert shared["*.example.com"] == {"/ingress", "/wildcard-example-com"}  # one label: both APIs
    assert {s.hostname: [loc.path for loc in s.locations] for s in merged.gateway_wildcards} == {
        "*.example.com": ["/wildcard-example-com"], "*.foo.example.com": ["/wildcard-foo-example-com"]}

    payload = routes.payload(merged)
    assert sorted(payload["wildcards"]) == ["*.example.com", "*.foo.example.com"]  # never *.ing.example.com
    assert set(payload["wildcards"]["*.example.com"]["prefix"]) == {"/wildcard-example-com"}
    assert all(route["policy"] in payload["policies"]
               for host in payload["wildcards"].values() for route in host["prefix"].values())
    # The meta section carries them (the router reads them from there).
    meta = routes.RouteTable().sections(merged)[0]
    assert sorted(meta["wildcards"]) == ["*.example.com", "*.foo.example.com"]


def test_without_gateway_wildcards_the_payload_is_as_before():
    config = Configuration(servers=(Server("*.example.com", locations=(Location("/", backend="old"),)),))
    assert "wildcards" not in routes.payload(config)
    assert "wildcards" not in routes.RouteTable().sections(config)[0]


def test_bound_tables_get_no_second_copy():
    out = _lower(gateway(listeners=[listener(hostname="*.example.com"), listener("alt", 8080, hostname="*.x.org")]),
                 http_route(rules=[rule(backend("svc"))]), service())
    assert [s.hostname for s in out.wildcards] == ["*.example.com"]


def test_route_hostnames_a_narrower_listener_covers_are_that_listeners():
    # The conformance variant "with hostname intersection": every route names all four hostnames.
    names = ["bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com"]
    routes_ = [http_route(f"to-{section}", parents=[{"name": "gw", "sectionName": section}], hostnames=names,
                          rules=[rule(backend("svc"), matches=[path(f"/{section}")])])
               for section in ("empty-hostname", "wildcard-example-com", "wildcard-foo-example-com",
                               "abc-foo-example-com")]
    out = _lower(gateway(listeners=LISTENERS), *routes_, service())
    assert {s.hostname: [loc.path for loc in s.locations] for s in out.servers} == {
        "bar.com": ["/empty-hostname"], "*.example.com": ["/wildcard-example-com"],
        "*.foo.example.com": ["/wildcard-foo-example-com"], "abc.foo.example.com": ["/abc-foo-example-com"]}


def test_isolated_keeps_names_no_narrower_sibling_covers_whole():
    from platformd.ingress.gateway_hostnames import isolated
    names = ("bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com", "x.example.com")
    siblings = (None, "*.example.com", "*.foo.example.com", "abc.foo.example.com")
    assert isolated(None, names, siblings) == ("bar.com",)
    assert isolated("*.example.com", names[1:], siblings) == ("*.example.com", "x.example.com")
    assert isolated("*.foo.example.com", ("*.foo.example.com", "abc.foo.example.com"), siblings) == (
        "*.foo.example.com",)
    assert isolated("abc.foo.example.com", ("abc.foo.example.com",), siblings) == ("abc.foo.example.com",)
    # Wider siblings and unrelated ones take nothing; one listener alone keeps all.
    assert isolated("*.foo.example.com", ("*.foo.example.com",), ("*.example.com", "*.org", None)) == (
        "*.foo.example.com",)
    assert isolated(None, names, ()) == names
