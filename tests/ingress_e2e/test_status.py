"""Ingress status: written by the elected leader only, from the configured source."""

from __future__ import annotations

import time

import pytest

from platformd.ingress.status import StatusOptions, addresses_from
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for

LB_SERVICE = {"spec": {"type": "LoadBalancer", "externalIPs": ["198.51.100.7"]},
              "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}, {"hostname": "lb.example"}]}}}
NODE = {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.4"},
                                 {"type": "Hostname", "address": "node-a"}]}}
NODE_EXTERNAL = {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.4"},
                                          {"type": "ExternalIP", "address": "192.0.2.44"}]}}


# (options, publish service object, node object) -> loadBalancer.ingress
ADDRESS_CASES = [
    (StatusOptions(publish_status_address="192.0.2.1, lb.example,192.0.2.1"), LB_SERVICE, NODE,
     [{"hostname": "lb.example"}, {"ip": "192.0.2.1"}]),
    (StatusOptions(publish_service="ns/lb"), LB_SERVICE, NODE, [{"hostname": "lb.example"}, {"ip": "203.0.113.5"}]),
    (StatusOptions(publish_service="ns/lb"), {"spec": {"externalIPs": ["198.51.100.7"]}}, NODE,
     [{"ip": "198.51.100.7"}]),
    (StatusOptions(publish_service="ns/lb"), {"spec": {"type": "ExternalName", "externalName": "ext.example"}},
     NODE, [{"hostname": "ext.example"}]),
    (StatusOptions(publish_service="ns/lb"), None, NODE, []),
    (StatusOptions(node_name="node-a"), None, NODE, [{"ip": "10.0.0.4"}]),
    (StatusOptions(node_name="node-a"), None, NODE_EXTERNAL, [{"ip": "192.0.2.44"}]),
    (StatusOptions(node_name="node-a"), None, None, []),
]


@pytest.mark.parametrize("options,service,node,expected", ADDRESS_CASES)
def test_addresses_from(options, service, node, expected):
    assert addresses_from(options, service, node) == expected


def _lb(fake_api, name: str = "web") -> list:
    obj = fake_api.get("Ingress", "default", name) or {}
    return ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []


def _seed(fake_api, backends) -> None:
    fake_api.create(o.ingress_class())
    fake_api.create(o.ingress_class("other", controller="example.com/other"))
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    fake_api.create(o.ingress("web", "web.example", [("/", "web", 80)]))
    fake_api.create(o.ingress("theirs", "theirs.example", [("/", "web", 80)], class_name="other"))


def test_only_the_leader_writes_status(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    _seed(fake_api, backends)
    first = ingress_controller("--publish-status-address", "192.0.2.1", "--election-id", "status-test")
    first.wait_ready()
    wait_for(lambda: _lb(fake_api) == [{"ip": "192.0.2.1"}], 20, message="leader wrote status")
    second = ingress_controller("--publish-status-address", "192.0.2.2", "--election-id", "status-test")
    second.wait_ready()
    assert second.get("/", host="web.example").text == "web"  # the follower serves traffic too
    # The follower never overwrites the leader's status.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert _lb(fake_api) == [{"ip": "192.0.2.1"}]
        time.sleep(0.2)
    lease = fake_api.get("Lease", "default", "status-test")
    assert lease["spec"]["holderIdentity"]
    # Not ours: never touched.
    assert _lb(fake_api, "theirs") == []
    # The leader goes; the Lease is released and the follower takes over.
    first.stop()
    wait_for(lambda: _lb(fake_api) == [{"ip": "192.0.2.2"}], 30, message="new leader wrote status")


def test_status_cleared_on_shutdown_when_asked(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    _seed(fake_api, backends)
    running = ingress_controller("--publish-status-address", "192.0.2.9", "--update-status-on-shutdown")
    running.wait_ready()
    wait_for(lambda: _lb(fake_api) == [{"ip": "192.0.2.9"}], 20, message="status written")
    running.stop()
    assert _lb(fake_api) == []


def test_status_kept_on_shutdown_by_default(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    _seed(fake_api, backends)
    running = ingress_controller("--publish-status-address", "192.0.2.9")
    running.wait_ready()
    wait_for(lambda: _lb(fake_api) == [{"ip": "192.0.2.9"}], 20, message="status written")
    running.stop()
    assert _lb(fake_api) == [{"ip": "192.0.2.9"}]


def test_status_from_publish_service(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    _seed(fake_api, backends)
    lb = o.service("lb")
    lb["spec"]["type"] = "LoadBalancer"
    fake_api.create(lb)
    lb = fake_api.get("Service", "default", "lb")
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}}
    fake_api.update(lb)
    running = ingress_controller("--publish-service", "default/lb")
    running.wait_ready()
    wait_for(lambda: _lb(fake_api) == [{"ip": "203.0.113.5"}], 20, message="status from the Service")


def test_status_from_node_addresses(fake_api, ingress_controller, netns_backends, monkeypatch):
    backends = netns_backends(["web"])
    _seed(fake_api, backends)
    monkeypatch.setenv("NODE_NAME", "node-a")
    fake_api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
                     "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.4"}]}})
    node = fake_api.get("Node", None, "node-a")
    node["status"] = {"addresses": [{"type": "InternalIP", "address": "10.0.0.4"}]}
    fake_api.update(node)
    running = ingress_controller()
    running.wait_ready()
    wait_for(lambda: _lb(fake_api) == [{"ip": "10.0.0.4"}], 20, message="status from the node")
