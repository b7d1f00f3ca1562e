"""Event recorder against the fake API server, with the real ``kubernetes`` client."""

from __future__ import annotations

import socket
import time
from datetime import datetime, timezone

import pytest

from platformd.common import events, kubeclient
from platformd.common.clock import FakeClock
from platformd.common.events import EventRecorder
from tests.fakeapi import FakeApiServer


@pytest.fixture
def server():
    srv = FakeApiServer()
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def api(server, tmp_path):
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    return kubeclient.load(str(path))


@pytest.fixture
def recorder(api):
    rec = EventRecorder(api, "platform-ingress", "node-1")
    yield rec
    rec.stop(timeout=2)


def ingress(name, ns="default", uid=None):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}",
                         "resourceVersion": "7"}}


def event_requests(server):
    return [entry for entry in server.request_log
            if "/events" in entry[2] and entry[1] in ("POST", "PATCH", "PUT")]


def recorded(server, ns="default"):
    return [e for e in server.list_objects("events")
            if e["metadata"]["namespace"] == ns and e.get("apiVersion", "v1") == "v1"]


def test_a_hot_loop_of_identical_events_costs_a_bounded_number_of_requests(server, recorder):
    obj = ingress("web")
    started = time.monotonic()
    for _ in range(10_000):
        recorder.event(obj, "Warning", "SyncFailed", "service default/web not found")
    elapsed = time.monotonic() - started
    assert recorder.flush(10)
    # Never waits for the API (the sender does).
    assert elapsed < 5.0, elapsed
    requests = event_requests(server)
    # The per-object bucket lets 25 through; repeats waiting to be sent merge.
    assert 1 <= len(requests) <= events.SPAM_BURST
    stats = recorder.stats()
    assert stats.dropped_rate_limited == 10_000 - events.SPAM_BURST
    assert stats.failed == 0
    [event] = recorded(server)
    assert event["count"] == events.SPAM_BURST
    assert event["reason"] == "SyncFailed"
    assert event["type"] == "Warning"


def test_distinct_events_are_all_recorded_with_their_fields(server, recorder):
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    for name in ("a", "b", "c"):
        recorder.event(ingress(name), "Normal", "Sync", f"synced {name}")
        recorder.event(ingress(name), "Warning", "BadTLS", f"secret for {name} missing")
    recorder.event(ingress("a", ns="other"), "Normal", "Sync", "synced a")
    assert recorder.flush(10)
    got = sorted((e["involvedObject"]["name"], e["reason"], e["message"], e["type"], e["count"])
                 for e in recorded(server))
    assert got == [
        ("a", "BadTLS", "secret for a missing", "Warning", 1),
        ("a", "Sync", "synced a", "Normal", 1),
        ("b", "BadTLS", "secret for b missing", "Warning", 1),
        ("b", "Sync", "synced b", "Normal", 1),
        ("c", "BadTLS", "secret for c missing", "Warning", 1),
        ("c", "Sync", "synced c", "Normal", 1),
    ]
    [other] = recorded(server, "other")
    event = recorded(server)[0]
    assert event["involvedObject"]["kind"] == "Ingress"
    assert event["involvedObject"]["apiVersion"] == "networking.k8s.io/v1"
    assert event["involvedObject"]["uid"].startswith("uid-")
    assert event["source"] == {"component": "platform-ingress", "host": "node-1"}
    assert event["firstTimestamp"] and event["lastTimestamp"]
    assert other["involvedObject"]["namespace"] == "other"


def test_a_repeat_patches_the_existing_event(server, recorder):
    obj = ingress("web")
    recorder.event(obj, "Normal", "Sync", "synced")
    assert recorder.flush(10)
    recorder.event(obj, "Normal", "Sync", "synced")
    recorder.event(obj, "Normal", "Sync", "synced")
    assert recorder.flush(10)
    [event] = recorded(server)
    assert event["count"] == 3
    methods = [entry[1] for entry in event_requests(server)]
    assert methods[0] == "POST" and set(methods[1:]) == {"PATCH"}
    assert recorder.stats().created == 1


def test_a_patch_of_an_expired_event_creates_it_again(server, recorder):
    obj = ingress("web")
    recorder.event(obj, "Normal", "Sync", "synced")
    assert recorder.flush(10)
    [event] = recorded(server)
    server.delete("events", "default", event["metadata"]["name"])
    recorder.event(obj, "Normal", "Sync", "synced")
    assert recorder.flush(10)
    [event] = recorded(server)
    assert event["count"] == 2
    assert recorder.stats().created == 2


