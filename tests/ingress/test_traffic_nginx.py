"""Traffic settings (platformd.ingress.traffic, lua/traffic.lua) through a
real nginx with real backends; every change is applied without a reload.

Fixtures: tests/ingress/conftest.py (``dataplane``).
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from platformd.ingress.model import Backend, Configuration, Endpoint, Location, ProxySettings, RateLimit, Server
from platformd.ingress.traffic import Traffic
from tests.helpers.scripted_backend import ScriptedBackend
from tests.helpers.waiting import wait_for
from tests.helpers.dataplane import reloads

HOST = "app.example"


@pytest.fixture
def scripted():
    started: list[ScriptedBackend] = []

    def make(count: int = 1) -> list[ScriptedBackend]:
        made = [ScriptedBackend(f"s{len(started) + i}") for i in range(count)]
        started.extend(made)
        return made

    yield make
    for backend in started:
        backend.stop()


def apply(dataplane, *locations: Location, endpoints: dict[str, tuple[Endpoint, ...]], tls: bool = False) -> None:
    config = Configuration(
        servers=(Server(HOST, locations=locations, tls=tls),),
        backends=tuple(Backend(name, endpoints=eps) for name, eps in sorted(endpoints.items())),
    )
    result = dataplane.apply(config)
    assert result.ok, f"{result.error}\n{dataplane.error_log()[-2000:]}"


def annotated(path: str, backend: str = "web", **annotations: str) -> Location:
    """A Location with what these annotations (``proxy_http_version`` for
    ``proxy-http-version``) ask for, as the translator makes it."""
    from platformd.ingress.annotations import PREFIX, parse

    parsed = parse({PREFIX + k.replace("_", "-"): val for k, val in annotations.items()})
    assert parsed.errors == (), parsed.errors
    ann = parsed.annotations
    return Location(path, backend=backend, proxy=ann.proxy, traffic=ann.traffic, rate_limit=ann.rate_limit,
                    lane_directives=ann.traffic_directives)


def dead_endpoint() -> Endpoint:
    """An address nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return Endpoint("127.0.0.1", sock.getsockname()[1])


