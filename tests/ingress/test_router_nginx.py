"""The Lua router through a real nginx: matching and every per-route setting,
all applied as data (the reload counter never moves after the start).

Fixtures: tests/ingress/conftest.py (``dataplane``, ``backends``).
"""

from __future__ import annotations

import socket
import time

from dataclasses import replace

import httpx
import pytest

from platformd.ingress.model import (
    AccessControl,
    Backend,
    BackendProtocol,
    Configuration,
    Cors,
    Location,
    PathMatch,
    ProxySettings,
    RateLimit,
    Redirect,
    Server,
    Timeouts,
)
from tests.helpers.dataplane import answer, apply, reloads


# --- matching: hosts x paths x path types x regex --------------------------------

HOSTS = {
    "plain.example": (
        Location("/", backend="root"),
        Location("/foo", backend="foo"),
        Location("/foo/bar/", backend="foobar"),
        Location("/exact", match=PathMatch.EXACT, backend="exact"),
        Location("/slash/", match=PathMatch.EXACT, backend="slash"),
        Location("/twin", match=PathMatch.EXACT, backend="twin-exact"),
        Location("/twin", backend="twin-prefix"),
        Location("/Case", backend="case"),
    ),
    "noroot.example": (Location("/api", backend="api"),),
    "regex.example": (
        Location("/", backend="root"),
        Location("/v1", backend="v1"),
        Location("/v[0-9]+/admin", match=PathMatch.REGEX, backend="admin"),
        Location("/v[0-9]+", match=PathMatch.REGEX, backend="version"),
        Location("/long/prefix/path", backend="long"),
        Location("/exact", match=PathMatch.EXACT, backend="exact"),
    ),
    "*.wild.example": (Location("/", backend="wild"),),
    "x.wild.example": (Location("/", backend="exacthost"),),
}

MATCHES = [
    # (host, path, expected backend or status)
    ("plain.example", "/", "root"),
    ("plain.example", "/foo", "foo"),
    ("plain.example", "/foo/", "foo"),
    ("plain.example", "/foo/x", "foo"),
    ("plain.example", "/foobar", "root"),          # element-wise, not a string prefix
    ("plain.example", "/foo/bar", "foobar"),       # trailing "/" of a Prefix path is not part of it
    ("plain.example", "/foo/bar/baz", "foobar"),
    ("plain.example", "/exact", "exact"),
    ("plain.example", "/exact/", "root"),
    ("plain.example", "/slash/", "slash"),
    ("plain.example", "/slash", "root"),           # an Exact /slash/ must not match /slash (no 301)
    ("plain.example", "/twin", "twin-exact"),      # Exact beats a Prefix of the same path
    ("plain.example", "/twin/x", "twin-prefix"),
    ("plain.example", "/Case/x", "case"),
    ("plain.example", "/case/x", "root"),          # paths are case-sensitive
    ("plain.example", "/a/../foo/x", "foo"),       # nginx's normalised $uri
    ("PLAIN.example", "/foo", "foo"),              # host names are not
    ("noroot.example", "/api/x", "api"),
    ("noroot.example", "/", "404"),
    ("noroot.example", "/apix", "404"),
    ("regex.example", "/v1", "version"),           # the longer regex beats a shorter Prefix
    ("regex.example", "/v2/x", "version"),
    ("regex.example", "/V2/ADMIN/x", "admin"),     # regexes are case-insensitive, longest first
    ("regex.example", "/long/prefix/path/v1", "long"),  # a longer Prefix beats the regexes
    ("regex.example", "/exact", "exact"),
    ("regex.example", "/other", "root"),
    ("y.wild.example", "/", "wild"),
    ("x.wild.example", "/", "exacthost"),          # an exact host beats the wildcard
    ("a.y.wild.example", "/", "404"),              # one label only
    ("unknown.example", "/", "404"),               # catch-all without a default backend
]


def test_matcher_table_through_nginx(dataplane, backends):
    """Each backend name its own server, so the answer names the route chosen."""
    names = sorted({loc.backend for locations in HOSTS.values() for loc in locations})
    servers = dict(zip(names, backends(len(names))))
    apply(dataplane, Configuration(
        servers=tuple(Server(host, locations=locations) for host, locations in HOSTS.items()),
        backends=tuple(Backend(name, endpoints=(servers[name].endpoint,)) for name in names),
    ))
    by_server = {server.name: name for name, server in servers.items()}
    wrong = []
    for host, path, expected in MATCHES:
        got = answer(dataplane, path, host)
        got = by_server.get(got, got)
        if got != expected:
            wrong.append((host, path, expected, got))
    assert not wrong
    assert reloads(dataplane) == 1


# --- per-route settings ---------------------------------------------------------


def site(*locations: Location, backend_servers: dict, tls: bool = False, **server) -> Configuration:
    return Configuration(
        servers=(Server("app.example", locations=locations, tls=tls, **server),),
        backends=tuple(Backend(name, endpoints=(b.endpoint,)) for name, b in backend_servers.items()),
    )


