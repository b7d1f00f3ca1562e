"""Storage keeps each object once, immutable, with its JSON: reads share it.

These pin down what that must not change: callers still own what the
direct methods return, list bodies are the bytes `json.dumps` would give,
paging reads one snapshot even when objects change between pages, and
watches deliver every queued event in order (several per write).
"""

import json

from tests.fakeapi.resources import resolve

from .helpers import connect, raw


def _cm(name, ns="default", data=None, labels=None):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "data": data or {"k": "v"}}


def _get_bytes(server, path):
    conn = connect(server)
    try:
        conn.request("GET", path, headers={"Accept": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_direct_results_are_private_copies(fake_api):
    created = fake_api.create(_cm("a"))
    created["data"]["k"] = "changed"
    got = fake_api.get("configmaps", "default", "a")
    assert got["data"] == {"k": "v"}
    got["data"]["k"] = "changed"
    listed = fake_api.list_objects("configmaps", "default")
    assert listed[0]["data"] == {"k": "v"}
    listed[0]["metadata"]["name"] = "changed"
    assert fake_api.get("configmaps", "default", "a")["metadata"]["name"] == "a"


def test_reads_share_the_stored_object(fake_api):
    fake_api.create(_cm("a"))
    rt = resolve("configmaps")
    assert fake_api.storage.objects(rt)[0] is fake_api.storage.objects(rt)[0]


def test_list_body_is_compact_json_of_the_list(fake_api):
    for i in range(3):
        fake_api.create(_cm(f"cm-{i}", data={"i": str(i), "unicode": "\u00e9\u2603"}))
    status, body = _get_bytes(fake_api, "/api/v1/namespaces/default/configmaps?limit=2")
    assert status == 200
    parsed = json.loads(body)
    assert json.dumps(parsed, separators=(",", ":")).encode() == body
    assert list(parsed) == ["kind", "apiVersion", "metadata", "items"]
    assert [o["metadata"]["name"] for o in parsed["items"]] == ["cm-0", "cm-1"]
    assert parsed["metadata"]["remainingItemCount"] == 1


def test_paging_snapshot_survives_updates_deletes_and_recreates(fake_api):
    for ns in ("a", "b"):
        for i in range(5):
            fake_api.create(_cm(f"cm-{i}", ns=ns))
    status, first, _ = raw(fake_api, "GET", "/api/v1/namespaces/b/configmaps", query={"limit": 2})
    assert status == 200 and first["metadata"]["remainingItemCount"] == 3
    old = {o["metadata"]["name"]: o for o in fake_api.list_objects("configmaps", "b")}
    fake_api.update({**old["cm-3"], "data": {"k": "new"}})
    fake_api.delete("configmaps", "b", "cm-2")
    fake_api.delete("configmaps", "b", "cm-4")
    fake_api.create(_cm("cm-4", ns="b", data={"k": "recreated"}))
    fake_api.create(_cm("cm-22", ns="b"))
    items, token = first["items"], first["metadata"]["continue"]
    while token:
        status, page, _ = raw(fake_api, "GET", "/api/v1/namespaces/b/configmaps",
                              query={"limit": 2, "continue": token})
        assert status == 200
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        items += page["items"]
        token = page["metadata"].get("continue")
    assert items == [old[f"cm-{i}"] for i in range(5)]
    now = fake_api.list_objects("configmaps", "b")
    assert [o["metadata"]["name"] for o in now] == ["cm-0", "cm-1", "cm-22", "cm-3", "cm-4"]
    assert now[-1]["data"] == {"k": "recreated"}


def test_selector_paging_counts_only_matches(fake_api):
    for i in range(6):
        fake_api.create(_cm(f"cm-{i}", labels={"even": str(i % 2 == 0).lower()}))
    names, token = [], None
    while True:
        query = {"limit": 2, "labelSelector": "even=true"}
        if token:
            query["continue"] = token
        status, page, _ = raw(fake_api, "GET", "/api/v1/configmaps", query=query)
        assert status == 200 and "remainingItemCount" not in page["metadata"]
        names += [o["metadata"]["name"] for o in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert names == ["cm-0", "cm-2", "cm-4"]


def test_watch_delivers_a_burst_in_order(fake_api):
    since = fake_api.storage.resource_version
    for i in range(700):
        fake_api.create(_cm(f"cm-{i:03}"))
    status, body = _get_bytes(fake_api, f"/api/v1/configmaps?watch=true&resourceVersion={since}"
                                        f"&timeoutSeconds=1")
    events = [json.loads(line) for line in body.splitlines() if line]
    assert status == 200
    assert [e["object"]["metadata"]["name"] for e in events] == [f"cm-{i:03}" for i in range(700)]
    assert {e["type"] for e in events} == {"ADDED"}


def test_converted_views_list_and_watch_without_stored_json(fake_api):
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"name": "e1", "namespace": "default"},
             "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
             "reason": "Started", "message": "hello", "type": "Normal"}
    since = fake_api.storage.resource_version
    fake_api.create(event)
    status, listed, _ = raw(fake_api, "GET", "/apis/events.k8s.io/v1/namespaces/default/events")
    assert status == 200 and listed["items"][0]["note"] == "hello"
    assert "message" not in listed["items"][0]
    status, body = _get_bytes(fake_api, "/apis/events.k8s.io/v1/namespaces/default/events?watch=true"
                                        f"&resourceVersion={since}&timeoutSeconds=1")
    (line,) = [json.loads(line) for line in body.splitlines() if line]
    assert line["type"] == "ADDED" and line["object"]["note"] == "hello"