def seen_headers(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 200, response.text
    return json.loads(response.text)["headers"]


def test_request_headers_and_response_rewrites(dataplane, scripted):
    (b,) = scripted(1)
    eps = {"web": (b.endpoint,)}
    apply(dataplane, Location("/", backend="web"), endpoints=eps)
    start = reloads(dataplane)
    plain = seen_headers(dataplane.get("/x", host=HOST))
    assert "x-forwarded-prefix" not in plain
    assert "connection" not in plain  # keep-alive upstream: no Connection header
    r = dataplane.get("/redirect", host=HOST)
    assert r.headers["location"] == "http://internal.example:8080/app/next"

    apply(dataplane, annotated("/", x_forwarded_prefix="/shop", connection_proxy_header="keep-alive",
                               proxy_redirect_from="http://internal.example:8080/app/",
                               proxy_redirect_to="https://app.example/",
                               proxy_cookie_domain="internal.example app.example", proxy_cookie_path="/app /"),
          endpoints=eps)
    headers = seen_headers(dataplane.get("/x", host=HOST))
    assert headers["x-forwarded-prefix"] == "/shop"
    assert headers["connection"] == "keep-alive"
    r = dataplane.get("/redirect", host=HOST)
    assert r.status_code == 302
    assert r.headers["location"] == "https://app.example/next"
    assert r.headers["set-cookie"] == "s=1; Domain=app.example; Path=/"
    # The response rewrites are a generated lane: one reload when it first appears.
    assert reloads(dataplane) == start + 1
    # X-Forwarded-Prefix and Connection alone are per request; the lane goes
    # with its last route (lanes.py: one more reload), then changes reload nothing.
    apply(dataplane, annotated("/", x_forwarded_prefix="/other", connection_proxy_header="close"), endpoints=eps)
    headers = seen_headers(dataplane.get("/x", host=HOST))
    assert (headers["x-forwarded-prefix"], headers["connection"]) == ("/other", "close")
    after = reloads(dataplane)
    assert after == start + 2
    apply(dataplane, annotated("/", x_forwarded_prefix="/third"), endpoints=eps)
    assert seen_headers(dataplane.get("/x", host=HOST))["x-forwarded-prefix"] == "/third"
    assert reloads(dataplane) == after


def test_next_upstream_tries(dataplane, scripted):
    """One live and one dead endpoint, round robin: the default (3 tries)
    retries the dead one's connection error on the live one; tries 1 and
    proxy-next-upstream off answer 502 for the requests sent to the dead one."""
    (b,) = scripted(1)
    eps = {"web": (b.endpoint, dead_endpoint())}
    # A lane route (its own settings) and the fast path both retry by default.
    apply(dataplane, Location("/", backend="web"), Location("/lane", backend="web", traffic=Traffic(forwarded_prefix="/p")),
          endpoints=eps)
    start = reloads(dataplane)
    assert [dataplane.get("/", host=HOST).status_code for _ in range(6)] == [200] * 6
    assert [dataplane.get("/lane", host=HOST).status_code for _ in range(6)] == [200] * 6
    for traffic in (Traffic(next_upstream_tries=1), Traffic(next_upstream_off=True)):
        apply(dataplane, Location("/", backend="web", traffic=traffic), endpoints=eps)
        before = b.hits
        statuses = [dataplane.get("/", host=HOST).status_code for _ in range(6)]
        assert sorted(statuses) == [200, 200, 200, 502, 502, 502], (traffic, statuses)
        assert b.hits - before == 3  # a failed attempt was not retried on the live endpoint
    assert reloads(dataplane) == start


def test_limit_rate_throttles_after_the_free_bytes(dataplane, scripted):
    (b,) = scripted(1)
    eps = {"web": (b.endpoint,)}
    # 64 KiB answer; the first 32 KiB free, then 16 KiB/s: about 2 s for the rest.
    # (limit-rate turns buffering on: nginx does not throttle unbuffered proxying.)
    apply(dataplane, annotated("/", limit_rate="16", limit_rate_after="32"),
          Location("/free", backend="web"), endpoints=eps)
    started = time.monotonic()
    r = dataplane.get("/bytes/65536", host=HOST)
    throttled = time.monotonic() - started
    assert r.status_code == 200 and len(r.content) == 65536
    started = time.monotonic()
    r = dataplane.get("/free/bytes/65536", host=HOST)
    free = time.monotonic() - started
    assert len(r.content) == 65536
    # Loosely: 32 KiB at 16 KiB/s is 2 s; nginx may send up to one second's worth early.
    assert throttled >= 0.9, throttled
    assert free < throttled / 2, (free, throttled)


def test_limit_rpm_burst_and_allowlist(dataplane, scripted):
    (b,) = scripted(1)
    eps = {"web": (b.endpoint,)}
    apply(dataplane, Location("/", backend="web", rate_limit=RateLimit(rpm=2, burst_multiplier=1)), endpoints=eps)
    start = reloads(dataplane)
    statuses = [dataplane.get("/", host=HOST).status_code for _ in range(5)]
    # One at once plus a burst of rpm x multiplier = 2, then refused (503, nginx's limit_req default).
    assert statuses == [200, 200, 200, 503, 503]
    apply(dataplane, Location("/", backend="web", rate_limit=RateLimit(rpm=2, burst_multiplier=1,
                                                                      allowlist=("127.0.0.0/8",))),
          endpoints=eps)
    assert [dataplane.get("/", host=HOST).status_code for _ in range(5)] == [200] * 5
    assert reloads(dataplane) == start


def test_preserve_trailing_slash_on_https_redirect(dataplane, scripted):
    (b,) = scripted(1)
    eps = {"web": (b.endpoint,)}
    apply(dataplane, Location("/", backend="web", ssl_redirect=True), endpoints=eps, tls=True)
    r = dataplane.get("/dir/", host=HOST)
    assert (r.status_code, r.headers["location"]) == (308, f"https://{HOST}:{dataplane.https_port}/dir")
    apply(dataplane, Location("/", backend="web", ssl_redirect=True, traffic=Traffic(preserve_trailing_slash=True)),
          endpoints=eps, tls=True)
    r = dataplane.get("/dir/", host=HOST)
    assert (r.status_code, r.headers["location"]) == (308, f"https://{HOST}:{dataplane.https_port}/dir/")


def test_access_log_off_and_rewrite_log(dataplane, scripted, capfd):
    (b,) = scripted(1)
    eps = {"web": (b.endpoint,)}
    apply(dataplane,
          annotated("/quiet", enable_access_log="false"),
          Location("/loud", backend="web", traffic=Traffic(forwarded_prefix="/l")),
          Location("/old", backend="web", rewrite_target="/new", traffic=Traffic(rewrite_log=True)),
          endpoints=eps)
    assert dataplane.get("/quiet/marker-one", host=HOST).status_code == 200
    assert dataplane.get("/loud/marker-two", host=HOST).status_code == 200
    seen = []

    def logged() -> bool:
        seen.append(capfd.readouterr().out)
        return "marker-two" in "".join(seen)

    wait_for(logged, timeout=10, message="the access log line of /loud")
    assert "marker-one" not in "".join(seen)
    assert dataplane.get("/old", host=HOST).status_code == 200
    wait_for(lambda: 'rewritten "/old" to "/new"' in dataplane.error_log(), timeout=10,
             message="the rewrite log line")


def test_from_to_www_redirect_both_ways(dataplane, scripted):
    from platformd.ingress import www_redirect

    (b,) = scripted(1)
    servers = [Server("shop.example", locations=(Location("/", backend="web"),)),
               Server("www.blog.example", locations=(Location("/", backend="web"),))]
    servers += www_redirect.redirect_servers(servers, ["shop.example", "www.blog.example"], (), 308)
    assert sorted(s.hostname for s in servers) == ["blog.example", "shop.example", "www.blog.example",
                                                   "www.shop.example"]
    result = dataplane.apply(Configuration(servers=tuple(servers), backends=(Backend("web", endpoints=(b.endpoint,)),)))
    assert result.ok, result.error
    r = dataplane.get("/a/b?c=1", host="www.shop.example")
    assert (r.status_code, r.headers["location"]) == (308, "http://shop.example/a/b?c=1")
    r = dataplane.get("/x", host="blog.example", https=True)
    assert (r.status_code, r.headers["location"]) == (308, "https://www.blog.example/x")
    assert dataplane.get("/", host="shop.example").status_code == 200


def lane_location(path: str, *pairs: tuple[str, str], traffic: Traffic = Traffic()) -> Location:
    return Location(path, backend="web", lane_directives=pairs, traffic=traffic)


def test_directive_settings_through_generated_lanes(dataplane, scripted):
    """proxy-http-version 1.0 reaches the backend as HTTP/1.0; a buffer set
    nginx -t accepts; a reload only when a directive set first appears."""
    from platformd.ingress.annotations import PREFIX, parse

    def pairs(**annotations: str) -> tuple[tuple[str, str], ...]:
        parsed = parse({PREFIX + k.replace("_", "-"): val for k, val in annotations.items()})
        assert parsed.errors == ()
        return parsed.annotations.traffic_directives

    (b,) = scripted(1)
    eps = {"web": (b.endpoint,)}
    apply(dataplane, Location("/", backend="web"), endpoints=eps)
    start = reloads(dataplane)
    assert json.loads(dataplane.get("/", host=HOST).text)["version"] == "HTTP/1.1"
    old = pairs(proxy_http_version="1.0")
    buffers = pairs(proxy_buffer_size="16k", proxy_buffers_number="3", proxy_max_temp_file_size="0",
                    client_body_buffer_size="64k", proxy_request_buffering="off")
    apply(dataplane, Location("/", backend="web"), lane_location("/old", *old), lane_location("/buf", *buffers),
          endpoints=eps)
    assert reloads(dataplane) == start + 1  # two new sets, one reload
    assert json.loads(dataplane.get("/old", host=HOST).text)["version"] == "HTTP/1.0"
    assert json.loads(dataplane.get("/", host=HOST).text)["version"] == "HTTP/1.1"
    r = dataplane.plane and httpx.post(dataplane.http_url + "/buf/bytes/100000", headers={"Host": HOST},
                                       content=b"y" * 200_000)
    assert r.status_code == 200 and len(r.content) == 100_000
    # The same sets on other paths: no reload.
    apply(dataplane, Location("/", backend="web"), lane_location("/old", *old), lane_location("/buf", *buffers),
          lane_location("/again", *old), endpoints=eps)
    assert json.loads(dataplane.get("/again", host=HOST).text)["version"] == "HTTP/1.0"
    assert reloads(dataplane) == start + 1


def test_next_upstream_on_502_only_when_configured_and_tries_counted(dataplane, scripted):
    """Three endpoints answering 502 for /status/502 and one more live: with
    proxy-next-upstream "error timeout http_502" a 502 is retried on the
    next endpoint; without http_502 it is the answer; tries bound the attempts."""
    from platformd.ingress.annotations import PREFIX, parse

    bs = scripted(3)
    eps = {"web": tuple(b.endpoint for b in bs)}

    def location(**annotations: str) -> Location:
        parsed = parse({PREFIX + k.replace("_", "-"): val for k, val in annotations.items()})
        assert parsed.errors == ()
        ann = parsed.annotations
        return Location("/", backend="web", traffic=ann.traffic, lane_directives=ann.traffic_directives)

    def attempts() -> int:
        return sum(b.hits for b in bs)

    apply(dataplane, location(), endpoints=eps)
    before = attempts()
    assert dataplane.get("/status/502", host=HOST).status_code == 502
    assert attempts() - before == 1  # the default conditions: a 502 is an answer
    apply(dataplane, location(proxy_next_upstream="error timeout http_502"), endpoints=eps)
    before = attempts()
    assert dataplane.get("/status/502", host=HOST).status_code == 502
    assert attempts() - before == 3  # default tries: 3, each on another endpoint
    before = attempts()
    assert dataplane.get("/status/404", host=HOST).status_code == 404
    assert attempts() - before == 1  # http_404 not listed
    before = attempts()
    post = httpx.post(dataplane.http_url + "/status/502", headers={"Host": HOST}, content=b"x")
    assert post.status_code == 502 and attempts() - before == 1  # POST is not idempotent: as nginx, no retry
    apply(dataplane, location(proxy_next_upstream="error timeout http_502 non_idempotent"), endpoints=eps)
    before = attempts()
    post = httpx.post(dataplane.http_url + "/status/502", headers={"Host": HOST}, content=b"x")
    assert post.status_code == 502 and attempts() - before == 3
    apply(dataplane, location(proxy_next_upstream="error timeout http_502", proxy_next_upstream_tries="2"),
          endpoints=eps)
    before = attempts()
    assert dataplane.get("/status/502", host=HOST).status_code == 502
    assert attempts() - before == 2
    # A live endpoint beside a failing one: every request ends on the live one.
    good = scripted(1)[0]
    bs[0].fail_with = 502
    eps = {"web": (bs[0].endpoint, good.endpoint)}
    apply(dataplane, location(proxy_next_upstream="error timeout http_502"), endpoints=eps)
    before = bs[0].hits
    assert [dataplane.get("/", host=HOST).status_code for _ in range(4)] == [200] * 4
    assert bs[0].hits - before == 2  # round robin sent half of the first attempts there
    apply(dataplane, location(), endpoints=eps)
    assert sorted(dataplane.get("/", host=HOST).status_code for _ in range(4)) == [200, 200, 502, 502]


def test_custom_http_errors_served_by_the_error_backend(dataplane, scripted):
    """A listed code is answered by the error backend, with ingress-nginx's
    headers; an unlisted code passes through; no endpoints (503) too."""
    from platformd.ingress import custom_errors

    app, errors_backend = scripted(2)
    app.fail_with = 404
    errors = custom_errors.CustomErrors((404, 503), "errors", "shop", "web-ingress", "web", "80")
    location = Location("/", backend="web", traffic=Traffic(errors=errors),
                        lane_directives=custom_errors.lane_pairs(errors.codes))
    empty = Location("/empty", backend="none", traffic=Traffic(errors=errors),
                     lane_directives=custom_errors.lane_pairs(errors.codes))
    apply(dataplane, location, empty, endpoints={"web": (app.endpoint,), "errors": (errors_backend.endpoint,),
                                                 "none": ()})
    r = dataplane.get("/missing?x=1", host=HOST, headers={"Accept": "application/json"})
    assert r.status_code == 200 and r.headers["x-backend"] == errors_backend.name, r.text
    seen = json.loads(r.text)
    assert seen["path"] == "/?x=1"  # as ingress-nginx's `rewrite (.*) / break` (arguments kept)
    headers = seen["headers"]
    assert {k: headers[k] for k in ("x-code", "x-format", "x-original-uri", "x-namespace", "x-ingress-name",
                                    "x-service-name", "x-service-port")} == {
        "x-code": "404", "x-format": "application/json", "x-original-uri": "/missing?x=1", "x-namespace": "shop",
        "x-ingress-name": "web-ingress", "x-service-name": "web", "x-service-port": "80"}
    assert len(headers["x-request-id"]) == 32
    r = dataplane.get("/empty", host=HOST)
    assert r.headers.get("x-backend") == errors_backend.name
    assert json.loads(r.text)["headers"]["x-code"] == "503"
    # An unlisted code is the backend's own answer.
    app.fail_with = 500
    r = dataplane.get("/missing", host=HOST)
    assert (r.status_code, r.headers["x-backend"], r.text) == (500, app.name, f"{app.name} 500")


def test_limit_status_codes_from_the_configmap(dataplane, scripted):
    """limit-req-status-code / limit-conn-status-code (ConfigMap): the status
    a refused request gets, through the translation."""
    from tests.ingress.test_translate_fixtures import configmap, ingress, path, rule, translate, web

    (b,) = scripted(1)
    ing = ingress(rules=[rule(HOST, path("/"))], annotations={"limit-rpm": "1", "limit-burst-multiplier": "1"})
    cm = configmap({"limit-req-status-code": "429"})
    result = translate(ing, *web(ips=("127.0.0.1",)), cm)
    assert result.problems == (), result.problems
    config = result.configuration
    backend = config.backends[0]
    config = Configuration(servers=config.servers, settings=config.settings,
                           backends=(Backend(backend.name, endpoints=(b.endpoint,)),))
    outcome = dataplane.apply(config)
    assert outcome.ok, outcome.error
    assert [dataplane.get("/", host=HOST).status_code for _ in range(3)] == [200, 200, 429]


def test_upstream_hash_by_subset_spreads_a_key_over_its_subset(dataplane, backends):
    """upstream-hash-by-subset: one key's requests go to the `size` endpoints
    of one subset (and only those); other keys to other subsets."""
    bs = backends(6)
    apply(dataplane, Location("/", backend="web"), endpoints={})  # start nginx
    config = Configuration(
        servers=(Server(HOST, locations=(Location("/", backend="web"),)),),
        backends=(Backend("web", endpoints=tuple(b.endpoint for b in bs), upstream_hash_by="$arg_k",
                          upstream_hash_by_subset_size=3),),
    )
    start = reloads(dataplane)
    assert dataplane.apply(config).ok
    seen: dict[str, set[str]] = {}
    for key in ("a", "b", "c", "d"):
        seen[key] = {dataplane.get(f"/?k={key}", host=HOST).headers["x-backend"] for _ in range(40)}
    for key, names in seen.items():
        assert len(names) == 3, (key, names)  # 40 random picks over 3 members: all seen (1 - 3*(2/3)^40)
    assert len({frozenset(n) for n in seen.values()}) >= 2  # keys land on different subsets
    assert reloads(dataplane) == start


def test_custom_errors_release_the_connection_limit(dataplane, scripted):
    """limit-connections with custom-http-errors: the error location's log
    phase releases the connection the lane counted (ngx.ctx is lost on the
    internal redirect), so sequential requests are never refused."""
    from platformd.ingress import custom_errors

    app, errors_backend = scripted(2)
    app.fail_with = 404
    errors = custom_errors.CustomErrors((404,), "errors", "shop", "web-ingress", "web", "80")
    apply(dataplane, Location("/", backend="web", rate_limit=RateLimit(connections=1), traffic=Traffic(errors=errors),
                              lane_directives=custom_errors.lane_pairs(errors.codes)),
          endpoints={"web": (app.endpoint,), "errors": (errors_backend.endpoint,)})
    for _ in range(5):
        r = dataplane.get("/x", host=HOST)
        assert r.headers.get("x-backend") == errors_backend.name, (r.status_code, r.text)
