"""Gateways on their own address or port, hosts for any name, redirects and
timeouts, lowered onto the router's data (plain data; the nginx side is
tests/ingress_e2e/test_gateway_listeners.py)."""

import argparse
from pathlib import Path

import pytest

from platformd.ingress import bound, routes
from platformd.ingress.deadline import Deadline
from platformd.ingress.gateway_dataplane import extend, with_listen_ports
from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_lowering import lower
from platformd.ingress.gateway_setup import _listener_port, options_of
from platformd.ingress.model import (
    BoundHosts, Configuration, Location, PathMatch, RequestRedirect, Server, Timeouts,
)
from platformd.ingress import validate as v
from tests.helpers.certs import self_signed
from tests.ingress.gateway_objects import (
    CONTROLLER, NOW, backend, conditions, gateway, http_route, listener, listener_status, parent_conditions, path, rule, service,
    tls_secret, translate,
)


def _lower(*objects, options=None, secrets=None):
    t = translate(*objects, options=options)
    services = {f"default/{o['metadata']['name']}": o for o in objects if o["kind"] == "Service"}
    return lower(t.table, http_port=80, https_port=443, services=services or {"default/svc": service()},
                 slices=lambda key: (), secrets=secrets or {}, now=NOW)


POOL = GatewayOptions(address_pool=("10.0.0.1", "10.0.0.2"))


def test_each_gateway_gets_a_table_of_its_own_address():
    out = _lower(gateway("a"), gateway("b", created="2026-01-02T00:00:00Z"),
                 http_route("ra", parents=[{"name": "a"}], hostnames=["x.example"]),
                 http_route("rb", parents=[{"name": "b"}]), service(), options=POOL)
    assert out.servers == () and out.any_host == () and out.skipped == ()
    first, second = out.bound
    assert (first.address, first.port, [s.hostname for s in first.servers], first.any_host) == (
        "10.0.0.1", 80, ["x.example"], ())
    assert (second.address, second.port, second.servers) == ("10.0.0.2", 80, ())
    assert [loc.backend for loc in second.any_host] == ["default.svc.80.route"]
    assert [b.name for b in out.backends] == ["default.svc.80.route"]


def test_a_mapped_port_is_a_table_for_any_address():
    out = _lower(gateway(listeners=[listener("alt", 8000)]), http_route(hostnames=["a.example"]), service(),
                 options=GatewayOptions(listener_ports={8000: 18000}))
    [table] = out.bound
    assert (table.address, table.port, [s.hostname for s in table.servers]) == (None, 18000, ["a.example"])
    assert table.key == "* 18000"


def test_https_tables_carry_their_certificate_and_never_redirect_plain_http(tmp_path):
    cert, key = self_signed("s.example", tmp_path)
    secret = tls_secret("cert", cert, key)
    gw = gateway(listeners=[listener("https", 443, "HTTPS", "s.example",
                                     tls={"certificateRefs": [{"name": "cert"}]})])
    out = _lower(gw, http_route(), service(), secret, options=POOL, secrets={"default/cert": secret})
    [table] = out.bound
    [server] = table.servers
    assert (table.port, server.tls, server.tls_certificate) == (443, True, "default/cert")
    assert not any(loc.ssl_redirect for loc in server.locations)
    assert [(c.id, c.hostnames) for c in out.certificates] == [("default/cert", ("s.example",))]


def test_routes_for_any_host_join_the_catch_all_and_win_its_same_paths():
    out = _lower(gateway(), http_route(rules=[rule(matches=[path("/")])]), service())
    assert [loc.path for loc in out.any_host] == ["/"]
    ingress = (Location("/", backend="ing-root"), Location("/only-ingress", backend="ing-other"))
    merged, _ = extend(Configuration(default_server_locations=ingress), out)
    assert {loc.path: loc.backend for loc in merged.default_server_locations} == {
        "/": "default.svc.80.route", "/only-ingress": "ing-other"}


