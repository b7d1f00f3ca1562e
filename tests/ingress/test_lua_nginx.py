"""The Lua data plane (lua/) behind a real nginx, rendered by the real renderer.

Every test starts one nginx master with two workers (the ``dataplane``
fixture, tests/ingress/conftest.py), real HTTP backends answering their name
(tests/helpers/backends.py), and drives it through ``DataPlane.apply`` or,
for protocol details, the configuration socket itself.

Statistical bounds are chosen wide enough to be stable on a loaded 2-core
machine and narrow enough to catch a broken algorithm: e.g. canary weight 30
over 2,000 requests has a standard deviation of ~1%, the bound is ±5%.
"""

from __future__ import annotations

import json
import ssl
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from platformd.ingress.model import (
    AffinityMode,
    Backend,
    Certificate,
    Configuration,
    LoadBalance,
    Location,
    Server,
    SessionAffinity,
    TrafficShapingPolicy,
)
from platformd.ingress.render import backends_checksum, certificate_uid, checksum
from tests.helpers.certs import self_signed, served_certificate
from tests.helpers.dataplane import apply

HOST = "app.example.com"


# --- helpers ------------------------------------------------------------------


def site(*backend_list: Backend, certificates: tuple[Certificate, ...] = (), primary: str = "app") -> Configuration:
    """One host whose "/" goes to ``primary``; ``backend_list`` are all backends."""
    return Configuration(
        servers=(Server(HOST, locations=(Location("/", backend=primary),)),),
        backends=backend_list,
        certificates=certificates,
    )


def endpoints(*servers) -> tuple:
    return tuple(s.endpoint for s in servers)


def hits(dataplane, n: int, client: httpx.Client | None = None, parallel: int = 1, **kwargs) -> Counter:
    """Backend names answering ``n`` requests to HOST, ``parallel`` at a time.

    Large samples run in parallel: each answer of the Python test backends
    costs tens of milliseconds of Nagle/delayed-ACK wait, not CPU.
    """

    def one(_):
        if client is None:
            r = dataplane.get("/", host=HOST, **kwargs)
        else:
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST, **kwargs.get("headers", {})})
        assert r.status_code == 200, r.text
        return r.text

    if parallel == 1:
        return Counter(one(i) for i in range(n))
    with ThreadPoolExecutor(parallel) as pool:
        return Counter(pool.map(one, range(n)))


class CookielessClient(httpx.Client):
    """A client that forgets cookies: sticky tests send them explicitly."""

    def send(self, request, **kwargs):
        self.cookies.clear()
        response = super().send(request, **kwargs)
        self.cookies.clear()
        return response


def fresh_client() -> httpx.Client:
    return CookielessClient(timeout=10)


def config_socket(dataplane) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(dataplane.runtime.socket)),
                        base_url="http://nginx-config", timeout=10)


# --- algorithms ---------------------------------------------------------------


def test_round_robin_spreads_over_all_endpoints(dataplane, backends):
    b = backends(3)
    apply(dataplane, site(Backend("app", endpoints=endpoints(*b))))
    counts = hits(dataplane, 300)
    assert set(counts) == {"b0", "b1", "b2"}
    # One keep-alive connection lands on one worker, which rotates exactly;
    # allow for the connection being re-opened on another worker.
    assert all(80 <= c <= 120 for c in counts.values()), counts


def test_no_endpoints_answers_503(dataplane, backends):
    apply(dataplane, site(Backend("app", endpoints=())))
    assert dataplane.get("/", host=HOST).status_code == 503


def test_connect_failure_retries_the_next_endpoint(dataplane, backends):
    from tests.helpers.backends import free_port
    from platformd.ingress.model import Endpoint

    (b0,) = backends(1)
    dead = Endpoint("127.0.0.1", free_port())  # nothing listens there
    apply(dataplane, site(Backend("app", endpoints=(dead, b0.endpoint))))
    for _ in range(20):
        r = dataplane.get("/", host=HOST)
        assert (r.status_code, r.text) == (200, "b0")


