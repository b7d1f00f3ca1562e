"""The API source interns the strings of what it decodes (objects live as
long as the informers that keep them), without changing any value."""

import json

from platformd.common.apisource import decode_watch, parse_list
from platformd.common.resources import ENDPOINT_SLICES


def slice_json(name, address):
    return {"metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}]}


def test_list_items_share_their_repeated_strings():
    body = json.dumps({"metadata": {"resourceVersion": "9"},
                       "items": [slice_json("a", "10.0.0.1"), slice_json("b", "10.0.0.2")]}).encode()
    a, b = parse_list(body, ENDPOINT_SLICES).items
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["ports"][0]["protocol"] is b["ports"][0]["protocol"]
    assert a["metadata"]["labels"]["kubernetes.io/service-name"] is b["metadata"]["labels"]["kubernetes.io/service-name"]
    assert a["endpoints"][0]["addresses"] == ["10.0.0.1"]  # values unchanged
    assert a == {**slice_json("a", "10.0.0.1"), "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1"}


def test_watch_events_share_keys_and_values_with_each_other_and_with_lists():
    listed = parse_list(json.dumps({"metadata": {}, "items": [slice_json("a", "10.0.0.1")]}).encode(),
                        ENDPOINT_SLICES).items[0]
    lines = b"".join(json.dumps({"type": "MODIFIED", "object": slice_json(name, "10.0.0.9")}).encode() + b"\n"
                     for name in ("b", "c"))
    b, c = (event.object for event in decode_watch([lines]))
    # Each event is decoded on its own, so without interning its keys are new strings.
    assert all(x is y for x, y in zip(b["metadata"], c["metadata"]))
    assert all(x is y for x, y in zip(b["endpoints"][0]["conditions"], c["endpoints"][0]["conditions"]))
    for other in (c, listed):
        assert b["metadata"]["namespace"] is other["metadata"]["namespace"]
        assert b["ports"][0]["name"] is other["ports"][0]["name"]
    assert b == slice_json("b", "10.0.0.9")
