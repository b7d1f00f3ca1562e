"""Gateway listeners end to end through real nginx: Gateways told apart by the
local address a request arrives on (--gateway-address-pool), listener ports
mapped to local ports (--gateway-listener-port), routes for any host,
RequestRedirect and route timeouts. Written from the Gateway API spec and the
scenarios of its conformance suite (GATEWAY-HTTP): multiple Gateways,
hostname intersection with wildcard listeners, parentRef sectionName and
port, redirects (host, port, path, scheme, status), request timeouts, routes
without hostnames, and Gateways sharing an address without a pool.

The pool is loopback addresses (all of 127/8 is local on Linux; 127.0.0.2 is
the data plane's internal 503 server, view.UNAVAILABLE_ADDRESS); nginx
listens on the wildcard address, so requests to 127.0.0.4 arrive there with
$server_addr 127.0.0.4."""

from __future__ import annotations

import httpx
import pytest

from tests.fakeapi.errors import ApiError
from tests.helpers.backends import free_port
from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, listener, path, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for
from tests.ingress_e2e.test_gateway_routing import _plain, _seed_backends


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def _get(client, address, port, host, path="/", **kw):
    return client.get(f"http://{address}:{port}{path}", headers={"Host": host, **kw.pop("headers", {})}, **kw)


def _served(client, address, port, host, path, body, timeout=20):
    return wait_for(lambda: (r := _get(client, address, port, host, path)).text == body and r, timeout,
                    message=f"{address}:{port} {host}{path} -> {body}")


def _gateway_status(fake_api, name):
    return (fake_api.get("Gateway", "default", name) or {}).get("status") or {}


def _addresses(fake_api, name):
    return [a["value"] for a in _gateway_status(fake_api, name).get("addresses") or ()]


def _listener_conditions(fake_api, gateway_name, listener_name):
    for lst in _gateway_status(fake_api, gateway_name).get("listeners") or ():
        if lst["name"] == listener_name:
            return {c["type"]: (c["status"], c["reason"]) for c in lst["conditions"]}
    return {}


