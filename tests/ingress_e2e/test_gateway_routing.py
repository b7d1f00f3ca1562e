"""Gateway API routes served end to end: the real ``platformd ingress`` against
the fake API server, its nginx, backends in network namespaces. What today's
router can say is served beside the Ingresses (gateway_lowering); a host that
needs more is left out and its Gateway says so in ``Programmed``."""

from __future__ import annotations

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, path, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for


def _plain(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("creationTimestamp", "generation")}
    return {**obj, "metadata": meta}


def _programmed(fake_api) -> tuple:
    status = (fake_api.get("Gateway", "default", "gw") or {}).get("status") or {}
    found = [c for c in status.get("conditions") or () if c["type"] == "Programmed"]
    return (found[0]["status"], found[0]["reason"], found[0]["message"]) if found else ()


def test_http_route_is_served_beside_an_ingress_and_programmed(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web", "api", "legacy"])
    fake_api.create(o.ingress_class())
    fake_api.create(_plain(gateway_class()))
    for name in ("web", "api", "legacy"):
        fake_api.create(o.service(name, port=80))
        fake_api.create(o.endpoint_slice(name, [backends[name].ip]))
    fake_api.create(_plain(gateway()))
    fake_api.create(o.ingress("old", "gw.example", [("/old", "legacy", 80)]))
    fake_api.create(_plain(http_route(hostnames=["gw.example"], rules=[
        rule(backend("api"), matches=[path("/api", "Exact")]), rule(backend("web"), matches=[path("/")])])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("gw.example", "/api", "api", timeout=20)
    assert running.get("/api/more", host="gw.example").text == "web"  # Exact only
    assert running.get("/", host="gw.example").text == "web"
    assert running.get("/old/x", host="gw.example").text == "legacy"  # the Ingress's path on the same host
    wait_for(lambda: _programmed(fake_api)[:2] == ("True", "Programmed"), 20, message="Gateway Programmed")
    # /status counts what Lua holds: the Ingress's backend and the route's two.
    assert (running.status()["backends"], running.status()["endpoints"]) == (3, 3)

    # An endpoint change of a Service only the route uses reaches the data plane.
    moved = fake_api.get("EndpointSlice", "default", "api-1")
    moved["endpoints"][0]["addresses"] = [backends["web"].ip]
    fake_api.update(moved)
    running.wait_served("gw.example", "/api", "web", timeout=20)

    # A route change is served; a host the router cannot say yet is left out and reported.
    route = fake_api.get("HTTPRoute", "default", "route")
    route["spec"]["rules"][0]["backendRefs"][0]["name"] = "legacy"
    fake_api.update(route)
    running.wait_served("gw.example", "/api", "legacy", timeout=20)
    fake_api.create(_plain(http_route("modifier", hostnames=["mod.example"], rules=[
        rule(backend("web"), filters=[{"type": "RequestHeaderModifier",
                                       "requestHeaderModifier": {"set": [{"name": "Host", "value": "b"}]}}])])))
    status, reason, message = wait_for(lambda: _programmed(fake_api)[:1] == ("False",) and _programmed(fake_api), 20,
                                       message="Gateway not programmed for mod.example")
    assert reason == "Pending" and "mod.example" in message and "hop-by-hop" in message
    assert running.get("/", host="mod.example").status_code == 404
    (not_served,) = running.status()["gateway_api"]["not_served"]
    assert not_served.startswith("mod.example: ") and "hop-by-hop" in not_served
    assert running.get("/api", host="gw.example").text == "legacy"  # the rest keeps serving


def _seed_backends(fake_api, backends, names, namespace="default"):
    for name in names:
        fake_api.create(o.service(name, namespace=namespace, port=80))
        fake_api.create(o.endpoint_slice(name, [backends[name].ip], namespace=namespace))


def _route_conditions(fake_api, name, namespace="default"):
    route = fake_api.get("HTTPRoute", namespace, name) or {}
    parents = (route.get("status") or {}).get("parents") or []
    return {c["type"]: (c["status"], c["reason"]) for c in parents[0]["conditions"]} if parents else {}


def test_cross_namespace_backend_is_served_only_with_a_reference_grant(fake_api, ingress_controller, netns_backends):
    from tests.ingress.gateway_objects import grant
    backends = netns_backends(["web"])
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway()))
    _seed_backends(fake_api, backends, ["web"], namespace="backends")
    fake_api.create(_plain(http_route(hostnames=["cross.example"], rules=[rule(backend("web", namespace="backends"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    wait_for(lambda: _route_conditions(fake_api, "route").get("ResolvedRefs") == ("False", "RefNotPermitted"), 20,
             message="RefNotPermitted")
    assert running.get("/", host="cross.example").status_code == 500  # the invalid backend's share
    created = fake_api.create(grant("backends", "default"))
    assert created
    wait_for(lambda: _route_conditions(fake_api, "route").get("ResolvedRefs") == ("True", "ResolvedRefs"), 20,
             message="ResolvedRefs after the grant")
    running.wait_served("cross.example", "/", "web", timeout=20)


def test_https_listener_serves_the_route_with_its_certificate(fake_api, ingress_controller, netns_backends, tmp_path):
    import socket
    import ssl

    from tests.helpers.certs import self_signed
    from tests.ingress.gateway_objects import https_listener
    backends = netns_backends(["web"])
    cert, key = self_signed("secure.example", tmp_path)
    fake_api.create(o.tls_secret("cert", cert, key))
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[https_listener(hostname="secure.example")])))
    _seed_backends(fake_api, backends, ["web"])
    fake_api.create(_plain(http_route(rules=[rule(backend("web"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("secure.example", "/", "web", https=True, timeout=20)
    context = ssl.create_default_context(cadata=cert)
    with socket.create_connection(("127.0.0.1", running.https_port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="secure.example") as tls:  # verifies the route's certificate
            assert tls.getpeercert()["subject"] == ((("commonName", "secure.example"),),)
    # The spec: a name only an HTTPS listener has is not served on plain HTTP (404, never a redirect).
    assert running.get("/", host="secure.example").status_code == 404


def test_listener_hostnames_isolate_routes_and_intersect_route_hostnames(fake_api, ingress_controller, netns_backends):
    from tests.ingress.gateway_objects import listener
    backends = netns_backends(["wild", "exact"])
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[listener("wild", hostname="*.example.com"),
                                              listener("exact", hostname="foo.example.com")])))
    _seed_backends(fake_api, backends, ["wild", "exact"])
    fake_api.create(_plain(http_route("w", parents=[{"name": "gw", "sectionName": "wild"}],
                                      hostnames=["bar.example.com", "other.org"], rules=[rule(backend("wild"))])))
    fake_api.create(_plain(http_route("f", parents=[{"name": "gw", "sectionName": "exact"}],
                                      rules=[rule(backend("exact"))])))
    fake_api.create(_plain(http_route("n", hostnames=["nope.org"], rules=[rule(backend("wild"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("bar.example.com", "/", "wild", timeout=20)
    running.wait_served("foo.example.com", "/", "exact", timeout=20)
    assert running.get("/", host="other.org").status_code == 404  # not in the listener's hostname
    wait_for(lambda: _route_conditions(fake_api, "n").get("Accepted") == ("False", "NoMatchingListenerHostname"), 20,
             message="NoMatchingListenerHostname")