def test_every_setting_is_applied_per_request_without_a_reload(dataplane, backends):
    b0, b1 = backends(2)
    bs = {"web": b0, "api": b1}
    apply(dataplane, site(Location("/", backend="web"), backend_servers=bs))
    assert reloads(dataplane) == 1
    workers = dataplane.nginx.worker_pids()

    # rewrite-target with captures
    apply(dataplane, site(Location("/", backend="web"),
                          Location("/api(/|$)(.*)", match=PathMatch.REGEX, backend="api", rewrite_target="/v2/$2"),
                          backend_servers=bs))
    r = dataplane.get("/api/items?x=1", host="app.example")
    assert (r.headers["x-backend"], r.headers["x-path"]) == ("b1", "/v2/items?x=1")

    # upstream-vhost (Host header) and the forwarded headers
    apply(dataplane, site(Location("/", backend="web", proxy=ProxySettings(upstream_vhost="internal.example")),
                          backend_servers=bs))
    assert dataplane.get("/", host="app.example").headers["x-host"] == "internal.example"

    # redirects and app-root
    apply(dataplane, site(Location("/", backend="web"), Location("/old", redirect=Redirect("https://new.example/", 301)),
                          backend_servers=bs))
    r = dataplane.get("/old", host="app.example")
    assert (r.status_code, r.headers["location"]) == (301, "https://new.example/")
    apply(dataplane, site(Location("/", backend="web"), backend_servers=bs, redirect=Redirect("https://www.example/", 308)))
    assert dataplane.get("/x", host="app.example").status_code == 308

    # ssl-redirect on plain HTTP; HSTS on https for a TLS host only
    apply(dataplane, site(Location("/", backend="web", ssl_redirect=True), backend_servers=bs, tls=True))
    r = dataplane.get("/p?q=1", host="app.example")
    assert (r.status_code, r.headers["location"]) == (308, f"https://app.example:{dataplane.https_port}/p?q=1")
    r = dataplane.get("/", host="app.example", https=True)
    assert r.text == "b0" and "max-age=" in r.headers["strict-transport-security"]
    apply(dataplane, site(Location("/", backend="web"), backend_servers=bs))
    assert "strict-transport-security" not in dataplane.get("/", host="app.example", https=True).headers

    # body size: Content-Length and chunked alike, per route, above and below the global 1m
    apply(dataplane, site(Location("/", backend="web"), Location("/small", backend="web", proxy=ProxySettings(body_size="1k")),
                          Location("/big", backend="web", proxy=ProxySettings(body_size="4m")), backend_servers=bs))
    post = lambda path, data: httpx.post(dataplane.http_url + path, headers={"Host": "app.example"},
                                         content=data, timeout=10).status_code
    chunks = lambda n: iter([b"x" * 1024] * n)
    assert post("/small", b"x" * 2048) == 413
    assert post("/small", chunks(2)) == 413
    assert post("/small", b"x" * 512) == 200
    assert post("/", b"x" * (2 << 20)) == 413
    assert post("/", chunks(2048)) == 413
    assert post("/big", b"x" * (2 << 20)) == 200
    assert post("/big", chunks(2048)) == 200
    assert post("/big", b"x" * (5 << 20)) == 413

    # CORS: preflight and response headers
    cors = Cors(allow_origins=("https://app.example.org",), expose_headers=("X-Total",))
    apply(dataplane, site(Location("/", backend="web", cors=cors), backend_servers=bs))
    pre = httpx.options(dataplane.http_url + "/", headers={"Host": "app.example", "Origin": "https://app.example.org"})
    assert pre.status_code == 204
    assert pre.headers["access-control-allow-origin"] == "https://app.example.org"
    assert "GET" in pre.headers["access-control-allow-methods"]
    r = dataplane.get("/", host="app.example", headers={"Origin": "https://app.example.org"})
    assert r.headers["access-control-allow-origin"] == "https://app.example.org"
    assert r.headers["access-control-expose-headers"] == "X-Total"
    other = dataplane.get("/", host="app.example", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers

    # allow/deny source ranges
    apply(dataplane, site(Location("/", backend="web", access=AccessControl(allow=("10.0.0.0/8",))), backend_servers=bs))
    assert dataplane.get("/", host="app.example").status_code == 403
    apply(dataplane, site(Location("/", backend="web", access=AccessControl(allow=("127.0.0.0/8",), deny=("127.0.0.1",))),
                          backend_servers=bs))
    assert dataplane.get("/", host="app.example").status_code == 403
    apply(dataplane, site(Location("/", backend="web", access=AccessControl(allow=("127.0.0.0/8",))), backend_servers=bs))
    assert dataplane.get("/", host="app.example").status_code == 200

    # limit-rps: rps * burst multiplier at once, then 503
    apply(dataplane, site(Location("/", backend="web", rate_limit=RateLimit(rps=1, burst_multiplier=3)), backend_servers=bs))
    statuses = [dataplane.get("/", host="app.example").status_code for _ in range(8)]
    assert statuses.count(200) in (4, 5) and statuses.count(503) >= 3, statuses

    # timeouts via ngx.balancer.set_timeouts
    b0.delay = 1.5
    apply(dataplane, site(Location("/", backend="web", proxy=ProxySettings(timeouts=Timeouts(read=1))), backend_servers=bs))
    assert dataplane.get("/", host="app.example").status_code == 504
    apply(dataplane, site(Location("/", backend="web", proxy=ProxySettings(timeouts=Timeouts(read=5))), backend_servers=bs))
    assert dataplane.get("/", host="app.example").status_code == 200
    b0.delay = 0

    assert reloads(dataplane) == 1
    assert dataplane.nginx.worker_pids() == workers


def test_limit_connections_counts_open_requests(dataplane, backends):
    (b0,) = backends(1)
    b0.delay = 1.0
    apply(dataplane, site(Location("/", backend="web", rate_limit=RateLimit(connections=1)), backend_servers={"web": b0}))
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        statuses = list(pool.map(lambda _: dataplane.get("/", host="app.example").status_code, range(3)))
    assert sorted(statuses) == [200, 503, 503], statuses
    assert dataplane.get("/", host="app.example").status_code == 200  # released in the log phase


def test_a_streaming_connection_stays_open_across_100_route_changes(dataplane, backends):
    """A long response (a stand-in for a WebSocket: one connection held open)
    keeps flowing while routes change 100 times: no reload, no worker exits."""
    (slow,) = backends(1)
    slow.delay = 4.0
    apply(dataplane, site(Location("/", backend="web"), backend_servers={"web": slow}))
    with socket.create_connection(("127.0.0.1", dataplane.http_port), timeout=15) as held:
        held.sendall(b"GET /held HTTP/1.1\r\nHost: app.example\r\n\r\n")
        started = time.monotonic()
        for i in range(100):
            apply(dataplane, site(Location("/", backend="web"), Location(f"/p{i}", backend="web"),
                                  backend_servers={"web": slow}))
        reply = held.recv(4096)
    assert reply.startswith(b"HTTP/1.1 200"), reply
    assert time.monotonic() - started >= 3.0  # it really was open during the changes
    assert reloads(dataplane) == 1


@pytest.mark.parametrize("protocol", [BackendProtocol.HTTPS, BackendProtocol.GRPC])
def test_backend_protocol_lanes_answer_503_without_endpoints(dataplane, protocol):
    apply(dataplane, Configuration(
        servers=(Server("app.example", locations=(Location("/", backend="none", proxy=ProxySettings(protocol=protocol)),)),),
        backends=(Backend("none"),)))
    assert dataplane.get("/", host="app.example").status_code == 503


def test_1000_mixed_route_changes_cost_no_reload(dataplane, backends):
    from tests.ingress.test_decide import ROUTE_CHANGES, base

    (b0,) = backends(1)
    start = dataplane.localize(base())
    start = replace(start, backends=tuple(replace(b, endpoints=(b0.endpoint,)) for b in start.backends),
                    certificates=())
    apply(dataplane, start)
    workers = dataplane.nginx.worker_pids()
    kinds = sorted(ROUTE_CHANGES)
    applied = set()
    for i in range(1, 1001):  # odd: a change, even: back to the start
        kind = kinds[(i // 2) % len(kinds)]
        desired = ROUTE_CHANGES[kind](start) if i % 2 else start
        result = dataplane.plane.apply(replace(desired, certificates=()))
        assert result.ok and result.kind == "dynamic", (kind, result)
        applied.add(kind)
    assert applied == set(kinds)
    assert reloads(dataplane) == 1
    assert dataplane.nginx.worker_pids() == workers
    assert dataplane.get("/", host="a.com").status_code == 200


def test_a_catastrophic_regex_is_bounded(dataplane, backends):
    """PCRE stops a match at lua_regex_match_limit and the router takes that
    as "no match". Shown by behaviour, not by timing: the first branch of
    ``/(?:(a+)+$|a+!)`` backtracks exponentially before the second one would
    match, so without the limit the regex route serves the request; with it,
    the search is cut off and the request falls through to "/"."""
    b0, b1 = backends(2)
    apply(dataplane, site(Location("/", backend="root"),
                          Location("/(?:(a+)+$|a+!)", match=PathMatch.REGEX, backend="evil"),
                          backend_servers={"root": b0, "evil": b1}))
    # A short run backtracks little: under the limit, the regex route matches.
    assert dataplane.get("/" + "a" * 4 + "!", host="app.example").text == b1.name
    # ~2^19 steps before the second branch: over our 100,000, under PCRE's own
    # default of 10,000,000 (with which this test fails): the request falls through.
    assert dataplane.get("/" + "a" * 19 + "!", host="app.example").text == b0.name


def test_the_access_log_goes_to_stdout_not_the_state_dir(dataplane, backends):
    (b0,) = backends(1)
    apply(dataplane, site(Location("/", backend="web"), backend_servers={"web": b0}))
    for _ in range(20):
        assert dataplane.get("/", host="app.example").status_code == 200
    assert "access_log \"/dev/stdout\" upstreaminfo;" in dataplane.nginx.files.conf.read_text()
    assert not list(dataplane.state_dir.rglob("access.log"))
