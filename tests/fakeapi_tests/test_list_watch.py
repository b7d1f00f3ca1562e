"""List (paging, resourceVersion, selectors) and watch semantics."""

import json
import threading
import time

import pytest
from kubernetes import client, watch

from tests.fakeapi import registry

from .helpers import raw


def _cm(name, labels=None, ns="default"):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}}}


def _names(items):
    return [i.metadata.name if hasattr(i, "metadata") else i["metadata"]["name"] for i in items]


def test_list_metadata_and_global_resource_version(fake_api, core):
    a = fake_api.create(_cm("a"))
    svc = core.create_namespaced_service("default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}]}})
    assert int(svc.metadata.resource_version) > int(a["metadata"]["resourceVersion"])
    listed = core.list_namespaced_config_map("default")
    assert listed.kind == "ConfigMapList" and listed.api_version == "v1"
    assert int(listed.metadata.resource_version) >= int(svc.metadata.resource_version)


def test_paging_is_a_consistent_snapshot(fake_api, core):
    for i in range(7):
        fake_api.create(_cm(f"cm-{i}"))
    first = core.list_namespaced_config_map("default", limit=3)
    assert _names(first.items) == ["cm-0", "cm-1", "cm-2"]
    assert first.metadata.remaining_item_count == 4 and first.metadata._continue
    # Changes after the first page do not show up in later pages.
    fake_api.create(_cm("cm-9"))
    fake_api.delete("configmaps", "default", "cm-5")
    names, token = _names(first.items), first.metadata._continue
    while token:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        names += _names(page.items)
        assert page.metadata.resource_version == first.metadata.resource_version
        token = page.metadata._continue
    assert names == [f"cm-{i}" for i in range(7)]


def test_expired_continue_token_is_410(fake_api, core):
    for i in range(4):
        fake_api.create(_cm(f"cm-{i}"))
    first = core.list_namespaced_config_map("default", limit=2)
    fake_api.create(_cm("later"))
    fake_api.faults.compact()
    with pytest.raises(client.ApiException) as e:
        core.list_namespaced_config_map("default", limit=2, _continue=first.metadata._continue)
    assert e.value.status == 410
    body = json.loads(e.value.body)
    assert body["reason"] == "Expired" and body["metadata"]["continue"]


def test_bad_continue_token_is_400(fake_api):
    status, body, _ = raw(fake_api, "GET", "/api/v1/configmaps", query={"continue": "garbage"})
    assert status == 400 and body["reason"] == "BadRequest"


def test_exact_resource_version_reads_the_past(fake_api, core):
    fake_api.create(_cm("a"))
    then = core.list_namespaced_config_map("default").metadata.resource_version
    fake_api.create(_cm("b"))
    fake_api.delete("configmaps", "default", "a")
    past = core.list_namespaced_config_map("default", resource_version=then,
                                           resource_version_match="Exact")
    assert _names(past.items) == ["a"] and past.metadata.resource_version == then
    assert _names(core.list_namespaced_config_map("default", resource_version="0").items) == ["b"]
    fake_api.faults.compact()
    with pytest.raises(client.ApiException) as e:
        core.list_namespaced_config_map("default", resource_version=then, resource_version_match="Exact")
    assert e.value.status == 410 and json.loads(e.value.body)["reason"] == "Expired"


@pytest.mark.parametrize("watch", [False, True])
def test_future_resource_version_times_out(fake_api, monkeypatch, watch):
    monkeypatch.setattr(registry, "TOO_LARGE_RV_WAIT", 0.1)
    query = {"resourceVersion": "999999", **({"watch": "1"} if watch else {})}
    status, body, _ = raw(fake_api, "GET", "/api/v1/configmaps", query=query)
    assert status == 504 and body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


@pytest.mark.parametrize("selector,expected", [
    ("app=web", ["a", "b"]),
    ("app==web", ["a", "b"]),
    ("app!=web", ["c", "d"]),
    ("app in (web,db)", ["a", "b", "c"]),
    ("app notin (web)", ["c", "d"]),
    ("tier", ["b"]),
    ("!tier", ["a", "c", "d"]),
    ("app=web,tier=front", ["b"]),
])
def test_label_selectors(fake_api, core, selector, expected):
    fake_api.create(_cm("a", {"app": "web"}))
    fake_api.create(_cm("b", {"app": "web", "tier": "front"}))
    fake_api.create(_cm("c", {"app": "db"}))
    fake_api.create(_cm("d"))
    assert _names(core.list_namespaced_config_map("default", label_selector=selector).items) == expected


def test_field_selectors(fake_api, core):
    fake_api.create(_cm("a"))
    fake_api.create(_cm("b", ns="other"))
    assert _names(core.list_config_map_for_all_namespaces(field_selector="metadata.name=b").items) == ["b"]
    assert _names(core.list_config_map_for_all_namespaces(
        field_selector="metadata.namespace!=other").items) == ["a"]
    status, body, _ = raw(fake_api, "GET", "/api/v1/configmaps", query={"fieldSelector": "data.x=1"})
    assert status == 400 and "field label not supported" in body["message"]
    status, _, _ = raw(fake_api, "GET", "/api/v1/configmaps", query={"labelSelector": "a in b"})
    assert status == 400


def _collect(core, stop_after, **kwargs):
    events = []
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, "default", **kwargs):
        obj = ev["object"]
        meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata.to_dict()
        events.append((ev["type"], meta.get("name"), meta.get("resource_version") or meta.get("resourceVersion")))
        if len(events) >= stop_after:
            w.stop()
    return events


