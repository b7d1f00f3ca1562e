"""Matches and weights (gwmatch) inside the per-address / per-port tables,
the any-host entry and beside redirects and timeouts (gwlisten): plain data;
through nginx in tests/ingress_e2e/test_gateway_matching.py."""

from platformd.ingress import routes
from platformd.ingress.gateway_dataplane import extend
from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_lowering import LoweringCache, lower
from platformd.ingress.deadline import Deadline
from platformd.ingress.model import Configuration, Location, RequestRedirect
from platformd.ingress.route_choice import Conditions, ValueMatch
from tests.ingress.gateway_objects import (
    NOW, backend, gateway, http_route, listener, path, rule, service, translate,
)

POOL = GatewayOptions(address_pool=("10.0.0.1",))
CANARY = [{**path("/"), "headers": [{"name": "x-env", "value": "canary"}]}]


def _services():
    return {f"default/{name}": service(name) for name in ("svc", "canary", "web")}


def _lower(*objects, options=None, cache=None):
    t = translate(*objects, *_services().values(), options=options)
    return lower(t.table, http_port=80, https_port=443, services=_services(), slices=lambda key: (), secrets={},
                 now=NOW, cache=cache)


def _route(hostnames=("a.example",)):
    return http_route(hostnames=list(hostnames), rules=[
        rule(backend("canary"), matches=CANARY),
        rule(backend("svc", weight=3), backend("web", weight=1), matches=[path("/")],
             timeouts={"request": "5s"}),
        {"matches": [{**path("/old"), "method": "GET"}],
         "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}]}])


def test_a_pool_address_table_carries_conditions_splits_redirects_and_timeouts():
    out = _lower(gateway(), _route(), options=POOL)
    assert out.skipped == () and out.servers == ()
    [table] = out.bound
    [server] = table.servers
    by = [(loc.path, loc.backend, loc.split, loc.conditions is not None, loc.request_redirect is not None)
          for loc in server.locations]
    assert ("/", "default.canary.80.route", (), True, False) in by
    assert ("/", None, (("default.svc.80.route", 3), ("default.web.80.route", 1)), False, False) in by
    assert ("/old", None, (), True, True) in by
    [split] = [loc for loc in server.locations if loc.split]
    assert split.deadline == Deadline(request_ms=5000)
    # In the payload the bound host chains its candidates like a host of the shared table.
    data = routes.payload(Configuration(bound=out.bound, backends=out.backends))
    [bind] = data["binds"]
    root = bind["hosts"]["a.example"]["prefix"]["/"]
    assert root["backend"] == "default.canary.80.route" and root["when"] == {"headers": [["x-env", "canary", False]]}
    assert root["next"]["split"] == [["default.svc.80.route", 3], ["default.web.80.route", 1]]
    old = bind["hosts"]["a.example"]["prefix"]["/old"]
    assert old["when"] == {"method": "GET"}
    assert data["policies"][old["policy"]]["request_redirect"]["scheme"] == "https"


def test_an_any_host_route_with_conditions_only_keeps_the_ingress_catch_all_as_its_last_candidate():
    out = _lower(gateway(), http_route(rules=[rule(backend("canary"), matches=CANARY)]))
    assert [(loc.path, loc.conditions is not None) for loc in out.any_host] == [("/", True)]
    ingress = (Location("/", backend="ing-root"),)
    merged, _ = extend(Configuration(default_server_locations=ingress), out)
    assert [(loc.path, loc.backend) for loc in merged.default_server_locations] == [
        ("/", "default.canary.80.route"), ("/", "ing-root")]


def test_a_bound_host_on_a_shared_port_keeps_the_ingress_path_behind_its_conditions(tmp_path):
    # Other routes on the HTTP listener than on the HTTPS one: a table per port, joined with the Ingress paths.
    from tests.helpers.certs import self_signed
    from tests.ingress.gateway_objects import tls_secret
    cert, key = self_signed("a.example", tmp_path)
    secret = tls_secret("cert", cert, key)
    gw = gateway(listeners=[listener("http", 80, hostname="a.example"),
                            listener("https", 443, "HTTPS", "a.example", tls={"certificateRefs": [{"name": "cert"}]})])
    http = http_route("http", parents=[{"name": "gw", "sectionName": "http"}], rules=[
        rule(backend("canary"), matches=CANARY)])
    https = http_route("https", parents=[{"name": "gw", "sectionName": "https"}], rules=[rule(backend("web"))])
    t = translate(gw, http, https, secret, *_services().values())
    out = lower(t.table, http_port=80, https_port=443, services=_services(), slices=lambda key: (),
                secrets={"default/cert": secret}, now=NOW)
    from platformd.ingress.model import Server
    config = Configuration(servers=(Server("a.example", locations=(Location("/", backend="ing-root"),)),))
    merged, _ = extend(config, out)
    [plain] = [b for b in merged.bound if b.port == 80]
    [server] = plain.servers
    assert [(loc.path, loc.backend) for loc in server.locations] == [
        ("/", "default.canary.80.route"), ("/", "ing-root")]


def test_the_cache_reuses_unchanged_hosts_of_bound_tables_and_equals_a_fresh_lowering():
    cache = LoweringCache()
    a = http_route("a", hostnames=["a.example"], rules=[rule(backend("svc"))])
    first = _lower(gateway(), a, _route(["b.example"]), options=POOL, cache=cache)
    changed = http_route("b", hostnames=["b.example"], rules=[rule(backend("web"), matches=CANARY)])
    second = _lower(gateway(), a, changed, options=POOL, cache=cache)
    assert second == _lower(gateway(), a, changed, options=POOL)
    [before], [after] = first.bound, second.bound
    assert after.servers[0] is before.servers[0]  # a.example: unchanged, the very same object
    assert after.servers[1] != before.servers[1]
