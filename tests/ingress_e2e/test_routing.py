"""Routing end to end: objects in the API (or a manifest folder) → nginx → backends."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for

HOST = "shop.example"

# (host, path, expected body or status) — one Ingress with Prefix and Exact
# paths over three Services.
ROUTES = [
    (HOST, "/", "web"),
    (HOST, "/anything/else", "web"),
    (HOST, "/api", "api"),
    (HOST, "/api/v1/items?x=1", "api"),
    (HOST, "/apix", "web"),  # Prefix is element-wise: /api does not match /apix
    (HOST, "/exact", "exact"),
    (HOST, "/exact/sub", "web"),  # Exact matches nothing below it
    ("SHOP.example", "/api", "api"),  # host names are case-insensitive
    ("other.example", "/", 404),  # no server for this host
]


def _seed(create, backends) -> None:
    create(o.ingress_class())
    for name in ("web", "api", "exact"):
        create(o.service(name))
        create(o.endpoint_slice(name, [backends[name].ip]))
    create(o.ingress("shop", HOST, [("/", "web", 80), ("/api", "api", 80), ("/exact", "exact", 80, "Exact")]))


def _check_routes(running) -> None:
    for host, path, expected in ROUTES:
        response = running.get(path, host=host)
        if isinstance(expected, int):
            assert response.status_code == expected, (host, path, response.status_code)
        else:
            assert response.status_code == 200 and response.text == expected, (host, path, response.status_code,
                                                                                response.text)


@pytest.mark.parametrize("source_kind", ["api", "file"])
def test_routes_table(source_kind, fake_api, ingress_controller, netns_backends, tmp_path):
    backends = netns_backends(["web", "api", "exact"])
    if source_kind == "api":
        _seed(fake_api.create, backends)
        running = ingress_controller()
    else:
        folder = str(tmp_path / "manifests")
        os.mkdir(folder)
        docs: list[dict] = []
        _seed(docs.append, backends)
        with open(os.path.join(folder, "all.yaml"), "w") as f:
            yaml.safe_dump_all(docs, f)
        running = ingress_controller(source=folder)
    running.wait_ready()
    _check_routes(running)


def test_endpoint_change_moves_traffic_without_reload(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web", "web2"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    fake_api.create(o.ingress("shop", HOST, [("/", "web", 80)]))
    running = ingress_controller()
    running.wait_ready()
    assert running.get("/", host=HOST).text == "web"
    reloads = running.status()["reload_count"]
    slice_ = fake_api.get("EndpointSlice", "default", "web-1")
    slice_["endpoints"] = [{"addresses": [backends["web2"].ip], "conditions": {"ready": True}}]
    fake_api.update(slice_)
    running.wait_served(HOST, "/", "web2", timeout=5)
    assert running.status()["reload_count"] == reloads
    # No endpoints at all: 503, still without a reload.
    slice_ = fake_api.get("EndpointSlice", "default", "web-1")
    slice_["endpoints"] = []
    fake_api.update(slice_)
    wait_for(lambda: running.get("/", host=HOST).status_code == 503, 5, message="503 without endpoints")
    assert running.status()["reload_count"] == reloads


def test_burst_of_100_ingresses_is_served_without_a_reload(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    # The reload rate limit does not hold route changes back.
    running = ingress_controller("--sync-rate-limit", "0.1")
    running.wait_ready()
    before = running.status()["reload_count"]
    for i in range(100):
        fake_api.create(o.ingress(f"burst-{i}", f"h{i}.example", [("/", "web", 80)]))
    wait_for(lambda: running.status()["ingresses"] == 100, 30, message="100 ingresses synced")
    for i in (0, 42, 99):
        assert running.get("/", host=f"h{i}.example").text == "web"
    assert running.status()["reload_count"] == before


def test_first_sync_waits_for_every_informer(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    fake_api.create(o.ingress_class())
    for i in range(20):
        fake_api.create(o.service(f"s{i}"))
        fake_api.create(o.endpoint_slice(f"s{i}", [backends["web"].ip]))
        fake_api.create(o.ingress(f"i{i}", f"h{i}.example", [("/", f"s{i}", 80)]))
    # The first lists of EndpointSlices fail: without waiting, the first sync
    # would apply 20 backends with no endpoints.
    fake_api.faults.fail_next(3, status=500, path_prefix="/apis/discovery.k8s.io")
    running = ingress_controller()
    running.wait_ready()
    status = running.status()
    assert status["informers_synced"] is True
    assert status["ingresses"] == 20 and status["endpoints"] == 20
    assert status["reload_count"] == 1  # the very first apply already had everything
    assert running.get("/", host="h7.example").text == "web"


def test_watch_namespace_limits_what_is_served(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    fake_api.create(o.ingress_class())
    for ns in ("team-a", "team-b"):
        fake_api.create(o.service("web", namespace=ns))
        fake_api.create(o.endpoint_slice("web", [backends["web"].ip], namespace=ns))
        fake_api.create(o.ingress("web", f"{ns}.example", [("/", "web", 80)], namespace=ns))
    running = ingress_controller("--watch-namespace", "team-a")
    running.wait_ready()
    assert running.get("/", host="team-a.example").text == "web"
    assert running.get("/", host="team-b.example").status_code == 404


def test_default_backend_service_serves_unmatched_requests(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web", "fallback"])
    fake_api.create(o.ingress_class())
    for name in ("web", "fallback"):
        fake_api.create(o.service(name))
        fake_api.create(o.endpoint_slice(name, [backends[name].ip]))
    fake_api.create(o.ingress("web", HOST, [("/", "web", 80)]))
    running = ingress_controller("--default-backend-service", "default/fallback")
    running.wait_ready()
    assert running.get("/", host=HOST).text == "web"
    assert running.get("/", host="unknown.example").text == "fallback"
    # The default backend's endpoints follow its slices too.
    slice_ = fake_api.get("EndpointSlice", "default", "fallback-1")
    slice_["endpoints"] = [{"addresses": [backends["web"].ip], "conditions": {"ready": True}}]
    fake_api.update(slice_)
    running.wait_served("unknown.example", "/", "web")


def test_configmap_changes_global_settings(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    fake_api.create(o.ingress("web", "tls.example", [("/", "web", 80)],
                              tls=[{"hosts": ["tls.example"], "secretName": "missing"}]))
    fake_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ingress", "namespace": "system"},
                     "data": {"ssl-redirect": "true"}})
    running = ingress_controller("--configmap", "system/ingress", "--watch-namespace", "default")
    running.wait_ready()
    assert running.get("/", host="tls.example").status_code == 308
    cm = fake_api.get("ConfigMap", "system", "ingress")
    cm["data"] = {"ssl-redirect": "false"}
    fake_api.update(cm)
    running.wait_served("tls.example", "/", "web")
