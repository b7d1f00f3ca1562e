"""The route table shipped to the Lua router (routes.py), on plain data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from platformd.ingress.model import (
    AccessControl,
    Backend,
    BackendProtocol,
    Configuration,
    Cors,
    GlobalSettings,
    Location,
    PathMatch,
    ProxySettings,
    RateLimit,
    Redirect,
    Server,
    Timeouts,
)
from platformd.ingress.routes import RouteTable, payload


def host_config(*locations: Location, **server) -> Configuration:
    return Configuration(servers=(Server("app.example.com", locations=locations, **server),))


def policy_of(table: dict, route: dict) -> dict:
    return table["policies"][route["policy"]]


def test_every_name_gets_the_host_with_canonical_paths():
    config = Configuration(servers=(Server("app.example.com", aliases=("www.example.com",), locations=(
        Location("/", backend="web"),
        Location("/api/", backend="api"),
        Location("/api", match="exact", backend="exact"),
    )), Server("*.wild.example.com", locations=(Location("/", backend="web"),))))
    table = payload(config)
    assert set(table["hosts"]) == {"app.example.com", "www.example.com", "*.wild.example.com"}
    host = table["hosts"]["app.example.com"]
    assert table["hosts"]["www.example.com"] == host
    assert set(host["prefix"]) == {"/", "/api"}  # no trailing "/": matched element-wise
    assert host["exact"]["/api"]["backend"] == "exact"
    assert host["regex"] == []


def test_regex_routes_come_longest_first_with_anchors():
    table = payload(host_config(
        Location("/", backend="root"),
        Location("/v[0-9]+", match=PathMatch.REGEX, backend="short"),
        Location("^/v[0-9]+/admin", match=PathMatch.REGEX, backend="long"),
        Location("/version", backend="prefix"),
    ))
    host = table["hosts"]["app.example.com"]
    assert [(r["pattern"], r["length"]) for r in host["regex"]] == [("^/v[0-9]+/admin", 15), ("^/v[0-9]+", 8)]
    assert host["prefix"]["/version"]["backend"] == "prefix"


def test_default_settings_take_the_fast_path_and_others_a_lane():
    table = payload(host_config(
        Location("/", backend="web"),
        Location("/grpc", backend="g", proxy=ProxySettings(protocol=BackendProtocol.GRPC)),
        Location("/tls", backend="t", proxy=ProxySettings(protocol=BackendProtocol.HTTPS)),
        Location("/slow", backend="s", proxy=ProxySettings(timeouts=Timeouts(read=300))),
        Location("/big", backend="b", proxy=ProxySettings(body_size="8m", buffering=True)),
        Location("/vhost", backend="v", proxy=ProxySettings(upstream_vhost="api.internal")),
        Location("/conn", backend="c", rate_limit=RateLimit(connections=2)),
        Location("/cors", backend="c", cors=Cors()),
        Location("/allow", backend="c", access=AccessControl(allow=("10.0.0.0/8",))),
    ))
    prefix = table["hosts"]["app.example.com"]["prefix"]
    lanes = {path: (policy_of(table, r)["fast"], policy_of(table, r)["lane"]) for path, r in prefix.items()}
    assert lanes == {
        "/": (True, "@platform_proxy_off"),
        "/grpc": (False, "@platform_grpc"),
        "/tls": (False, "@platform_proxy_off"),
        "/slow": (False, "@platform_proxy_off"),
        "/big": (False, "@platform_proxy_on"),
        "/vhost": (False, "@platform_proxy_off"),
        "/conn": (False, "@platform_proxy_off"),
        "/cors": (False, "@platform_proxy_off"),  # the lanes print the CORS headers
        "/allow": (True, "@platform_proxy_off"),  # allowlists are applied on the fast path too
    }
    assert policy_of(table, prefix["/tls"])["scheme"] == "https"
    assert policy_of(table, prefix["/slow"])["timeouts"] == [5, 60, 300]
    assert policy_of(table, prefix["/big"])["body_size"] == 8 * 1024 * 1024
    assert policy_of(table, prefix["/"])["body_size"] == 1024 * 1024


def test_equal_settings_share_one_policy():
    table = payload(host_config(*(Location(f"/p{i}", backend="web") for i in range(50))))
    assert len(table["policies"]) == 1


def test_tls_hosts_carry_hsts_and_the_redirect_settings():
    table = payload(replace(host_config(Location("/", backend="web", ssl_redirect=True), tls=True),
                            settings=GlobalSettings()))
    host = table["hosts"]["app.example.com"]
    assert host["hsts"] is True
    assert table["hsts"] == "max-age=31536000; includeSubDomains"
    assert policy_of(table, host["prefix"]["/"])["ssl_redirect"] is True
    assert table["ssl_redirect"] == {"code": 308, "port": 443}


def test_redirects_rewrites_and_limits_are_data():
    table = payload(host_config(
        Location("/old", redirect=Redirect("https://new.example.com/", 301)),
        Location("/api(/|$)(.*)", match=PathMatch.REGEX, backend="api", rewrite_target="/$2"),
        Location("/lim", backend="web", rate_limit=RateLimit(rps=5, burst_multiplier=3)),
        redirect=Redirect("https://www.example.com/", 308),
    ))
    host = table["hosts"]["app.example.com"]
    assert host["redirect"] == {"code": 308, "target": "https://www.example.com/"}
    old = host["prefix"]["/old"]
    assert old["backend"] is None and policy_of(table, old)["redirect"] == {"code": 301, "target": "https://new.example.com/"}
    (regex,) = host["regex"]
    assert regex["rewrite"] == "(?i)^/api(/|$)(.*)"
    lim = host["prefix"]["/lim"]
    assert (policy_of(table, lim)["limit_rps"], policy_of(table, lim)["limit_burst"]) == (5, 15)
    assert lim["zone"] and lim["zone"] != payload(replace(
        host_config(Location("/lim2", backend="web", rate_limit=RateLimit(rps=5))))
    )["hosts"]["app.example.com"]["prefix"]["/lim2"]["zone"]


def test_the_catch_all_serves_hostless_rules_then_the_default_backend():
    config = Configuration(default_server_locations=(Location("/x", backend="x"),), default_backend="fallback")
    default = payload(config)["default"]
    assert default["prefix"]["/x"]["backend"] == "x"
    assert default["prefix"]["/"]["backend"] == "fallback"
    assert payload(Configuration())["default"]["prefix"] == {}


@pytest.mark.parametrize("changes", [
    lambda c: c,
    lambda c: replace(c, servers=c.servers[1:]),
    lambda c: replace(c, servers=(*c.servers, Server("new.example.com", locations=(Location("/", backend="n"),)))),
    lambda c: replace(c, settings=GlobalSettings(body_size="5m")),
    lambda c: replace(c, backends=(Backend("web"),)),
])
def test_a_reused_table_equals_a_fresh_one(changes):
    config = Configuration(servers=tuple(
        Server(f"h{i}.example.com", locations=(Location("/", backend="web"), Location(f"/p{i}", backend="api",
                                                                                      proxy=ProxySettings(body_size="2m"))))
        for i in range(5)))
    table = RouteTable()
    table.payload(config)
    desired = changes(config)
    assert table.payload(desired) == payload(desired)


# --- reuse vs fresh over generated changes ---------------------------------------

from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

_PATHS = st.sampled_from(["/", "/api", "/api/v1", "/static", "/x"])
_LOCATION = st.builds(
    Location,
    path=_PATHS,
    match=st.sampled_from([PathMatch.PREFIX, PathMatch.EXACT]),
    backend=st.sampled_from(["web", "api"]),
    proxy=st.sampled_from([ProxySettings(), ProxySettings(body_size="2m"), ProxySettings(buffering=True)]),
    ssl_redirect=st.booleans(),
)


def _server(name: str, locations: list[Location], tls: bool) -> Server:
    unique = {(loc.match, loc.path.rstrip("/") or "/"): loc for loc in locations}
    return Server(name, locations=tuple(unique.values()), tls=tls)


_SERVERS = st.lists(st.tuples(st.sampled_from([f"h{i}.example" for i in range(6)]),
                              st.lists(_LOCATION, min_size=1, max_size=3), st.booleans()),
                    max_size=6, unique_by=lambda t: t[0])
_CHANGE = st.tuples(_SERVERS, st.sampled_from([GlobalSettings(), GlobalSettings(body_size="3m")]),
                    st.sampled_from([None, "web"]))


@hsettings(max_examples=60, deadline=None)
@given(st.lists(_CHANGE, min_size=1, max_size=6))
def test_a_reused_table_equals_a_fresh_one_over_generated_changes(changes):
    table = RouteTable()
    kept: dict[tuple, Server] = {}
    for servers, global_settings, default_backend in changes:
        built = []
        for name, locations, tls in servers:
            server = _server(name, locations, tls)
            # Reuse the Server object of an unchanged host, as the translator does.
            built.append(kept.setdefault((name, server.locations, tls), server))
        config = Configuration(servers=tuple(built), settings=global_settings, default_backend=default_backend)
        assert table.payload(config) == payload(config)
