"""Traffic annotations end to end: Ingresses in the (fake) API -> the
controller -> nginx -> backends in network namespaces (custom-http-errors
with default-backend, from-to-www-redirect, limit-rpm with the ConfigMap's
status code, proxy-http-version through a generated lane)."""

from __future__ import annotations

from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for

HOST = "shop.example"


def test_traffic_annotations_through_the_controller(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web", "errors"])
    create = fake_api.create
    create(o.ingress_class())
    for name in ("web", "errors"):
        create(o.service(name))
        create(o.endpoint_slice(name, [backends[name].ip]))
    # A Service whose endpoint refuses connections (nothing listens on 9): 502.
    create(o.service("broken"))
    create(o.endpoint_slice("broken", [backends["web"].ip], port=9))
    create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ingress", "namespace": "default"},
            "data": {"limit-req-status-code": "429"}})
    create(o.ingress("shop", HOST, [("/", "web", 80), ("/broken", "broken", 80)], annotations={
        "custom-http-errors": "502,503", "default-backend": "errors", "from-to-www-redirect": "true",
        "proxy-http-version": "1.0", "proxy-next-upstream-tries": "1"}))
    create(o.ingress("limited", "limited.example", [("/", "web", 80)], annotations={
        "limit-rpm": "1", "limit-burst-multiplier": "1"}))
    running = ingress_controller("--configmap", "default/ingress")
    running.wait_ready()
    running.wait_served(HOST, "/", "web")

    # An error of a listed code is answered by the default-backend Service.
    r = wait_for(lambda: (r := running.get("/broken", host=HOST)).text == "errors" and r, 10,
                 message="custom error page")
    assert r.status_code == 200 and r.headers["x-path"] == "/"
    # from-to-www-redirect: the other name redirects, path and query kept.
    r = running.get("/a?b=1", host="www.shop.example")
    assert (r.status_code, r.headers["location"]) == (308, "http://shop.example/a?b=1")
    # limit-rpm 1 x 1: one at once and a burst of one, then the ConfigMap's 429.
    statuses = [running.get("/", host="limited.example").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert not [p for p in running.status()["problems"] if p["name"] in ("shop", "limited")]