def test_ewma_prefers_the_faster_endpoint(dataplane, backends):
    (fast,) = backends(1)
    (slow,) = backends(1, delay=0.05)
    apply(dataplane, site(Backend("app", endpoints=endpoints(fast, slow), load_balance=LoadBalance.EWMA)))
    hits(dataplane, 10)  # let both workers sample both endpoints
    counts = hits(dataplane, 100)
    assert counts[fast.name] >= 80, counts


def test_consistent_hash_sticks_per_key_and_moves_only_the_removed_share(dataplane, backends):
    b = backends(4)
    apply(dataplane, site(Backend("app", endpoints=endpoints(*b), upstream_hash_by="$request_uri")))
    paths = [f"/item/{i}" for i in range(40)]
    owner = {}
    for path in paths:
        answers = {dataplane.get(path, host=HOST).text for _ in range(4)}
        assert len(answers) == 1, (path, answers)
        owner[path] = answers.pop()
    assert len(set(owner.values())) >= 3, owner

    gone = b[1]
    remaining = [x for x in b if x is not gone]
    apply(dataplane, site(Backend("app", endpoints=endpoints(*remaining), upstream_hash_by="$request_uri")))
    for path in paths:
        now = dataplane.get(path, host=HOST).text
        if owner[path] != gone.name:
            assert now == owner[path], path
        else:
            assert now != gone.name


@pytest.mark.parametrize("mode", [AffinityMode.BALANCED, AffinityMode.PERSISTENT])
def test_cookie_affinity_sticks_and_rebalances_when_the_endpoint_goes(dataplane, backends, mode):
    b = backends(3)
    affinity = SessionAffinity(cookie_name="route", mode=mode, max_age=600)

    def config(servers):
        return site(Backend("app", endpoints=endpoints(*servers), session_affinity=affinity))

    apply(dataplane, config(b))
    with fresh_client() as client:
        first = client.get(dataplane.http_url + "/", headers={"Host": HOST})
        set_cookie = first.headers["set-cookie"]
        assert set_cookie.startswith("route=") and "Max-Age=600" in set_cookie and "HttpOnly" in set_cookie
        cookie = set_cookie.split(";")[0]
        pinned = first.text
        for _ in range(20):
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie})
            assert r.text == pinned
            assert "set-cookie" not in r.headers

        # New sessions spread over all endpoints.
        fresh = Counter(client.get(dataplane.http_url + "/", headers={"Host": HOST}).text for _ in range(60))
        assert set(fresh) == {"b0", "b1", "b2"}, fresh

        # The pinned endpoint goes: the session moves, then sticks again.
        apply(dataplane, config([x for x in b if x.name != pinned]))
        moved = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie})
        assert moved.status_code == 200 and moved.text != pinned
        if "set-cookie" in moved.headers:
            cookie = moved.headers["set-cookie"].split(";")[0]
        for _ in range(10):
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie})
            assert r.text == moved.text


def test_persistent_affinity_keeps_sessions_when_endpoints_are_added(dataplane, backends):
    b = backends(4)
    affinity = SessionAffinity(cookie_name="route", mode=AffinityMode.PERSISTENT)
    apply(dataplane, site(Backend("app", endpoints=endpoints(*b[:2]), session_affinity=affinity)))
    with fresh_client() as client:
        sessions = []
        for _ in range(20):
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST})
            sessions.append((r.headers["set-cookie"].split(";")[0], r.text))
        apply(dataplane, site(Backend("app", endpoints=endpoints(*b), session_affinity=affinity)))
        for cookie, name in sessions:
            assert client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie}).text == name


# --- canary -------------------------------------------------------------------


def canary_site(b_main, b_canary, **policy) -> Configuration:
    return site(
        Backend("app", endpoints=endpoints(b_main), alternative_backends=("app-canary",)),
        Backend("app-canary", endpoints=endpoints(b_canary), traffic_shaping_policy=TrafficShapingPolicy(**policy)),
    )


