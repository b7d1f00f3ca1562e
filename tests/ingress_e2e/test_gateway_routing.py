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
    fake_api.create(_plain(http_route("headers", hostnames=["hdr.example"], rules=[
        rule(backend("web"), matches=[{**path("/"), "headers": [{"name": "x-env", "value": "canary"}]}])])))
    status, reason, message = wait_for(lambda: _programmed(fake_api)[:1] == ("False",) and _programmed(fake_api), 20,
                                       message="Gateway not programmed for hdr.example")
    assert reason == "Pending" and "hdr.example" in message and "header" in message
    assert running.get("/", host="hdr.example").status_code == 404
    assert running.status()["gateway_api"]["not_served"] == [
        "hdr.example: header, query parameter and method matches need the router"]
    assert running.get("/api", host="gw.example").text == "legacy"  # the rest keeps serving
