"""Matches and weights on a Gateway of its own pool address, through real
nginx: the per-address table (lua/bound.lua) is compiled by the router's own
host code, so header / query / method conditions, weighted splits and a
RequestRedirect chosen by a condition work there as on the shared table."""

from __future__ import annotations

import httpx
import pytest

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, path, rule
from tests.ingress_e2e.test_gateway_listeners import _get, _served
from tests.ingress_e2e.test_gateway_routing import _plain, _seed_backends


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def test_conditions_splits_and_redirects_on_a_pool_address(fake_api, ingress_controller, netns_backends, client):
    backends = netns_backends(["web", "canary", "a", "b"])
    _seed_backends(fake_api, backends, ["web", "canary", "a", "b"])
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway()))
    fake_api.create(_plain(http_route(hostnames=["app.example"], rules=[
        rule(backend("canary"), matches=[{**path("/"), "headers": [{"name": "x-env", "value": "canary"}]}]),
        rule(backend("web"), matches=[path("/")]),
        rule(backend("a"), backend("b"), matches=[path("/split")]),
        {"matches": [{**path("/old"), "queryParams": [{"name": "go", "value": "1"}]}],
         "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}]},
    ])))
    running = ingress_controller("--publish-status-address", "192.0.2.1", "--gateway-address-pool", "127.0.0.4")
    running.wait_ready()
    port = running.http_port
    _served(client, "127.0.0.4", port, "app.example", "/", "web")
    assert _get(client, "127.0.0.4", port, "app.example", headers={"x-env": "canary"}).text == "canary"
    assert _get(client, "127.0.0.4", port, "app.example", headers={"x-env": "other"}).text == "web"
    # The redirect answers only when its query condition holds; otherwise the path falls through to "/".
    moved = _get(client, "127.0.0.4", port, "app.example", "/old?go=1")
    assert (moved.status_code, moved.headers["location"]) == (301, "https://app.example/old?go=1")
    assert _get(client, "127.0.0.4", port, "app.example", "/old?go=2").text == "web"
    # Equal weights: both backends answer (a miss has probability 2**-39).
    seen = {_get(client, "127.0.0.4", port, "app.example", "/split").text for _ in range(40)}
    assert seen == {"a", "b"}
    # Not on other local addresses: the table is the Gateway's own.
    assert _get(client, "127.0.0.1", port, "app.example", headers={"x-env": "canary"}).status_code == 404
