"""Event recorder against the fake API server, with the real ``kubernetes`` client."""

from __future__ import annotations

import socket
import time

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
        dropped = rec.stats().dropped_queue_full
        # The sender holds at most one record; five more wait; the rest drop.
        assert 100 - 5 - 1 <= dropped <= 100 - 5
        rec.stop(timeout=0.2)
    finally:
        hung.close()


def test_bad_arguments_are_programming_errors(recorder):
    with pytest.raises(ValueError):
        recorder.event(ingress("a"), "Error", "Sync", "x")
    with pytest.raises(ValueError):
        recorder.event({"kind": "Ingress", "metadata": {}}, "Normal", "Sync", "x")