def test_canary_weight_30_takes_30_percent(dataplane, backends):
    main, canary = backends(2)
    apply(dataplane, canary_site(main, canary, weight=30))
    counts = hits(dataplane, 2000, parallel=16)
    share = counts[canary.name] / 2000
    assert 0.25 <= share <= 0.35, counts


def test_canary_weight_total_is_configurable(dataplane, backends):
    main, canary = backends(2)
    apply(dataplane, canary_site(main, canary, weight=3, weight_total=3))
    assert hits(dataplane, 50) == Counter({canary.name: 50})


def test_canary_header_then_cookie_then_weight(dataplane, backends):
    main, canary = backends(2)
    apply(dataplane, canary_site(main, canary, weight=0, header="X-Canary", cookie="canary"))

    def who(headers):
        return dataplane.get("/", host=HOST, headers=headers).text

    assert who({}) == main.name
    assert who({"X-Canary": "always"}) == canary.name
    assert who({"X-Canary": "never", "Cookie": "canary=always"}) == main.name
    assert who({"Cookie": "canary=always"}) == canary.name
    assert who({"X-Canary": "other", "Cookie": "canary=always"}) == canary.name  # header ignored
    assert who({"Cookie": "canary=never"}) == main.name

    apply(dataplane, canary_site(main, canary, weight=100, header="X-Canary", cookie="canary"))
    assert who({}) == canary.name
    assert who({"X-Canary": "never"}) == main.name
    assert who({"Cookie": "canary=never"}) == main.name


def test_canary_header_value_and_pattern(dataplane, backends):
    main, canary = backends(2)
    apply(dataplane, canary_site(main, canary, header="X-Canary", header_value="beta", cookie="canary"))

    def who(headers):
        return dataplane.get("/", host=HOST, headers=headers).text

    assert who({"X-Canary": "beta"}) == canary.name
    assert who({"X-Canary": "always"}) == main.name  # only the exact value counts
    assert who({"X-Canary": "gamma", "Cookie": "canary=always"}) == canary.name  # falls through

    apply(dataplane, canary_site(main, canary, header="X-Canary", header_pattern="^v[0-9]+$"))
    assert who({"X-Canary": "v12"}) == canary.name
    assert who({"X-Canary": "v1x"}) == main.name


def test_weighted_canary_splits_sticky_sessions_not_requests(dataplane, backends):
    main, canary = backends(2)
    affinity = SessionAffinity(cookie_name="route")
    apply(dataplane, site(
        Backend("app", endpoints=endpoints(main), alternative_backends=("app-canary",), session_affinity=affinity),
        Backend("app-canary", endpoints=endpoints(canary), session_affinity=affinity,
                traffic_shaping_policy=TrafficShapingPolicy(weight=50, header="X-Canary")),
    ))
    sides = Counter()
    with fresh_client() as client:
        for _ in range(30):
            first = client.get(dataplane.http_url + "/", headers={"Host": HOST})
            cookie = first.headers["set-cookie"].split(";")[0]
            sides[first.text] += 1
            for _ in range(5):
                r = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie})
                assert r.text == first.text
        assert set(sides) == {main.name, canary.name}, sides
        # An explicit header still overrides the session.
        if first.text == main.name:
            headers = {"Host": HOST, "Cookie": cookie, "X-Canary": "always"}
            assert client.get(dataplane.http_url + "/", headers=headers).text == canary.name
        else:
            headers = {"Host": HOST, "Cookie": cookie, "X-Canary": "never"}
            assert client.get(dataplane.http_url + "/", headers=headers).text == main.name


def test_canary_without_endpoints_leaves_traffic_on_the_primary(dataplane, backends):
    (main,) = backends(1)
    apply(dataplane, site(
        Backend("app", endpoints=endpoints(main), alternative_backends=("app-canary",)),
        Backend("app-canary", endpoints=(), traffic_shaping_policy=TrafficShapingPolicy(weight=100)),
    ))
    assert hits(dataplane, 10) == Counter({main.name: 10})


# --- configuration protocol ---------------------------------------------------