def test_gateways_with_identical_listeners_are_told_apart_by_address(fake_api, ingress_controller, netns_backends,
                                                                     client):
    backends = netns_backends(["a", "b", "wild", "ingress"])
    _seed_backends(fake_api, backends, ["a", "b", "wild", "ingress"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.ingress("ing", "ing.example", [("/", "ingress", 80)]))
    fake_api.create(_plain(gateway_class()))
    # The older Gateway asks for the second pool address and gets it; the other takes the lowest free one.
    fake_api.create(_plain(gateway("gw-a", addresses=[{"type": "IPAddress", "value": "127.0.0.5"}])))
    fake_api.create(_plain(gateway("gw-b", created="2026-01-02T00:00:00Z", listeners=[
        listener("http"), listener("wild", hostname="*.wild.example")])))
    fake_api.create(_plain(http_route("ra", parents=[{"name": "gw-a"}], hostnames=["any.example"],
                                      rules=[rule(backend("a"))])))
    fake_api.create(_plain(http_route("rb", parents=[{"name": "gw-b", "sectionName": "http"}],
                                      rules=[rule(backend("b"))])))
    fake_api.create(_plain(http_route("rw", parents=[{"name": "gw-b", "sectionName": "wild"}],
                                      hostnames=["*.wild.example", "x.other.example"], rules=[rule(backend("wild"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1",
                                 "--gateway-address-pool", "127.0.0.4,127.0.0.5")
    running.wait_ready()
    port = running.http_port
    # Same listener (port 80, no hostname), same request: the local address picks the Gateway.
    _served(client, "127.0.0.5", port, "any.example", "/", "a")
    _served(client, "127.0.0.4", port, "any.example", "/", "b")
    wait_for(lambda: _addresses(fake_api, "gw-a") == ["127.0.0.5"] and _addresses(fake_api, "gw-b") == ["127.0.0.4"],
             20, message="status.addresses")
    # A wildcard listener matches one or more labels; the route's narrower wildcard intersects it;
    # a route hostname outside the listener's is not served there (the "any" listener answers).
    assert _get(client, "127.0.0.4", port, "a.b.wild.example").text == "wild"
    assert _get(client, "127.0.0.4", port, "x.other.example").text == "b"
    # Gateway routes are not served on other local addresses; Ingresses are.
    assert _get(client, "127.0.0.1", port, "any.example").status_code == 404
    assert _get(client, "127.0.0.1", port, "ing.example").text == "ingress"
    # On a Gateway's address names match by specificity across both APIs: an Ingress's exact name
    # before the Gateway's listener without hostname, which takes the names no one else has.
    assert _get(client, "127.0.0.4", port, "ing.example").text == "ingress"
    assert _get(client, "127.0.0.4", port, "unknown.example").text == "b"
    assert _get(client, "127.0.0.5", port, "ing.example").text == "ingress"
    assert _get(client, "127.0.0.5", port, "other.example").status_code == 404


def test_routes_on_mapped_listener_ports_and_redirects_look_like_the_listener_port(fake_api, ingress_controller,
                                                                                   netns_backends, client):
    backends = netns_backends(["web", "alt"])
    _seed_backends(fake_api, backends, ["web", "alt"])
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[listener("http"), listener("alt", 8080), listener("closed", 9090)])))
    # parentRef by section name and by port.
    fake_api.create(_plain(http_route("web", parents=[{"name": "gw", "sectionName": "http"}],
                                      hostnames=["app.example"], rules=[rule(backend("web"))])))

    def redirect(to, match="/r", **spec):
        return {"matches": [path(match)], "filters": [{"type": "RequestRedirect", "requestRedirect": spec}]}
    fake_api.create(_plain(http_route("alt", parents=[{"name": "gw", "port": 8080}], hostnames=["app.example"], rules=[
        rule(backend("alt")),
        redirect(None, "/keep"),
        redirect(None, "/host", hostname="moved.example", statusCode=301),
        redirect(None, "/scheme", scheme="https"),
        redirect(None, "/port", port=9443, statusCode=308),
        redirect(None, "/full", path={"type": "ReplaceFullPath", "replaceFullPath": "/elsewhere"}, statusCode=303),
        redirect(None, "/prefix", path={"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}, statusCode=307),
    ])))
    fake_api.create(_plain(http_route("r80", parents=[{"name": "gw", "sectionName": "http"}],
                                      hostnames=["plain.example"], rules=[redirect(None, "/", hostname="x.example")])))
    mapped = free_port()
    running = ingress_controller("--publish-status-address", "192.0.2.1", "--gateway-listener-port", f"8080={mapped}")
    running.wait_ready()
    served = _served(client, "127.0.0.1", mapped, "app.example", "/", "alt")
    assert served.headers["x-seen-forwarded-port"] == "8080"  # the listener's port, not the local one
    assert _get(client, "127.0.0.1", running.http_port, "app.example").text == "web"
    # A mapped port serves only its listeners: no Ingress fallback, 404 for other names.
    assert _get(client, "127.0.0.1", mapped, "other.example").status_code == 404

    def answer(p):
        r = _get(client, "127.0.0.1", mapped, "app.example", p)
        return r.status_code, r.headers.get("location")
    # Redirect Locations show the listener's port (8080), never the local one.
    assert answer("/keep/a?x=1") == (302, "http://app.example:8080/keep/a?x=1")
    assert answer("/host/a") == (301, "http://moved.example:8080/host/a")
    assert answer("/scheme/a") == (302, "https://app.example/scheme/a")  # https's well-known port
    assert answer("/port/a") == (308, "http://app.example:9443/port/a")
    assert answer("/full/a?q=2") == (303, "http://app.example:8080/elsewhere?q=2")
    assert answer("/prefix/a/b") == (307, "http://app.example:8080/new/a/b")
    assert answer("/prefix") == (307, "http://app.example:8080/new")
    # On the port-80 listener the port is left out.
    r = _get(client, "127.0.0.1", running.http_port, "plain.example", "/p")
    assert (r.status_code, r.headers.get("location")) == (302, "http://x.example/p")
    # A listener port no flag maps is not accepted.
    wait_for(lambda: _listener_conditions(fake_api, "gw", "closed").get("Accepted") == ("False", "PortUnavailable"),
             20, message="PortUnavailable")
    wait_for(lambda: _listener_conditions(fake_api, "gw", "alt").get("Programmed") == ("True", "Programmed"), 20,
             message="alt Programmed")


def test_request_timeout_answers_504(fake_api, ingress_controller, netns_backends, client):
    backends = netns_backends(["slow"])
    _seed_backends(fake_api, backends, ["slow"])
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway()))
    fake_api.create(_plain(http_route(hostnames=["slow.example"], rules=[rule(backend("slow"),
                                                                              timeouts={"request": "1s"})])))
    # The API server refuses backendRequest longer than request (the spec's CEL rule).
    with pytest.raises(ApiError, match="backendRequest timeout cannot be longer than request timeout"):
        fake_api.create(_plain(http_route("bad", hostnames=["bad.example"], rules=[
            rule(backend("slow"), timeouts={"request": "1s", "backendRequest": "2s"})])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    _served(client, "127.0.0.1", running.http_port, "slow.example", "/", "slow")
    r = _get(client, "127.0.0.1", running.http_port, "slow.example", "/", headers={"X-Echo-Delay": "3"})
    assert r.status_code == 504
    assert _get(client, "127.0.0.1", running.http_port, "slow.example", headers={"X-Echo-Delay": "0.2"}).text == "slow"


def test_without_a_pool_gateways_share_the_address_and_colliding_listeners_conflict(fake_api, ingress_controller,
                                                                                   netns_backends, client):
    backends = netns_backends(["old", "new", "named", "ingress"])
    _seed_backends(fake_api, backends, ["old", "new", "named", "ingress"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.ingress("ing", "ing.example", [("/", "ingress", 80)]))
    fake_api.create(_plain(gateway_class()))
    # Created within the same second: the older is then the first by namespace/name.
    fake_api.create(_plain(gateway("gw-1")))
    fake_api.create(_plain(gateway("gw-2")))
    fake_api.create(_plain(http_route("old", parents=[{"name": "gw-1"}], rules=[rule(backend("old"))])))
    fake_api.create(_plain(http_route("named", parents=[{"name": "gw-1"}], hostnames=["named.example"],
                                      rules=[rule(backend("named"))])))
    fake_api.create(_plain(http_route("new", parents=[{"name": "gw-2"}], rules=[rule(backend("new"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    port = running.http_port
    # The route without hostnames answers any host; a specific hostname and an Ingress host win over it.
    _served(client, "127.0.0.1", port, "whatever.example", "/", "old")
    _served(client, "127.0.0.1", port, "named.example", "/", "named")
    assert _get(client, "127.0.0.1", port, "ing.example").text == "ingress"
    wait_for(lambda: _listener_conditions(fake_api, "gw-2", "http").get("Conflicted") == ("True", "HostnameConflict"),
             20, message="HostnameConflict")
    assert _listener_conditions(fake_api, "gw-1", "http").get("Conflicted") == ("False", "NoConflicts")
    assert _addresses(fake_api, "gw-1") == _addresses(fake_api, "gw-2") == ["192.0.2.1"]


def test_https_listener_on_a_mapped_tls_port_and_a_pool_address(fake_api, ingress_controller, netns_backends,
                                                                 tmp_path):
    import socket
    import ssl

    from tests.helpers.certs import self_signed
    backends = netns_backends(["secure"])
    _seed_backends(fake_api, backends, ["secure"])
    cert, key = self_signed("secure.example", tmp_path)
    fake_api.create(o.tls_secret("cert", cert, key))
    fake_api.create(_plain(gateway_class()))
    tls = {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}
    fake_api.create(_plain(gateway(listeners=[listener("tls", 8443, "HTTPS", "secure.example", tls=tls)])))
    fake_api.create(_plain(http_route(rules=[rule(backend("secure")), {
        "matches": [path("/go")], "filters": [{"type": "RequestRedirect", "requestRedirect": {}}]}])))
    mapped = free_port()
    running = ingress_controller("--publish-status-address", "192.0.2.1", "--gateway-address-pool", "127.0.0.6",
                                 "--gateway-listener-port", f"8443={mapped}/https")
    running.wait_ready()
    context = ssl.create_default_context(cadata=cert)

    def request(target):
        with socket.create_connection(("127.0.0.6", mapped), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="secure.example") as conn:  # verifies the certificate
                conn.sendall(f"GET {target} HTTP/1.1\r\nHost: secure.example\r\nConnection: close\r\n\r\n".encode())
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
        return data.decode(errors="replace")
    answer = wait_for(lambda: (a := request("/")).endswith("secure") and a, 20, message="served over TLS")
    assert "x-seen-forwarded-port: 8443" in answer.lower()
    # A redirect that keeps everything shows the listener's scheme and port.
    assert "location: https://secure.example:8443/go/x?y=1" in request("/go/x?y=1").lower()
    wait_for(lambda: _addresses(fake_api, "gw") == ["127.0.0.6"], 20, message="status.addresses")


def test_http_listener_redirects_to_the_https_listener_of_the_same_hostname(fake_api, ingress_controller,
                                                                           netns_backends, tmp_path):
    from tests.helpers.certs import self_signed
    from tests.ingress.gateway_objects import https_listener
    backends = netns_backends(["app", "legacy"])
    _seed_backends(fake_api, backends, ["app", "legacy"])
    cert, key = self_signed("shop.example", tmp_path)
    fake_api.create(o.tls_secret("cert", cert, key))
    fake_api.create(o.ingress_class())
    fake_api.create(o.ingress("old", "shop.example", [("/legacy", "legacy", 80)]))
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[listener("http", hostname="shop.example"),
                                              https_listener(hostname="shop.example")])))
    fake_api.create(_plain(http_route("to-https", parents=[{"name": "gw", "sectionName": "http"}], rules=[
        {"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}]}])))
    fake_api.create(_plain(http_route("app", parents=[{"name": "gw", "sectionName": "https"}],
                                      rules=[rule(backend("app"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("shop.example", "/cart", "app", https=True, timeout=20)
    r = running.get("/cart?id=1", host="shop.example")
    assert (r.status_code, r.headers.get("location")) == (301, "https://shop.example/cart?id=1")
    # The Ingress on the same host keeps its own path on both ports.
    assert running.get("/legacy", host="shop.example").text == "legacy"
    assert running.get("/legacy", host="shop.example", https=True).text == "legacy"
    assert running.status()["gateway_api"]["not_served"] == []


def test_https_listener_and_route_without_hostnames_serve_any_name(fake_api, ingress_controller, netns_backends,
                                                                  tmp_path):
    from tests.helpers.certs import self_signed, served_certificate
    from tests.ingress.gateway_objects import https_listener
    backends = netns_backends(["any"])
    _seed_backends(fake_api, backends, ["any"])
    cert, key = self_signed("gateway.example", tmp_path)
    fake_api.create(o.tls_secret("cert", cert, key))
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[https_listener()])))
    fake_api.create(_plain(http_route(rules=[rule(backend("any"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("whatever.example", "/", "any", https=True, timeout=20)
    import ssl
    expected = ssl.PEM_cert_to_DER_cert(cert)
    wait_for(lambda: served_certificate(running.https_port, "whatever.example") == expected, 20,
             message="the listener's certificate for any SNI name")