def test_similar_events_with_changing_messages_are_combined(server, recorder):
    obj = ingress("web")
    for i in range(15):
        recorder.event(obj, "Warning", "SyncFailed", f"conflict at resourceVersion {i}")
    assert recorder.flush(10)
    got = recorded(server)
    singles = [e for e in got if not e["message"].startswith("(combined")]
    combined = [e for e in got if e["message"].startswith("(combined")]
    assert len(singles) == events.SIMILAR_MAX_MESSAGES
    [agg] = combined
    assert agg["message"] == "(combined from similar events): conflict at resourceVersion 14"
    assert agg["count"] == 15 - events.SIMILAR_MAX_MESSAGES


def test_rate_limit_refills_one_event_per_five_minutes(server, api):
    clock = FakeClock()
    rec = EventRecorder(api, "platform-ingress", "node-1", clock=clock)
    try:
        obj = ingress("web")
        for i in range(events.SPAM_BURST + 5):
            rec.event(obj, "Normal", "Sync", "synced")
        assert rec.stats().dropped_rate_limited == 5
        clock.advance(299)
        rec.event(obj, "Normal", "Sync", "synced")
        assert rec.stats().dropped_rate_limited == 6
        clock.advance(1)
        rec.event(obj, "Normal", "Sync", "synced")
        assert rec.stats().dropped_rate_limited == 6
        # Another object has its own bucket.
        rec.event(ingress("other"), "Normal", "Sync", "synced")
        assert rec.stats().dropped_rate_limited == 6
        assert rec.flush(10)
        counts = sorted(e["count"] for e in recorded(server))
        assert counts == [1, events.SPAM_BURST + 1]
    finally:
        rec.stop(timeout=2)


def test_a_hung_api_server_never_blocks_the_caller(tmp_path):
    # A socket that accepts connections but never answers.
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    try:
        from kubernetes import client as k8s
        config = k8s.Configuration()
        config.host = f"http://127.0.0.1:{hung.getsockname()[1]}"
        rec = EventRecorder(k8s.ApiClient(config), "platform-ingress", clock=FakeClock(),
                            max_pending=5)
        started = time.monotonic()
        for i in range(100):
            rec.event(ingress(f"obj{i}"), "Normal", "Sync", "synced")
        assert time.monotonic() - started < 1.0
        # Coalesced per object, not dropped: each of the 100 objects waits
        # with its one record (the sender holds at most one of them).
        stats = rec.stats()
        assert stats.dropped_queue_full == 0 and stats.coalesced == 0
        with rec._cond:
            assert 99 <= rec._pending_records <= 100
        rec.stop(timeout=0.2)
    finally:
        hung.close()


def test_bad_arguments_are_programming_errors(recorder):
    with pytest.raises(ValueError):
        recorder.event(ingress("a"), "Error", "Sync", "x")
    with pytest.raises(ValueError):
        recorder.event({"kind": "Ingress", "metadata": {}}, "Normal", "Sync", "x")


def test_a_burst_of_refused_objects_gives_every_one_its_event(server, api):
    """#15: 2,265 refused Ingresses in a burst; before, a full queue dropped 1,333 Events."""
    rec = EventRecorder(api, "platform-ingress", clock=FakeClock(), max_pending=1000)
    try:
        for i in range(2265):
            rec.event(ingress(f"bad{i}"), "Warning", "InvalidAnnotation", f"bad{i} is refused")
        assert rec.flush(120)
        stats = rec.stats()
        assert stats.dropped_queue_full == 0 and stats.dropped_rate_limited == 0
        assert {e["involvedObject"]["name"] for e in recorded(server)} == {f"bad{i}" for i in range(2265)}
    finally:
        rec.stop(timeout=2)


def test_past_max_pending_an_object_keeps_its_newest_event(server, api):
    """Coalescing replaces what an object already has waiting, never another object's."""
    rec = EventRecorder(api, "platform-ingress", clock=FakeClock(), max_pending=2)
    with rec._cond:  # hold the sender back while the queue fills
        for i in range(3):
            rec.event(ingress("a"), "Warning", f"Reason{i}", "x")
        rec.event(ingress("b"), "Warning", "Other", "y")
        waiting = {k[4]: [r.reason for r in events._as_list(v)] for k, v in rec._pending.items()}
    try:
        assert waiting["b"] == ["Other"]
        assert waiting["a"][-1] == "Reason2"
        assert rec.stats().coalesced >= 1
        assert rec.flush(10)
        assert {(e["involvedObject"]["name"], e["reason"]) for e in recorded(server)} >= {("a", "Reason2"),
                                                                                          ("b", "Other")}
    finally:
        rec.stop(timeout=2)


