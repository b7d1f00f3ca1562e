"""Event recorder: the compact queue (object key tuple, clock floats, body built when sent) sends
exactly the Event bodies the recorder always sent. Fake API server, real ``kubernetes`` client."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from platformd.common import kubeclient
from platformd.common.clock import FakeClock
from platformd.common.events import EventRecorder
from tests.fakeapi import FakeApiServer

SERVER_FIELDS = {"uid", "resourceVersion", "creationTimestamp"}


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


def stamp(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def events_of(server):
    return [e for e in server.list_objects("events") if e.get("apiVersion", "v1") == "v1"]


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
        [created] = events_of(server)
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
        [patched] = events_of(server)
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
        [event] = events_of(server)
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
        [(key, [record])] = rec._pending.items()
        assert record.obj is key
        assert record.resource_version is obj["metadata"]["resourceVersion"]
        assert not hasattr(record, "__dict__")
    rec.stop(timeout=0.5)
