"""Gateway API header and mirror filters end to end, written from the spec and
the scenarios of the conformance suite (HTTPRouteRequestHeaderModifier,
HTTPRouteResponseHeaderModifier, HTTPRouteRequestMirror): the real
``platformd ingress`` against the fake API server, its nginx, echo backends
in network namespaces. Every change is applied as data: the only reload is
the one a mirror lane needs the first time (docs/architecture.md)."""

from __future__ import annotations

import json

import httpx

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, path, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for


def _plain(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("creationTimestamp", "generation")}
    return {**obj, "metadata": meta}


def _seen(r: httpx.Response) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in json.loads(r.headers["x-echo-headers"]):
        out.setdefault(k, []).append(v)
    return out


def _reloads(running) -> float:
    text = running.internal("/metrics").text
    for line in text.splitlines():
        if line.startswith("nginx_ingress_controller_success "):
            return float(line.split()[1])
    return -1.0


def _hits(b) -> list[dict]:
    return httpx.get(f"http://{b.ip}:{b.port}/__hits", timeout=5).json()


def _setup(fake_api, netns_backends, names):
    backends = netns_backends(names)
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway()))
    for name in names:
        fake_api.create(o.service(name, port=80))
        fake_api.create(o.endpoint_slice(name, [backends[name].ip]))
    return backends


def _modifier(kind: str, set_=(), add=(), remove=()) -> dict:
    field = "requestHeaderModifier" if kind == "RequestHeaderModifier" else "responseHeaderModifier"
    spec: dict = {}
    if set_:
        spec["set"] = [{"name": n, "value": v} for n, v in set_]
    if add:
        spec["add"] = [{"name": n, "value": v} for n, v in add]
    if remove:
        spec["remove"] = list(remove)
    return {"type": kind, field: spec}


def test_request_and_response_header_modifiers(fake_api, ingress_controller, netns_backends):
    _setup(fake_api, netns_backends, ["web"])
    fake_api.create(_plain(http_route(hostnames=["hdr.example"], rules=[
        rule(backend("web"), matches=[path("/set")], filters=[_modifier(
            "RequestHeaderModifier", set_=[("X-Header-Set", "set-overwrites-values")],
            add=[("X-Header-Add", "add-appends-values")], remove=["X-Header-Remove"])]),
        rule(backend("web"), matches=[path("/response")], filters=[_modifier(
            "ResponseHeaderModifier", set_=[("X-Backend", "overwritten")], add=[("X-Path", "appended")],
            remove=["X-Host"])]),
        rule(backend("web"), matches=[path("/")]),
    ])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("hdr.example", "/", "web", timeout=20)
    start = _reloads(running)

    # HTTPRouteRequestHeaderModifier: set overwrites, add appends, remove deletes, others pass.
    r = running.get("/set", host="hdr.example", headers={
        "Some-Other-Header": "val", "X-Header-Set": "some-other-value", "X-Header-Add": "some-other-value",
        "X-Header-Remove": "val"})
    seen = _seen(r)
    assert seen["x-header-set"] == ["set-overwrites-values"]
    assert seen["x-header-add"] == ["some-other-value", "add-appends-values"]
    assert "x-header-remove" not in seen and seen["some-other-header"] == ["val"]
    # Case-insensitive names.
    seen = _seen(running.get("/set", host="hdr.example", headers={"x-header-SET": "client"}))
    assert seen["x-header-set"] == ["set-overwrites-values"]
    # Other rules are untouched.
    seen = _seen(running.get("/", host="hdr.example", headers={"X-Header-Remove": "val"}))
    assert seen["x-header-remove"] == ["val"] and "x-header-set" not in seen

    # HTTPRouteResponseHeaderModifier.
    r = running.get("/response", host="hdr.example")
    assert r.text == "web" and r.headers["x-backend"] == "overwritten"
    assert r.headers.get_list("x-path") == ["/response", "appended"]
    assert "x-host" not in r.headers

    # A change of the modifier is served without a reload.
    route = fake_api.get("HTTPRoute", "default", "route")
    route["spec"]["rules"][0]["filters"][0]["requestHeaderModifier"]["set"][0]["value"] = "v2"
    fake_api.update(route)
    wait_for(lambda: _seen(running.get("/set", host="hdr.example"))["x-header-set"] == ["v2"], 20,
             message="modifier change served")
    assert _reloads(running) == start


def test_request_mirror_with_percent(fake_api, ingress_controller, netns_backends):
    backends = _setup(fake_api, netns_backends, ["web", "shadow"])
    mirror = {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "shadow", "port": 80}}}
    never = {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "shadow", "port": 80}, "percent": 0}}
    fake_api.create(_plain(http_route(hostnames=["mirror.example"], rules=[
        rule(backend("web"), matches=[path("/never")], filters=[never]),
        rule(backend("web"), matches=[path("/")], filters=[mirror, _modifier(
            "RequestHeaderModifier", set_=[("X-Mirrored-By", "platform")])]),
    ])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("mirror.example", "/", "web", timeout=30)
    # HTTPRouteRequestMirror: the answer is the backend's; the shadow gets a copy (with the modified headers).
    for i in range(3):
        assert running.get(f"/never/{i}", host="mirror.example").text == "web"
    assert running.get("/copy-me?x=1", host="mirror.example").text == "web"
    copy = wait_for(lambda: [h for h in _hits(backends["shadow"]) if h["path"] == "/copy-me?x=1"], 20,
                    message="the mirrored copy arrives")[0]
    assert dict(copy["headers"])["x-mirrored-by"] == "platform"
    assert dict(copy["headers"])["host"] == "mirror.example"
    # percent 0: none of the /never requests (sent before the copied one) reached the shadow.
    assert not [h for h in _hits(backends["shadow"]) if h["path"].startswith("/never")]


def test_several_request_mirrors_each_get_their_copy(fake_api, ingress_controller, netns_backends):
    # HTTPRouteRequestMultipleMirrors: every RequestMirror of a rule gets its copy, each with its own share.
    backends = _setup(fake_api, netns_backends, ["web", "shadow", "shadow2", "never"])

    def mirror(name, **share):
        return {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": name, "port": 80}, **share}}

    fake_api.create(_plain(http_route(hostnames=["two.example"], rules=[rule(backend("web"), filters=[
        mirror("shadow"), mirror("never", percent=0), mirror("shadow2", fraction={"numerator": 1, "denominator": 1})])])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("two.example", "/", "web", timeout=30)
    assert running.status()["gateway_api"].get("not_served", []) == []
    for i in range(3):
        assert running.get(f"/multi/{i}", host="two.example").text == "web"
    for name in ("shadow", "shadow2"):
        hits = wait_for(lambda: len([h for h in _hits(backends[name]) if h["path"].startswith("/multi/")]) >= 3
                        and _hits(backends[name]), 20, message=f"{name} gets its copies")
        assert sorted(h["path"] for h in hits if h["path"].startswith("/multi/")) == ["/multi/0", "/multi/1", "/multi/2"]
    assert not [h for h in _hits(backends["never"]) if h["path"].startswith("/multi/")]