# ---- the compact queue (object key tuple, clock floats, body built when sent) sends the same bodies

SERVER_FIELDS = {"uid", "resourceVersion", "creationTimestamp"}


def stamp(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def without_server_fields(event: dict) -> dict:
    meta = {k: v for k, v in event["metadata"].items() if k not in SERVER_FIELDS}
    return {**event, "metadata": meta}


def test_a_namespaced_object_gets_the_full_event_body_and_a_patch_with_count_and_last_time(server, api):
    clock = FakeClock()
    rec = EventRecorder(api, "platform-ingress", "node-1", clock=clock)
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": "web", "namespace": "default", "uid": "u-1", "resourceVersion": "7"}}
    try:
        first = clock.wall()
        rec.event(obj, "Warning", "BadTLS", "secret default/tls missing")
        assert rec.flush(10)
        [created] = recorded(server)
        name = created["metadata"]["name"]
        assert name.startswith("web.") and len(name) == len("web.") + 16
        assert without_server_fields(created) == {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Ingress", "namespace": "default", "name": "web", "uid": "u-1",
                               "apiVersion": "networking.k8s.io/v1", "resourceVersion": "7"},
            "reason": "BadTLS", "message": "secret default/tls missing", "type": "Warning",
            "source": {"component": "platform-ingress", "host": "node-1"},
            "firstTimestamp": stamp(first), "lastTimestamp": stamp(first), "count": 1,
            "reportingComponent": "platform-ingress", "reportingInstance": "node-1",
        }
        # A repeat on a newer version of the object: the same Event, patched;
        # involvedObject keeps the version it was first recorded for.
        clock.advance(61)
        newer = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "8"}}
        rec.event(newer, "Warning", "BadTLS", "secret default/tls missing")
        assert rec.flush(10)
        [patched] = recorded(server)
        assert patched["metadata"]["name"] == name
        assert patched["count"] == 2
        assert patched["firstTimestamp"] == stamp(first)
        assert patched["lastTimestamp"] == stamp(first + 61) != stamp(first)
        assert patched["involvedObject"]["resourceVersion"] == "7"
    finally:
        rec.stop(timeout=2)


def test_a_cluster_scoped_object_without_uid_or_version_gets_its_event_in_default(server, api):
    clock = FakeClock()
    rec = EventRecorder(api, "platform-ingress", clock=clock)
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "platform"}}
    try:
        rec.event(obj, "Normal", "Sync", "Scheduled for sync")
        assert rec.flush(10)
        [event] = recorded(server)
        assert event["metadata"]["namespace"] == "default"
        assert event["involvedObject"] == {"kind": "IngressClass", "namespace": "", "name": "platform", "uid": "",
                                           "apiVersion": "networking.k8s.io/v1"}
        assert event["source"] == {"component": "platform-ingress"}
        assert event["reportingInstance"] == ""
    finally:
        rec.stop(timeout=2)


def test_queued_records_hold_no_copy_of_the_object(api):
    """What waits is the key tuple and the version string of the object (shared), not a dict per record."""
    rec = EventRecorder(api, "platform-ingress", clock=FakeClock())
    obj = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "s", "namespace": "default", "uid": "u-s", "resourceVersion": "9"}}
    with rec._cond:  # the sender cannot take it meanwhile
        rec.event(obj, "Normal", "Sync", "synced")
        [(key, record)] = rec._pending.items()
        assert record.obj is key
        assert record.resource_version is obj["metadata"]["resourceVersion"]
        assert not hasattr(record, "__dict__")
    rec.stop(timeout=0.5)


def test_objects_take_turns_and_each_keeps_its_records_in_order(api):
    """One record waits bare, more in a list; the sender takes one per object in turn."""
    rec = EventRecorder(api, "platform-ingress", clock=FakeClock())
    with rec._cond:  # the sender cannot take anything meanwhile
        for reason in ("A1", "A2", "A3"):
            rec.event(ingress("a"), "Warning", reason, "x")
        rec.event(ingress("b"), "Warning", "B1", "y")
        rec.event(ingress("a"), "Warning", "A2", "x")  # a repeat waiting already: counted, not queued again
        assert rec._pending_records == 4
        order = [rec._next_pending() for _ in range(4)]
        assert [(r.reason, r.count) for r in order] == [("A1", 1), ("B1", 1), ("A2", 2), ("A3", 1)]
        assert not rec._pending and rec._pending_records == 0
    rec.stop(timeout=0.5)
