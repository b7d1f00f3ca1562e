"""interning: uid and resourceVersion (unique per object) stay out of the interned-string table;
every other string value is still interned, and no value changes."""

from __future__ import annotations

import json
import sys
import uuid

from platformd.common import interning
from platformd.common.apisource import decode_watch, parse_list
from platformd.common.filesource import parse_manifests
from platformd.common.resources import ENDPOINT_SLICES


def _fresh(text: str) -> str:
    """An equal string that is not the same object (never a compile-time constant)."""
    return "".join(list(text))


def _in_table(value: str) -> bool:
    """True if ``value`` is the interned string of its text (it is in the table)."""
    return sys.intern(_fresh(value)) is value


def _slice(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "shop-" + uuid.uuid4().hex,
                         "uid": str(uuid.uuid4()), "resourceVersion": str(uuid.uuid4().int)},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}]}


def _check(obj: dict, original: dict) -> None:
    meta = obj["metadata"]
    assert not _in_table(meta["uid"]) and not _in_table(meta["resourceVersion"])
    assert _in_table(meta["namespace"]) and _in_table(meta["name"])
    assert obj["metadata"] == original["metadata"]


def test_list_items_keep_uid_and_resource_version_out_of_the_table():
    items = [_slice("a"), _slice("b")]
    body = json.dumps({"metadata": {"resourceVersion": "9"}, "items": items}).encode()
    for got, original in zip(parse_list(body, ENDPOINT_SLICES).items, items):
        _check(got, original)


def test_watch_objects_keep_uid_and_resource_version_out_of_the_table():
    original = _slice("c")
    line = json.dumps({"type": "ADDED", "object": original}).encode() + b"\n"
    (event,) = decode_watch([line])
    _check(event.object, original)
    assert event.object == original


def test_interned_copy_keeps_non_string_values_under_unique_keys():
    doc = {"metadata": {"uid": {"odd": "x" + uuid.uuid4().hex}, "resourceVersion": 7}}
    copy = interning.interned(json.loads(json.dumps(doc)))
    assert copy == doc
    assert _in_table(copy["metadata"]["uid"]["odd"])  # a nested value is interned as usual


def test_yaml_manifests_keep_uid_and_resource_version_out_of_the_table():
    uid, version, namespace = str(uuid.uuid4()), str(uuid.uuid4().int), "ns-" + uuid.uuid4().hex
    text = (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: {namespace}\n"
            f"  uid: {uid}\n  resourceVersion: '{version}'\ndata:\n  k: v\n")
    ((_, obj),) = parse_manifests("cm.yaml", text)
    meta = obj["metadata"]
    assert meta["uid"] == uid and meta["resourceVersion"] == version
    assert not _in_table(meta["uid"]) and not _in_table(meta["resourceVersion"])
    assert _in_table(meta["namespace"])


def test_loads_gives_what_json_gives_with_strings_interned_at_every_depth():
    tag = uuid.uuid4().hex
    doc = {"a": ["x" + tag, ["y" + tag, {"z": "w" + tag}], 1, 2.5, None, True],
           "ports": [{"name": "p" + tag, "port": 8080}], "uid": "u" + tag, "n": {"resourceVersion": "r" + tag}}
    text = json.dumps([doc, doc])
    got = interning.loads(text)
    assert got == json.loads(text)
    first, second = got
    assert _in_table(first["a"][0]) and _in_table(first["a"][1][0]) and _in_table(first["a"][1][1]["z"])
    assert first["a"][0] is second["a"][0]
    assert first["ports"] is second["ports"]  # shared under SHARED_KEYS
    assert not _in_table(first["uid"]) and not _in_table(first["n"]["resourceVersion"])
    assert interning.loads(json.dumps(["s" + tag, ["t" + tag]])) == ["s" + tag, ["t" + tag]]
    assert _in_table(interning.loads(json.dumps(["v" + tag]))[0])
