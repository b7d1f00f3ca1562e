"""Ingress header annotations end to end: the real ``platformd ingress`` against
the fake API server, its nginx, echo backends in network namespaces.
custom-headers (a ConfigMap of the Ingress's namespace, names allowed by
global-allowed-response-headers) and the ConfigMap's proxy-set-headers /
add-headers (a change of one is served without a reload), and the snippet
switch: off, a snippet refuses the Ingress; on (the ConfigMap's
allow-snippet-annotations with annotations-risk-level Critical), its parsed
subset is applied per request."""

from __future__ import annotations

import json

from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for


def _cm(name: str, data: dict, namespace: str = "system") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def _seen(r) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in json.loads(r.headers["x-echo-headers"]):
        out.setdefault(k, []).append(v)
    return out


def _reloads(running) -> float:
    for line in running.internal("/metrics").text.splitlines():
        if line.startswith("nginx_ingress_controller_success "):
            return float(line.split()[1])
    return -1.0


SNIPPET = """more_set_headers "X-Snippet: on";
proxy_set_header X-User-Seen $http_x_user;
if ($http_x_block = "yes") { return 403 "blocked"; }
"""


def test_header_configmaps_and_the_snippet_switch(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    fake_api.create(_cm("ingress", {"proxy-set-headers": "system/req", "add-headers": "res",
                                    "global-allowed-response-headers": "X-Frame-Options"}))
    fake_api.create(_cm("req", {"X-Env": "prod"}))
    fake_api.create(_cm("res", {"X-Served-By": "platform"}))
    fake_api.create(_cm("sec", {"X-Frame-Options": "DENY"}, namespace="default"))  # the Ingress's own namespace
    fake_api.create(o.ingress("plain", "plain.example", [("/", "web", 80)]))
    fake_api.create(o.ingress("custom", "custom.example", [("/", "web", 80)],
                              annotations={"custom-headers": "sec"}))
    fake_api.create(o.ingress("snip", "snip.example", [("/", "web", 80)],
                              annotations={"configuration-snippet": SNIPPET}))
    running = ingress_controller("--configmap", "system/ingress")  # all namespaces: the Ingress's ConfigMaps too
    running.wait_ready()
    r = running.wait_served("custom.example", "/", "web", timeout=20)
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-served-by"] == "platform"
    r = running.get("/", host="plain.example")
    assert _seen(r)["x-env"] == ["prod"] and "x-frame-options" not in r.headers
    # Snippets are off by default: that Ingress is not served.
    assert running.get("/", host="snip.example").status_code == 404
    start = _reloads(running)

    # A header ConfigMap change is served without a reload.
    sec = fake_api.get("ConfigMap", "default", "sec")
    sec["data"] = {"X-Frame-Options": "SAMEORIGIN"}
    fake_api.update(sec)
    wait_for(lambda: running.get("/", host="custom.example").headers.get("x-frame-options") == "SAMEORIGIN", 20,
             message="custom-headers change served")

    # The operator turns snippets on: the parsed subset is applied.
    cm = fake_api.get("ConfigMap", "system", "ingress")
    cm["data"] = {**cm["data"], "allow-snippet-annotations": "true", "annotations-risk-level": "Critical"}
    fake_api.update(cm)
    r = running.wait_served("snip.example", "/", "web", timeout=20)
    assert r.headers["x-snippet"] == "on"
    assert _seen(running.get("/", host="snip.example", headers={"X-User": "ann"}))["x-user-seen"] == ["ann"]
    r = running.get("/", host="snip.example", headers={"X-Block": "yes"})
    assert (r.status_code, r.text) == (403, "blocked")
    assert _reloads(running) == start

    # A missing custom-headers ConfigMap: that Ingress stops being served (fail closed), the rest serves.
    fake_api.delete("ConfigMap", "default", "sec")
    wait_for(lambda: running.get("/", host="custom.example").status_code == 404, 20, message="custom fails closed")
    assert running.get("/", host="plain.example").text == "web"
