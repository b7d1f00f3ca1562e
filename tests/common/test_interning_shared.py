"""interning: equal values under the repeating keys (ports, conditions, status...) are one object."""

from __future__ import annotations

import json

from platformd.common import interning
from platformd.common.apisource import parse_list
from platformd.common.resources import for_kind


def _slice(name: str, address: str, ready=True) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": ready}}]}


def test_list_items_share_equal_ports_and_conditions_and_keep_the_rest_apart():
    body = json.dumps({"metadata": {"resourceVersion": "9"}, "items": [
        _slice("a", "10.0.0.1"), _slice("b", "10.0.0.2"), _slice("c", "10.0.0.3", ready=1)]}).encode()
    a, b, c = parse_list(body, for_kind("discovery.k8s.io/v1", "EndpointSlice")).items
    assert a["ports"] is b["ports"] is c["ports"]
    assert a["endpoints"][0]["conditions"] is b["endpoints"][0]["conditions"]
    # true and 1 are equal in Python but not in JSON: never merged
    assert c["endpoints"][0]["conditions"] is not a["endpoints"][0]["conditions"]
    assert c["endpoints"][0]["conditions"]["ready"] == 1 and c["endpoints"][0]["conditions"]["ready"] is not True
    assert a["endpoints"] is not b["endpoints"] and a["metadata"] is not b["metadata"]
    assert a["endpoints"][0]["addresses"] == ["10.0.0.1"] and b["endpoints"][0]["addresses"] == ["10.0.0.2"]


def test_watch_copies_share_with_list_items():
    first = interning.interned(json.loads(json.dumps(_slice("d", "10.0.0.4"))))
    second = interning.interned(json.loads(json.dumps(_slice("e", "10.0.0.5"))))
    assert first["ports"] is second["ports"]
    assert first["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]


def test_different_values_under_a_shared_key_stay_different():
    one = interning.loads(json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}))
    two = interning.loads(json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.2"}]}}}))
    assert one["status"] is not two["status"]
    assert two["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.2"