def test_endpoint_change_takes_effect_without_reload_within_milliseconds(dataplane, backends):
    b0, b1 = backends(2)
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0))))
    with httpx.Client(timeout=10) as client:  # keep-alive: the same worker before and after
        assert hits(dataplane, 5, client=client) == Counter({"b0": 5})
        master, workers = dataplane.nginx.master_pid(), dataplane.nginx.worker_pids()

        payload = [{"name": "app", "endpoints": [{"address": b1.address, "port": b1.port}],
                    "load_balance": "round_robin", "upstream_hash_by": "", "alternative_backends": []}]
        with config_socket(dataplane) as lua:
            r = lua.post("/configuration/backends", json={"checksum": checksum(payload), "data": payload})
            assert r.status_code == 201, r.text
            posted = time.monotonic()
            first = client.get(dataplane.http_url + "/", headers={"Host": HOST}).text
            elapsed = time.monotonic() - posted
        assert first == "b1" and elapsed < 0.5, (first, elapsed)
        assert hits(dataplane, 20) == Counter({"b1": 20})

    # And through the applier: still no reload.
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0, b1))))
    assert set(hits(dataplane, 20)) == {"b0", "b1"}
    assert (dataplane.nginx.master_pid(), dataplane.nginx.worker_pids()) == (master, workers)


def test_get_returns_what_is_loaded(dataplane, backends):
    (b0,) = backends(1)
    config = site(Backend("app", endpoints=endpoints(b0)))
    apply(dataplane, config)
    with config_socket(dataplane) as lua:
        loaded = lua.get("/configuration/backends").json()
        summary = lua.get("/configuration").json()
    assert loaded["data"][0]["name"] == "app"
    assert loaded["data"][0]["endpoints"] == [{"address": b0.address, "port": b0.port}]
    assert loaded["checksum"] == backends_checksum(loaded["data"])
    assert summary["backends"] == {"checksum": loaded["checksum"], "version": loaded["version"]}
    assert set(summary) == {"backends", "certificates", "routes", *(f"routes_{i}" for i in range(256))}


@pytest.mark.parametrize("body, fragment", [
    (b'{"checksum": "ab", "data": [', "invalid JSON"),
    (b'[1, 2]', "checksum"),
    (b'{"checksum": "ab", "data": [{"name": "x y", "endpoints": []}]}', "name"),
    (b'{"checksum": "ab", "data": [{"name": "x", "endpoints": [{"address": "10.0.0.1", "port": "80"}]}]}', "port"),
    (b'{"checksum": "ab", "data": [{"name": "x", "load_balance": "random"}]}', "unknown algorithm"),
    (b'{"checksum": "ab", "data": [{"name": "x", "traffic_shaping_policy": {"header_pattern": "(a"}}]}',
     "header_pattern"),
])
def test_invalid_configuration_gets_400_and_changes_nothing(dataplane, backends, body, fragment):
    (b0,) = backends(1)
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0))))
    with config_socket(dataplane) as lua:
        before = lua.get("/configuration/backends").json()
        r = lua.post("/configuration/backends", content=body)
        assert r.status_code == 400, r.text
        assert fragment in r.json()["error"]
        assert lua.get("/configuration/backends").json() == before
    assert hits(dataplane, 3) == Counter({"b0": 3})


def test_oversized_body_gets_413(dataplane, backends):
    (b0,) = backends(1)
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0))))
    with config_socket(dataplane) as lua:
        r = lua.post("/configuration/backends", content=b" " * (33 * 1024 * 1024))
        assert r.status_code == 413
        assert lua.get("/configuration/backends").json()["data"][0]["name"] == "app"


def test_configuration_endpoint_is_not_on_public_listeners(dataplane, backends):
    (b0,) = backends(1)
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0))))
    for host in (HOST, "unknown.example.org"):
        r = dataplane.get("/configuration/backends", host=host)
        assert "endpoints" not in r.text and r.status_code != 201
        r = httpx.post(dataplane.http_url + "/configuration/backends", headers={"Host": host},
                       content=b'{"checksum":"00","data":[]}')
        assert r.status_code != 201
    assert hits(dataplane, 2) == Counter({"b0": 2})


