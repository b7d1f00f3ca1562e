"""A host name only an HTTPS listener serves, on the shared ports, end to
end: the real ``platformd ingress`` against the fake API server, its nginx,
backends in network namespaces. Plain HTTP to that name is not served by the
HTTPS listener (404, not a redirect) unless an HTTP listener matches it; an
Ingress with ssl-redirect keeps redirecting (docs/gateway-api.md)."""

from __future__ import annotations

from tests.helpers.certs import self_signed
from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, https_listener, listener, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.test_gateway_routing import _plain, _seed_backends


def test_plain_http_to_an_https_only_name_is_404_unless_an_http_listener_matches(
        fake_api, ingress_controller, netns_backends, tmp_path):
    backends = netns_backends(["secure", "wild", "legacy"])
    cert, key = self_signed("secure.example.com", tmp_path)
    fake_api.create(o.tls_secret("cert", cert, key))
    fake_api.create(o.ingress_class())
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[
        https_listener(hostname="secure.example.com"), https_listener("tls-only", hostname="tls.example.org"),
        listener("http-wild", hostname="*.example.com")])))
    _seed_backends(fake_api, backends, ["secure", "wild", "legacy"])
    fake_api.create(_plain(http_route("secure", parents=[{"name": "gw", "sectionName": "https"}],
                                      rules=[rule(backend("secure"))])))
    fake_api.create(_plain(http_route("tls", parents=[{"name": "gw", "sectionName": "tls-only"}],
                                      rules=[rule(backend("secure"))])))
    fake_api.create(_plain(http_route("wild", parents=[{"name": "gw", "sectionName": "http-wild"}],
                                      rules=[rule(backend("wild"))])))
    # An Ingress with ssl-redirect on a name of its own: Ingress semantics are unchanged.
    fake_api.create(o.ingress("old", "legacy.example.net", [("/", "legacy", 80)],
                                tls=[{"hosts": ["legacy.example.net"], "secretName": "cert"}]))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("secure.example.com", "/", "secure", https=True, timeout=30)
    running.wait_served("tls.example.org", "/", "secure", https=True, timeout=30)
    running.wait_served("www.example.com", "/", "wild", timeout=30)
    # HTTPS-only name, no HTTP listener matches: 404 on plain HTTP, never a redirect.
    assert running.get("/", host="tls.example.org").status_code == 404
    # HTTPS-only name that the HTTP listener's wildcard matches: the HTTP listener's routes answer.
    r = running.get("/", host="secure.example.com")
    assert (r.status_code, r.text) == (200, "wild")
    # The Ingress's TLS host still redirects plain HTTP (ssl-redirect defaults on with TLS).
    assert running.get("/", host="legacy.example.net").status_code == 308
