"""Listener isolation end to end (GatewayHTTPListenerIsolation, written from
the conformance scenario): the real ``platformd ingress`` against the fake
API server, its nginx, a backend in a network namespace. Four listeners on
port 80 (no hostname, ``*.example.com``, ``*.foo.example.com``,
``abc.foo.example.com``), each with its own route: a request reaches only
the routes of the most specific listener that matches its host, wildcards
covering one or more labels; an Ingress wildcard beside them still covers
exactly one label."""

from __future__ import annotations

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, listener, path, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for
from tests.ingress_e2e.test_gateway_routing import _plain, _seed_backends

SECTIONS = ("empty-hostname", "wildcard-example-com", "wildcard-foo-example-com", "abc-foo-example-com")


def test_a_request_reaches_only_the_most_specific_listener(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web", "ing"])
    _seed_backends(fake_api, backends, ["web", "ing"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.ingress("ing", "*.ing.example.org", [("/", "ing", 80)]))
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[
        listener("empty-hostname"), listener("wildcard-example-com", hostname="*.example.com"),
        listener("wildcard-foo-example-com", hostname="*.foo.example.com"),
        listener("abc-foo-example-com", hostname="abc.foo.example.com")])))
    for section in SECTIONS:
        fake_api.create(_plain(http_route(f"to-{section}", parents=[{"name": "gw", "sectionName": section}],
                                          rules=[rule(backend("web"), matches=[path(f"/{section}")])])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("abc.foo.example.com", "/abc-foo-example-com", "web", timeout=30)
    wait_for(lambda: running.get("/empty-hostname", host="bar.com").text == "web", 20, message="catch-all listener")

    served = {"bar.com": "empty-hostname", "bar.example.com": "wildcard-example-com",
              "bar.foo.example.com": "wildcard-foo-example-com", "abc.foo.example.com": "abc-foo-example-com",
              # One or more labels: the longest wildcard that covers the name.
              "a.b.example.com": "wildcard-example-com", "a.b.foo.example.com": "wildcard-foo-example-com",
              "x.abc.foo.example.com": "wildcard-foo-example-com"}
    _expect(running, served)

    # The Ingress's wildcard covers exactly one label, as before.
    assert running.get("/", host="x.ing.example.org").text == "ing"
    assert running.get("/", host="a.b.ing.example.org").status_code == 404

    # "With hostname intersection": every route names all four hostnames; the same answers.
    for section in SECTIONS:
        route = fake_api.get("HTTPRoute", "default", f"to-{section}")
        route["spec"]["hostnames"] = ["bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com"]
        fake_api.update(route)
    wait_for(lambda: running.get("/abc-foo-example-com", host="bar.com").status_code == 404
             and running.get("/empty-hostname", host="bar.com").text == "web", 20, message="routes with hostnames")
    _expect(running, {**served, "other.org": None})


def _expect(running, served):
    for host, owner in served.items():
        for section in SECTIONS:
            r = running.get(f"/{section}", host=host)
            expected = 200 if section == owner else 404
            assert r.status_code == expected, (host, section, r.status_code)
