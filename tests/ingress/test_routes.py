"""The routes section: which hosts the Lua router may serve before a reload."""

from __future__ import annotations

from dataclasses import replace

import pytest

from platformd.ingress import routes
from platformd.ingress.model import (
    AccessControl,
    Backend,
    BackendProtocol,
    Configuration,
    Cors,
    Endpoint,
    GlobalSettings,
    Hsts,
    Listen,
    LoadBalance,
    Location,
    PathMatch,
    ProxySettings,
    RateLimit,
    Redirect,
    Server,
    SessionAffinity,
    Timeouts,
    Tls,
    TrafficShapingPolicy,
)


def backends(*names: str) -> tuple[Backend, ...]:
    return tuple(Backend(n, endpoints=(Endpoint("10.0.0.1", 80),)) for n in names)


def config(*servers: Server, extra: tuple[Backend, ...] = (), settings: GlobalSettings = GlobalSettings()) -> Configuration:
    used = {loc.backend for s in servers for loc in s.locations if loc.backend}
    known = {b.name for b in extra}
    return Configuration(servers=servers, backends=backends(*(used - known)) + extra, settings=settings)


def listed(cfg: Configuration) -> dict:
    return routes.payload(cfg)["servers"]


def test_plain_host_is_listed_with_canonical_paths_for_every_name():
    server = Server("app.example.com", aliases=("www.example.com",), locations=(
        Location("/", backend="root"),
        Location("/api/", backend="api"),
        Location("/exact", match=PathMatch.EXACT, backend="exact"),
    ))
    payload = routes.payload(config(server))
    entry = {"hsts": False, "locations": [
        {"path": "/exact", "match": "exact", "backend": "exact", "ssl_redirect": False},
        {"path": "/api", "match": "prefix", "backend": "api", "ssl_redirect": False},
        {"path": "/", "match": "prefix", "backend": "root", "ssl_redirect": False},
    ]}
    assert payload == {"servers": {"app.example.com": entry, "www.example.com": entry},
                       "ssl_redirect": {"code": 308, "port": 443}}


def test_tls_host_carries_hsts_and_ssl_redirect():
    server = Server("secure.example.com", tls=True, locations=(Location("/", backend="b", ssl_redirect=True),))
    entry = listed(config(server))["secure.example.com"]
    assert entry["hsts"] is True
    assert entry["locations"][0]["ssl_redirect"] is True
    settings = GlobalSettings(tls=Tls(hsts=Hsts(enabled=False), redirect_code=301), listen=Listen(https_port=8443))
    payload = routes.payload(config(server, settings=settings))
    assert payload["servers"]["secure.example.com"]["hsts"] is False
    assert payload["ssl_redirect"] == {"code": 301, "port": 8443}


def test_wildcard_host_keeps_its_wildcard_name():
    server = Server("*.example.com", locations=(Location("/", backend="b"),))
    assert list(listed(config(server))) == ["*.example.com"]


NOT_PLAIN = {
    "rewrite-target": Location("/a", backend="b", rewrite_target="/"),
    "regex path": Location("/v[0-9]+", match=PathMatch.REGEX, backend="b"),
    "timeouts": Location("/a", backend="b", proxy=ProxySettings(timeouts=Timeouts(read=5))),
    "body size": Location("/a", backend="b", proxy=ProxySettings(body_size="8m")),
    "buffering": Location("/a", backend="b", proxy=ProxySettings(buffering=True)),
    "gRPC": Location("/a", backend="b", proxy=ProxySettings(protocol=BackendProtocol.GRPC)),
    "HTTPS upstream": Location("/a", backend="b", proxy=ProxySettings(protocol=BackendProtocol.HTTPS)),
    "upstream-vhost": Location("/a", backend="b", proxy=ProxySettings(upstream_vhost="internal.example")),
    "allowlist": Location("/a", backend="b", access=AccessControl(allow=("10.0.0.0/8",))),
    "rate limit": Location("/a", backend="b", rate_limit=RateLimit(rps=5)),
    "CORS": Location("/a", backend="b", cors=Cors()),
    "redirect": Location("/a", redirect=Redirect("https://example.com/")),
}


@pytest.mark.parametrize("name", sorted(NOT_PLAIN))
def test_a_host_with_one_unplain_location_waits_for_the_reload(name):
    server = Server("mixed.example.com", locations=(Location("/", backend="plain"), NOT_PLAIN[name]))
    other = Server("ok.example.com", locations=(Location("/", backend="plain"),))
    assert list(listed(config(server, other))) == ["ok.example.com"]


def test_host_redirect_and_empty_host_are_not_listed():
    redirected = Server("old.example.com", redirect=Redirect("https://new.example.com/"),
                        locations=(Location("/", backend="b"),))
    empty = Server("empty.example.com")
    assert listed(config(redirected, empty)) == {}


@pytest.mark.parametrize("hooked", [
    Backend("b", alternative_backends=("canary",)),
    Backend("b", session_affinity=SessionAffinity()),
    Backend("b", load_balance=LoadBalance.EWMA),
])
def test_backends_needing_lua_hooks_are_not_routed(hooked):
    server = Server("app.example.com", locations=(Location("/", backend="b"),))
    canary = Backend("canary", traffic_shaping_policy=TrafficShapingPolicy(weight=10))
    assert listed(config(server, extra=(hooked, canary))) == {}


def test_consistent_hashing_needs_no_hook_and_is_routed():
    server = Server("app.example.com", locations=(Location("/", backend="b"),))
    assert "app.example.com" in listed(config(server, extra=(Backend("b", upstream_hash_by="$request_uri"),)))


def test_the_same_payload_object_while_only_endpoints_change():
    server = Server("app.example.com", locations=(Location("/", backend="b"),))
    first = config(server)
    moved = replace(first, backends=(Backend("b", endpoints=(Endpoint("10.0.0.2", 80),)),))
    assert routes.payload(moved) is routes.payload(first)
    hooked = replace(first, backends=(Backend("b", load_balance=LoadBalance.EWMA),))
    assert routes.payload(hooked)["servers"] == {}
    assert routes.payload(first)["servers"] != {}


def test_a_backend_gaining_or_losing_hooks_in_a_big_set_is_noticed():
    # Many backends, one replaced in place: the section looks only at the
    # positions that hold other objects, and must still see hooks come and go.
    servers = tuple(Server(f"h{i}.example.com", locations=(Location("/", backend=f"b{i}"),)) for i in range(12))
    first = config(*servers)
    assert len(listed(first)) == 12
    at = [b.name for b in first.backends].index("b3")

    def with_backend(cfg: Configuration, backend: Backend) -> Configuration:
        items = list(cfg.backends)
        items[at] = backend
        return replace(cfg, backends=tuple(items))

    hooked = with_backend(first, Backend("b3", load_balance=LoadBalance.EWMA))
    assert "h3.example.com" not in listed(hooked) and len(listed(hooked)) == 11
    plain_again = with_backend(hooked, Backend("b3", endpoints=(Endpoint("10.0.0.9", 80),)))
    assert len(listed(plain_again)) == 12
    # Hooked again, then an endpoint change of that same hooked backend: still out.
    hooked_again = with_backend(plain_again, Backend("b3", load_balance=LoadBalance.EWMA))
    moved = with_backend(hooked_again, Backend("b3", load_balance=LoadBalance.EWMA,
                                               endpoints=(Endpoint("10.0.0.7", 80),)))
    assert "h3.example.com" not in listed(moved)