def test_redirects_keep_what_the_filter_leaves_to_the_request():
    def lowered(spec, match="/r"):
        route = http_route(hostnames=["a.example"], rules=[
            {"matches": [path(match)], "filters": [{"type": "RequestRedirect", "requestRedirect": spec}]}])
        out = _lower(gateway(listeners=[listener("alt", 8000)]), route, service(),
                     options=GatewayOptions(listener_ports={8000: 18000}))
        [location] = out.bound[0].servers[0].locations
        return location.request_redirect
    assert lowered({}) == RequestRedirect(302, "http", None, 8000)  # the listener's port
    assert lowered({"scheme": "https"}) == RequestRedirect(302, "https", None, None)  # https's well-known port
    assert lowered({"port": 80, "statusCode": 301}) == RequestRedirect(301, "http", None, None)
    prefix = lowered({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new/"}}, match="/old/")
    assert (prefix.path_kind, prefix.path, prefix.prefix) == ("ReplacePrefixMatch", "/new/", "/old/")
    assert bound.redirect_payload(prefix) == {"code": 302, "scheme": "http", "hostname": None, "port": ":8000",
                                              "path": "/new", "prefix_length": 4}
    root = RequestRedirect(302, "https", "b.example", 8443, "ReplacePrefixMatch", "/", "/")
    assert bound.redirect_payload(root)["path"] == "" and bound.redirect_payload(root)["prefix_length"] == 0


@pytest.mark.parametrize("bad", [
    dict(code=200), dict(scheme="ftp"), dict(hostname="a b"), dict(hostname="*.x.example"), dict(port=0),
    dict(path_kind="ReplaceFullPath", path="/x;y"), dict(path_kind="ReplacePrefixMatch", path="/x", prefix="$"),
])
def test_request_redirects_refuse_unsafe_values(bad):
    fields = dict(code=302, scheme="http")
    with pytest.raises(v.ValidationError):
        RequestRedirect(**{**fields, **bad})


def test_timeouts_become_the_routes_deadline_in_milliseconds():
    def lowered(spec):
        out = _lower(gateway(), http_route(hostnames=["a.example"], rules=[rule(timeouts=spec)]), service())
        return out.servers[0].locations[0]
    assert lowered({"request": "1500ms"}).deadline == Deadline(request_ms=1500)
    assert lowered({"request": "10s", "backendRequest": "3s"}).deadline == Deadline(10000, 3000)
    assert lowered({"backendRequest": "250ms"}).deadline == Deadline(attempt_ms=250)
    assert lowered({"request": "0s"}).deadline is None
    assert lowered({"request": "1500ms"}).proxy.timeouts == Timeouts()  # the deadline decides per attempt


def test_a_backend_request_timeout_longer_than_the_request_drops_the_rule():
    t = translate(gateway(), http_route(rules=[rule(timeouts={"request": "1s", "backendRequest": "2s"})]))
    assert parent_conditions(t)["Accepted"] == (False, "UnsupportedValue")


def test_the_routes_payload_carries_the_bound_tables_and_their_policies():
    redirect = RequestRedirect(308, "https", None, 8443)
    table = BoundHosts("10.0.0.1", 80, (Server("a.example", locations=(Location("/", backend="b1"),)),),
                       any_host=(Location("/", request_redirect=redirect),))
    mapped = BoundHosts(None, 18000, (Server("*.w.example", locations=(Location("/", backend="b2"),)),))
    data = routes.payload(Configuration(bound=(table, mapped)))
    assert [(b["address"], b["port"], b["fallback"], sorted(b["hosts"]), b["default"] is not None)
            for b in data["binds"]] == [(None, 18000, False, ["*.w.example"], False),
                                        ("10.0.0.1", 80, True, ["a.example"], True)]
    any_policy = data["policies"][data["binds"][1]["default"]["prefix"]["/"]["policy"]]
    assert any_policy["request_redirect"] == {"code": 308, "scheme": "https", "hostname": None, "port": ":8443",
                                              "path": None, "prefix_length": None}
    # Without bound tables the payload is as before, with an empty list.
    assert routes.payload(Configuration())["binds"] == []


def test_bound_tables_refuse_two_tables_for_one_address_and_port():
    with pytest.raises(v.ValidationError, match="two tables"):
        Configuration(bound=(BoundHosts("10.0.0.1", 80), BoundHosts("10.0.0.1", 80)))
    with pytest.raises(v.ValidationError):
        BoundHosts("not-an-address", 80)


def test_listener_port_flags_plain_and_tls(tmp_path):
    assert _listener_port("8080=18080") == (8080, 18080, False)
    assert _listener_port("8443=18443/https") == (8443, 18443, True)
    for bad in ("8080", "8080=18080/http", "0=1", "8080=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _listener_port(bad)
    args = argparse.Namespace(gateway_controller_name=CONTROLLER, http_port=80, https_port=443, gateway_address_pool=(),
                              gateway_listener_port=[_listener_port("8080=18080"), _listener_port("8443=18443/https")])
    options = options_of(args)
    cert, key = self_signed("s.example", tmp_path)
    tls = {"certificateRefs": [{"name": "cert"}]}
    gw = gateway(listeners=[listener("plain", 8080), listener("secure", 8443, "HTTPS", tls=tls),
                            listener("wrong", 8080, "HTTPS", tls=tls)])
    t = translate(gw, tls_secret("cert", cert, key), options=options)
    assert conditions(listener_status(t, name="plain").conditions)["Accepted"] == (True, "Accepted")
    assert conditions(listener_status(t, name="secure").conditions)["Accepted"] == (True, "Accepted")
    assert conditions(listener_status(t, name="wrong").conditions)["Accepted"] == (False, "PortUnavailable")


def test_mapped_ports_are_listened_on_from_the_start(tmp_path):
    ports = (((18080, 8080),), ((18443, 8443),))
    config = with_listen_ports(Configuration(), ports)
    assert (config.settings.listen.gateway_ports, config.settings.listen.gateway_tls_ports) == ports
    assert with_listen_ports(config, ports) is config
    with pytest.raises(v.ValidationError):
        with_listen_ports(Configuration(), (((80, 8080),), ()))
    from platformd.ingress.render import render_nginx_conf
    from platformd.ingress.view import RuntimePaths
    text = render_nginx_conf(config, RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key"), Path(__file__).parents[2] / "templates")
    assert "listen 18080 default_server" in text and "listen 18443 ssl http2 default_server" in text
    assert "18080 8080;" in text and "$platform_listener_port" in text
    plain = render_nginx_conf(Configuration(), RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key"), Path(__file__).parents[2] / "templates")
    assert "platform_listener_port" not in plain


def test_the_pool_never_holds_the_data_planes_internal_address():
    from platformd.ingress.gateway_addresses import parse_pool
    assert "127.0.0.2" not in parse_pool("127.0.0.0/29")
    with pytest.raises(ValueError, match="internal address"):
        parse_pool("127.0.0.3,127.0.0.2")


def test_other_routes_on_the_http_and_https_listeners_get_a_table_per_port(tmp_path):
    cert, key = self_signed("s.example", tmp_path)
    secret = tls_secret("cert", cert, key)
    gw = gateway(listeners=[listener("http", 80, "HTTP", "s.example"),
                            listener("https", 443, "HTTPS", "s.example", tls={"certificateRefs": [{"name": "cert"}]})])
    to_https = http_route("redirect", parents=[{"name": "gw", "sectionName": "http"}], rules=[
        {"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}]}])
    app = http_route("app", parents=[{"name": "gw", "sectionName": "https"}], rules=[rule()])
    out = _lower(gw, to_https, app, service(), secret, secrets={"default/cert": secret})
    assert out.servers == () and out.skipped == ()
    plain, tls = out.bound
    assert (plain.key, tls.key) == ("* 80", "* 443")
    assert plain.servers[0].locations[0].request_redirect == RequestRedirect(301, "https", None, None)
    assert tls.servers[0].locations[0].backend == "default.svc.80.route"
    assert tls.servers[0].tls_certificate == "default/cert"
    # The Ingress host of the same name keeps its other paths on those ports; the route wins "/".
    ingress = Server("s.example", locations=(Location("/", backend="ing"), Location("/legacy", backend="ing")))
    merged, _ = extend(Configuration(servers=(ingress,)), out)
    for table in merged.bound:
        assert [loc.path for loc in table.servers[0].locations] == ["/legacy", "/"]
        assert table.servers[0].locations[1].backend != "ing"


def test_a_secret_both_apis_use_serves_the_gateways_bound_host_names_too(tmp_path):
    from platformd.ingress.gateway_lowering import Lowered
    from platformd.ingress.model import Certificate
    cert, key = self_signed("s.example", tmp_path)
    ingress_copy = Certificate("default/cert", cert, key, hostnames=("a.example",))
    gateway_copy = Certificate("default/cert", cert, key, hostnames=("s.example",))
    table = BoundHosts("10.0.0.1", 443, (Server("s.example", tls=True, tls_certificate="default/cert",
                                                locations=(Location("/", backend="b"),)),))
    merged, _ = extend(Configuration(certificates=(ingress_copy,)),
                       Lowered(certificates=(gateway_copy,), bound=(table,)))
    [only] = merged.certificates
    assert only.hostnames == ("a.example", "s.example")


def test_an_https_listener_without_hostname_serves_its_certificate_for_unknown_names(tmp_path):
    cert, key = self_signed("any.example", tmp_path)
    secret = tls_secret("cert", cert, key)
    gw = gateway(listeners=[listener("https", 443, "HTTPS", tls={"certificateRefs": [{"name": "cert"}]})])
    out = _lower(gw, http_route(), service(), secret, secrets={"default/cert": secret})
    assert out.any_certificate == "default/cert" and [c.id for c in out.certificates] == ["default/cert"]
    merged, _ = extend(Configuration(), out)
    assert merged.default_certificate == "default/cert"
    assert extend(Configuration(default_certificate="ingress/default"), out)[0].default_certificate == \
        "ingress/default"
