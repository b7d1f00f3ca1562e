"""The route review inside the real controller: the API server asks it about
HTTPRoute writes and refuses what the controller would not serve."""

from __future__ import annotations

import pytest

from tests.fakeapi import ApiError
from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, listener, rule
from tests.ingress.test_webhook_certs import CONFIG
from tests.ingress.test_webhook_controller import controller  # noqa: F401 - the fixture
from tests.ingress_e2e.conftest import wait_for
from tests.ingress_e2e.test_gateway_routing import _plain


def _review_routes_too(fake_api) -> None:
    config = fake_api.get("ValidatingWebhookConfiguration", None, CONFIG)
    for hook in config["webhooks"]:
        hook["rules"].append({"apiGroups": ["gateway.networking.k8s.io"], "apiVersions": ["v1"],
                              "operations": ["CREATE", "UPDATE"], "resources": ["httproutes"]})
    fake_api.update(config)


def test_the_api_server_refuses_a_route_the_controller_would_not_serve(fake_api, controller):  # noqa: F811
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway(listeners=[listener("http", hostname="*.example.com")])))
    wait_for(lambda: (controller.status().get("gateway_api") or {}).get("gateways") == 1, 20,
             message="the Gateway is known to the controller")
    _review_routes_too(fake_api)
    with pytest.raises(ApiError) as caught:
        fake_api.create(_plain(http_route("elsewhere", hostnames=["a.other.org"])))
    assert caught.value.code == 400 and "Accepted=False NoMatchingListenerHostname" in str(caught.value)
    assert fake_api.get("HTTPRoute", "default", "elsewhere") is None
    fake_api.create(_plain(http_route("later", hostnames=["a.example.com"], rules=[rule(backend("later"))])))
    assert any("BackendNotFound" in w for w in fake_api.registry.admit.warnings)