# --- certificates -------------------------------------------------------------


def der(pem: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem)


@pytest.fixture
def pems(tmp_path):
    return {cn: self_signed(cn, tmp_path) for cn in ("app.example.com", "wild.example.com", "other", "default")}


def test_certificates_per_sni_wildcard_and_fallback(dataplane, backends, pems):
    (b0,) = backends(1)
    exact = Certificate("ns/exact", *pems["app.example.com"], hostnames=("app.example.com",))
    wild = Certificate("ns/wild", *pems["wild.example.com"], hostnames=("*.example.com",))
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0)), certificates=(exact, wild)))
    port = dataplane.https_port
    assert served_certificate(port, "app.example.com") == der(exact.cert_pem)
    assert served_certificate(port, "APP.example.com") == der(exact.cert_pem)
    assert served_certificate(port, "www.example.com") == der(wild.cert_pem)
    # A wildcard covers one label only; unknown names get nginx's fallback.
    fallback = Path(dataplane.runtime.default_cert).read_text()
    assert served_certificate(port, "a.b.example.com") == der(fallback)
    assert served_certificate(port, "example.org") == der(fallback)
    assert served_certificate(port, None) == der(fallback)
    r = dataplane.get("/", host=HOST, https=True)
    assert r.text == "b0"


def test_certificate_swap_without_reload(dataplane, backends, pems):
    (b0,) = backends(1)
    before = Certificate("ns/tls", *pems["app.example.com"], hostnames=("app.example.com",))
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0)), certificates=(before,)))
    assert served_certificate(dataplane.https_port, HOST) == der(before.cert_pem)
    master, workers = dataplane.nginx.master_pid(), dataplane.nginx.worker_pids()

    after = Certificate("ns/tls", *pems["other"], hostnames=("app.example.com",))
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0)), certificates=(after,)))
    for _ in range(4):  # new handshakes, whichever worker takes them
        assert served_certificate(dataplane.https_port, HOST) == der(after.cert_pem)
    assert (dataplane.nginx.master_pid(), dataplane.nginx.worker_pids()) == (master, workers)


def test_default_certificate_from_the_configuration(dataplane, backends, pems):
    (b0,) = backends(1)
    exact = Certificate("ns/exact", *pems["app.example.com"], hostnames=("app.example.com",))
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0)), certificates=(exact,)))
    default_pem = "".join(pems["default"])
    exact_id = certificate_uid(exact.cert_pem, exact.key_pem)
    data = {
        "servers": {"app.example.com": exact_id},
        "certificates": {exact_id: exact.cert_pem + exact.key_pem, "default-cert": default_pem},
        "default": "default-cert",
    }
    dataplane.lua.push("certificates", data)
    with config_socket(dataplane) as lua:
        shown = lua.get("/configuration/certificates").json()
    assert shown["data"] == {"servers": {"app.example.com": exact_id}, "default": "default-cert"}
    assert "BEGIN" not in json.dumps(shown)
    assert served_certificate(dataplane.https_port, HOST) == der(exact.cert_pem)
    assert served_certificate(dataplane.https_port, "unknown.example.org") == der(pems["default"][0])
    assert served_certificate(dataplane.https_port, None) == der(pems["default"][0])


def test_invalid_certificate_gets_400(dataplane, backends, pems):
    (b0,) = backends(1)
    apply(dataplane, site(Backend("app", endpoints=endpoints(b0))))
    with config_socket(dataplane) as lua:
        body = {"checksum": "00", "data": {"servers": {}, "certificates": {"x": "not a pem"}, "default": None}}
        r = lua.post("/configuration/certificates", json=body)
        assert r.status_code == 400, r.text
        r = lua.post("/configuration/certificates",
                     json={"checksum": "00", "data": {"servers": {"a.example.com": "missing"}, "certificates": {}}})
        assert r.status_code == 400 and "unknown certificate" in r.json()["error"]
