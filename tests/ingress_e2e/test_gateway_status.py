"""Gateway API in the real ``platformd ingress``: status by the leader only,
and Ingresses served as before when the CRDs are missing.

Traffic tests are in test_gateway_routing.py and test_gateway_listeners.py."""

from __future__ import annotations

import logging
import time

from tests.ingress.gateway_objects import gateway, gateway_class, http_route
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for

CONTROLLER = "platform.io/gateway-controller"


def _plain(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("creationTimestamp", "generation")}
    return {**obj, "metadata": meta}


def _gateway_conditions(fake_api) -> dict:
    status = (fake_api.get("Gateway", "default", "gw") or {}).get("status") or {}
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or ()}


def _addresses(fake_api) -> list:
    return ((fake_api.get("Gateway", "default", "gw") or {}).get("status") or {}).get("addresses") or []


def _seed(fake_api) -> None:
    fake_api.create(_plain(gateway_class()))
    fake_api.create(o.service("svc"))
    fake_api.create(_plain(gateway()))
    fake_api.create(_plain(http_route()))


def test_leader_writes_gateway_status_and_follower_does_not(fake_api, ingress_controller):
    _seed(fake_api)
    first = ingress_controller("--publish-status-address", "192.0.2.1", "--election-id", "gw-status")
    first.wait_ready()
    wait_for(lambda: _gateway_conditions(fake_api) == {"Accepted": ("True", "Accepted"),
                                                       "Programmed": ("True", "Programmed")}, 20,
             message="Gateway status written")
    assert _addresses(fake_api) == [{"type": "IPAddress", "value": "192.0.2.1"}]
    route = wait_for(lambda: ((fake_api.get("HTTPRoute", "default", "route") or {}).get("status") or {}).get("parents"),
                     20, message="route status")
    assert [(p["controllerName"], {c["type"]: c["status"] for c in p["conditions"]}) for p in route] == [
        (CONTROLLER, {"Accepted": "True", "ResolvedRefs": "True"})]
    summary = first.status()["gateway_api"]
    assert (summary["gateways"], summary["http_routes"], summary["not_accepted"]) == (1, 1, [])
    second = ingress_controller("--publish-status-address", "192.0.2.2", "--election-id", "gw-status")
    second.wait_ready()
    wait_for(lambda: second.status() and True, 10)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert _addresses(fake_api) == [{"type": "IPAddress", "value": "192.0.2.1"}]
        time.sleep(0.2)
    first.stop()
    wait_for(lambda: _addresses(fake_api) == [{"type": "IPAddress", "value": "192.0.2.2"}], 30,
             message="the new leader's addresses")


def test_without_the_crds_one_line_is_logged_and_ingresses_are_served(fake_api, ingress_controller, caplog):
    fake_api.set_crds_installed("gateway-api", False)
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.ingress("web", "web.example", [("/", "web", 80)]))
    with caplog.at_level(logging.INFO):
        running = ingress_controller("--publish-status-address", "192.0.2.1")
        running.wait_ready()
        wait_for(lambda: ((fake_api.get("Ingress", "default", "web") or {}).get("status") or {}).get("loadBalancer", {})
                 .get("ingress") == [{"ip": "192.0.2.1"}], 20, message="Ingress status")
    assert "gateway_api" not in running.status()
    gateway_lines = [r.getMessage() for r in caplog.records if "Gateway API" in r.getMessage()]
    assert len(gateway_lines) == 1 and "CRDs are not installed" in gateway_lines[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "gateway" in r.getMessage().lower()]