def test_watch_from_resource_version_sees_changes_in_order(fake_api, core):
    rv = core.list_namespaced_config_map("default").metadata.resource_version

    def writer():
        time.sleep(0.1)
        core.create_namespaced_config_map("default", _cm("a"))
        core.patch_namespaced_config_map("a", "default", {"data": {"k": "v"}})
        core.delete_namespaced_config_map("a", "default")
    threading.Thread(target=writer).start()
    events = _collect(core, 3, resource_version=rv, timeout_seconds=5)
    assert [e[:2] for e in events] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    rvs = [int(e[2]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3  # DELETED carries the deletion's rv


def test_watch_replays_history(fake_api, core):
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    fake_api.create(_cm("a"))
    fake_api.create(_cm("b"))
    assert [e[:2] for e in _collect(core, 2, resource_version=rv, timeout_seconds=2)] == \
        [("ADDED", "a"), ("ADDED", "b")]


def test_watch_without_resource_version_starts_with_current_state(fake_api, core):
    fake_api.create(_cm("a"))
    assert [e[:2] for e in _collect(core, 1, timeout_seconds=2)] == [("ADDED", "a")]


def test_watch_too_old_resource_version_is_410(fake_api, core):
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    fake_api.create(_cm("a"))
    fake_api.faults.compact()
    with pytest.raises(client.ApiException) as e:
        _collect(core, 1, resource_version=rv, timeout_seconds=2)
    assert e.value.status == 410


def test_watch_error_event_shape(fake_api):
    fake_api.create(_cm("a"))
    fake_api.faults.compact()
    status, body, headers = raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps",
                                query={"watch": "1", "resourceVersion": "1"})
    assert status == 200
    assert body["type"] == "ERROR"
    assert body["object"]["code"] == 410 and body["object"]["reason"] == "Expired"
    assert body["object"]["message"].startswith("too old resource version: 1 (")


def test_history_limit_bounds_watch_start(core):
    from tests.fakeapi import FakeApiServer
    with FakeApiServer(history_limit=3) as srv:
        start = srv.storage.resource_version
        for i in range(5):
            srv.create(_cm(f"cm-{i}"))
        status, body, _ = raw(srv, "GET", "/api/v1/configmaps",
                              query={"watch": "1", "resourceVersion": str(start)})
        assert body["type"] == "ERROR"


def test_bookmarks_only_when_allowed(core, fake_api):
    fake_api.bookmark_interval = 0.2
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    with_bookmarks = _collect(core, 2, resource_version=rv, timeout_seconds=1, allow_watch_bookmarks=True)
    assert [e[0] for e in with_bookmarks] == ["BOOKMARK", "BOOKMARK"]
    assert int(with_bookmarks[0][2]) >= int(rv)
    started = time.monotonic()
    assert _collect(core, 1, resource_version=rv, timeout_seconds=1) == []
    assert 0.8 < time.monotonic() - started < 5  # timeoutSeconds ends the stream


def test_bookmark_object_shape(fake_api):
    fake_api.bookmark_interval = 0.1
    status, body, _ = raw(fake_api, "GET", "/apis/networking.k8s.io/v1/ingresses",
                          query={"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "1",
                                 "resourceVersion": str(fake_api.storage.resource_version)})
    first = json.loads(body.splitlines()[0]) if isinstance(body, str) else body
    assert first == {"type": "BOOKMARK", "object": {
        "kind": "Ingress", "apiVersion": "networking.k8s.io/v1",
        "metadata": {"resourceVersion": str(fake_api.storage.resource_version)}}}


def test_selector_watch_sees_objects_enter_and_leave(fake_api, core):
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    fake_api.create(_cm("a", {"app": "web"}))
    core.patch_namespaced_config_map("a", "default", {"metadata": {"labels": {"app": "db"}}})
    core.patch_namespaced_config_map("a", "default", {"metadata": {"labels": {"app": "web"}}})
    fake_api.create(_cm("other", {"app": "db"}))
    events = _collect(core, 3, resource_version=rv, timeout_seconds=2, label_selector="app=web")
    assert [e[:2] for e in events] == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "a")]


def test_namespaced_watch_ignores_other_namespaces(fake_api, core):
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    fake_api.create(_cm("elsewhere", ns="other"))
    fake_api.create(_cm("here"))
    assert [e[:2] for e in _collect(core, 1, resource_version=rv, timeout_seconds=2)] == [("ADDED", "here")]


def test_watch_response_is_chunked_json_lines(fake_api):
    import http.client
    fake_api.create(_cm("a"))
    fake_api.create(_cm("b"))
    conn = http.client.HTTPConnection(fake_api.host, fake_api.port, timeout=5)
    conn.request("GET", "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0&timeoutSeconds=1")
    resp = conn.getresponse()
    assert resp.getheader("Transfer-Encoding") == "chunked"
    lines = resp.read().decode().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["ADDED", "ADDED"]
    conn.close()


