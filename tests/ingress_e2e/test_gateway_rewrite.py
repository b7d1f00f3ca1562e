"""Gateway API URLRewrite paths end to end, written from the spec's
ReplacePrefixMatch table and the conformance scenarios (HTTPRouteRewritePath,
HTTPRouteRewriteHost): the real ``platformd ingress`` against the fake API
server, its nginx, an echo backend in a network namespace that answers with
the path and Host it received. Rewrites are data: no reload."""

from __future__ import annotations

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, path, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for


def _plain(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("creationTimestamp", "generation")}
    return {**obj, "metadata": meta}


def _reloads(running) -> float:
    for line in running.internal("/metrics").text.splitlines():
        if line.startswith("nginx_ingress_controller_success "):
            return float(line.split()[1])
    return -1.0


def _rewrite(kind: str, value: str, hostname: str | None = None) -> dict:
    field = "replacePrefixMatch" if kind == "ReplacePrefixMatch" else "replaceFullPath"
    spec: dict = {"path": {"type": kind, field: value}}
    if hostname:
        spec["hostname"] = hostname
    return {"type": "URLRewrite", "urlRewrite": spec}


def test_path_rewrites_follow_the_spec_table(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway()))
    fake_api.create(o.service("web", port=80))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    fake_api.create(_plain(http_route(hostnames=["rewrite.example"], rules=[
        rule(backend("web"), matches=[path("/prefix/one")], filters=[_rewrite("ReplacePrefixMatch", "/one")]),
        rule(backend("web"), matches=[path("/full/one")], filters=[_rewrite("ReplaceFullPath", "/one")]),
        rule(backend("web"), matches=[path("/strip-prefix")], filters=[_rewrite("ReplacePrefixMatch", "/")]),
        rule(backend("web"), matches=[path("/trail/")], filters=[_rewrite("ReplacePrefixMatch", "/xyz/")]),
        rule(backend("web"), matches=[path("/exact", kind="Exact")], filters=[_rewrite("ReplaceFullPath", "/e")]),
        rule(backend("web"), matches=[path("/host")],
             filters=[_rewrite("ReplaceFullPath", "/rewritten", hostname="internal.example")]),
        rule(backend("web"), matches=[path("/")]),
    ])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    running.wait_served("rewrite.example", "/", "web", timeout=20)
    start = _reloads(running)

    def seen(request_path: str) -> str:
        r = running.get(request_path, host="rewrite.example")
        assert r.status_code == 200 and r.text == "web", (request_path, r.status_code, r.text)
        return r.headers["x-path"]

    # ReplacePrefixMatch: the matched prefix is replaced, the rest and the query kept.
    assert seen("/prefix/one") == "/one"
    assert seen("/prefix/one/") == "/one/"
    assert seen("/prefix/one/two") == "/one/two"
    assert seen("/prefix/one/two?a=b&c=d") == "/one/two?a=b&c=d"
    assert seen("/prefix/onetwo") == "/prefix/onetwo"  # not the prefix (element-wise): the "/" rule, as is
    # ReplaceFullPath: the whole path, whatever followed the prefix; the query kept.
    assert seen("/full/one") == "/one"
    assert seen("/full/one/two?q=1") == "/one?q=1"
    assert seen("/exact") == "/e"
    # A prefix replaced by "/": what followed it, or "/".
    assert seen("/strip-prefix") == "/"
    assert seen("/strip-prefix/") == "/"
    assert seen("/strip-prefix/three") == "/three"
    # Trailing slashes on the prefix or the replacement do not double or lose one.
    assert seen("/trail") == "/xyz"
    assert seen("/trail/bar") == "/xyz/bar"
    # Host and path together.
    r = running.get("/host/x", host="rewrite.example")
    assert (r.headers["x-path"], r.headers["x-host"]) == ("/rewritten", "internal.example")
    # Unrewritten rules are untouched.
    assert seen("/other/path") == "/other/path"

    # A change of the replacement is served without a reload.
    route = fake_api.get("HTTPRoute", "default", "route")
    route["spec"]["rules"][0]["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] = "/v2"
    fake_api.update(route)
    wait_for(lambda: running.get("/prefix/one/two", host="rewrite.example").headers.get("x-path") == "/v2/two", 20,
             message="rewrite change served")
    assert _reloads(running) == start
