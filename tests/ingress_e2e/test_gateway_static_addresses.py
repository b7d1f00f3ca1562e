"""Gateway spec.addresses end to end (GatewayStaticAddresses, from the
conformance scenario): the real ``platformd ingress`` with a loopback
address pool, the fake API server, real nginx. An address of a type we do
not support leaves the Gateway not accepted; an address that cannot be used
leaves it not programmed and not served anywhere (never on part of what it
asked for); once only usable addresses are asked for, it is served on that
address and status.addresses shows it."""

from __future__ import annotations

import httpx
import pytest

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, rule
from tests.ingress_e2e.conftest import wait_for
from tests.ingress_e2e.test_gateway_listeners import _addresses, _gateway_status, _get, _served
from tests.ingress_e2e.test_gateway_routing import _plain, _seed_backends


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def _conditions(fake_api):
    status = _gateway_status(fake_api, "gw")
    return {c["type"]: (c["status"], c["reason"], c["message"], c.get("observedGeneration"))
            for c in status.get("conditions") or ()}


def _set_addresses(fake_api, addresses):
    gw = fake_api.get("Gateway", "default", "gw")
    gw["spec"]["addresses"] = addresses
    return fake_api.update(gw)["metadata"]["generation"]


def test_static_addresses_unsupported_unusable_then_served(fake_api, ingress_controller, netns_backends, client):
    backends = netns_backends(["web"])
    _seed_backends(fake_api, backends, ["web"])
    fake_api.create(_plain(gateway_class()))
    usable, unusable = {"type": "IPAddress", "value": "127.0.0.5"}, {"type": "IPAddress", "value": "192.0.2.9"}
    fake_api.create(_plain(gateway(addresses=[{"type": "example.com/fake-type", "value": "x"}, unusable, usable])))
    fake_api.create(_plain(http_route(hostnames=["static.example"], rules=[rule(backend("web"))])))
    running = ingress_controller("--publish-status-address", "192.0.2.1",
                                 "--gateway-address-pool", "127.0.0.4,127.0.0.5")
    running.wait_ready()
    port = running.http_port
    found = wait_for(lambda: _conditions(fake_api).get("Accepted", ())[:2] == ("False", "UnsupportedAddress")
                     and _conditions(fake_api), 20, message="Accepted=False UnsupportedAddress")
    assert "example.com/fake-type" in found["Accepted"][2]

    generation = _set_addresses(fake_api, [unusable, usable])
    found = wait_for(lambda: (c := _conditions(fake_api)).get("Programmed", ())[1:2] == ("AddressNotUsable",)
                     and c["Programmed"][3] == generation and c, 20, message="Programmed=False AddressNotUsable")
    assert found["Accepted"][:2] == ("True", "Accepted") and found["Programmed"][0] == "False"
    assert found["Programmed"][2] == "requested address 192.0.2.9 is not in --gateway-address-pool"
    assert _addresses(fake_api, "gw") == []
    for address in ("127.0.0.5", "127.0.0.4", "127.0.0.1"):  # not served on part of what it asked for
        assert _get(client, address, port, "static.example").status_code == 404

    _set_addresses(fake_api, [usable])
    _served(client, "127.0.0.5", port, "static.example", "/", "web")
    wait_for(lambda: _conditions(fake_api).get("Programmed", ())[:2] == ("True", "Programmed")
             and _addresses(fake_api, "gw") == ["127.0.0.5"], 20, message="Programmed on 127.0.0.5")
    assert _get(client, "127.0.0.4", port, "static.example").status_code == 404