def test_watch_list_sends_state_then_an_end_marker(fake_api):
    fake_api.create(_cm("a"))
    fake_api.create(_cm("b"))
    status, body, _ = raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps", query={
        "watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true", "timeoutSeconds": "1"})
    events = [json.loads(line) for line in body.splitlines()]
    assert [e["type"] for e in events[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    marker = events[2]["object"]["metadata"]
    assert marker["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert marker["resourceVersion"] == str(fake_api.storage.resource_version)
    status, body, _ = raw(fake_api, "GET", "/api/v1/configmaps", query={
        "watch": "1", "sendInitialEvents": "true"})
    assert status == 422 and body["details"]["kind"] == "ListOptions"


def test_legacy_watch_path_narrows_to_the_named_object(fake_api):
    fake_api.create(_cm("a"))
    fake_api.create(_cm("b"))
    status, body, _ = raw(fake_api, "GET", "/api/v1/watch/namespaces/default/configmaps/b",
                          query={"timeoutSeconds": "1"})
    events = [body] if isinstance(body, dict) else [json.loads(line) for line in body.splitlines()]
    assert [e["object"]["metadata"]["name"] for e in events] == ["b"]


def test_table_output_for_kubectl(fake_api):
    fake_api.create({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                     "metadata": {"name": "web", "namespace": "default"},
                     "spec": {"ingressClassName": "platform", "rules": [{"host": "a.example"}],
                              "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}})
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    status, table, _ = raw(fake_api, "GET", "/apis/networking.k8s.io/v1/ingresses", accept=accept)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Class", "Hosts", "Address",
                                                               "Ports", "Age"]
    row = table["rows"][0]
    assert row["cells"][:3] == ["web", "platform", "a.example"]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["namespace"] == "default"


# --- the watch cache's semantics -------------------------------------------------------------

def _page(fake_api, **query):
    status, body, _ = raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps",
                          query={k: str(v) for k, v in query.items()})
    assert status == 200, body
    return body


def test_resource_version_0_is_served_whole_by_the_watch_cache(fake_api):
    for i in range(5):
        fake_api.create(_cm(f"cm-{i}"))
    reads = dict(fake_api.registry.list_reads)
    body = _page(fake_api, resourceVersion="0", limit=2)
    assert len(body["items"]) == 5 and "continue" not in body["metadata"]   # limit ignored
    assert fake_api.registry.list_reads["cache"] == reads["cache"] + 1
    # Unset: a quorum read from etcd, paged.
    body = _page(fake_api, limit=2)
    assert len(body["items"]) == 2 and body["metadata"]["continue"]
    assert fake_api.registry.list_reads["etcd"] == reads["etcd"] + 1


def test_without_a_watch_cache_resource_version_0_is_paged(fake_api):
    for i in range(5):
        fake_api.create(_cm(f"cm-{i}"))
    fake_api.registry.watch_cache = False
    body = _page(fake_api, resourceVersion="0", limit=2)
    assert len(body["items"]) == 2 and body["metadata"]["continue"]


def test_a_version_with_a_limit_is_an_exact_read_and_without_one_not_older_than(fake_api):
    fake_api.create(_cm("a"))
    then = _page(fake_api)["metadata"]["resourceVersion"]
    fake_api.create(_cm("b"))
    # No limit: at least as new as `then`, from the watch cache: the newest state.
    newest = _page(fake_api, resourceVersion=then)
    assert _names_of(newest) == ["a", "b"] and int(newest["metadata"]["resourceVersion"]) > int(then)
    # A limit without a match: the legacy meaning, exactly `then` (from etcd).
    exact = _page(fake_api, resourceVersion=then, limit=10)
    assert _names_of(exact) == ["a"] and exact["metadata"]["resourceVersion"] == then
    # NotOlderThan with a limit: etcd, the newest state, paged.
    paged = _page(fake_api, resourceVersion=then, resourceVersionMatch="NotOlderThan", limit=1)
    assert _names_of(paged) == ["a"] and paged["metadata"]["continue"]
    fake_api.faults.compact()
    status, body, _ = raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps",
                          query={"resourceVersion": then, "limit": "10"})
    assert status == 410 and body["reason"] == "Expired"
    assert _names_of(_page(fake_api, resourceVersion=then)) == ["a", "b"]     # the cache still answers


@pytest.mark.parametrize("query, message", [
    ({"resourceVersionMatch": "NotOlderThan"}, "forbidden unless resourceVersion"),
    ({"resourceVersion": "0", "resourceVersionMatch": "Exact"}, "forbidden for resourceVersion"),
    ({"resourceVersion": "1", "resourceVersionMatch": "Newest"}, "Unsupported value"),
])
def test_bad_resource_version_match_is_400(fake_api, query, message):
    status, body, _ = raw(fake_api, "GET", "/api/v1/configmaps", query=query)
    assert status == 400 and message in body["message"]


def _names_of(body) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]
