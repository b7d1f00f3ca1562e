import contextlib
import threading
import time

from platformd.common import errors
from platformd.common.clock import FakeClock
from platformd.common.informer import (
    LAST_APPLIED_ANNOTATION,
    DeletedFinalStateUnknown,
    FuncHandler,
    Informer,
    InformerFactory,
    drop_field_management,
)
from platformd.common.reflector import ReflectorOptions
from platformd.common.resources import CONFIGMAPS, ENDPOINT_SLICES, NODES
from platformd.common.store import index_endpointslice_by_service

from tests.common.memsource import MemorySource
from tests.helpers.waiting import wait_for

FAST = ReflectorOptions(backoff_initial=0.01, backoff_cap=0.05, short_watch=0.0)


def configmap(name, value="v", namespace="default"):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": {"k": value}}


class Recorder:
    """Records calls, and a view built only from them."""

    def __init__(self):
        self.calls = []
        self.view = {}
        self.lock = threading.Lock()

    @staticmethod
    def key(obj):
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    def on_add(self, obj):
        with self.lock:
            self.calls.append(("add", self.key(obj)))
            self.view[self.key(obj)] = obj

    def on_update(self, old, new):
        with self.lock:
            self.calls.append(("update", self.key(new)))
            assert self.key(old) == self.key(new)
            self.view[self.key(new)] = new

    def on_delete(self, obj):
        with self.lock:
            if isinstance(obj, DeletedFinalStateUnknown):
                self.calls.append(("tombstone", obj.key))
                self.view.pop(obj.key)
            else:
                self.calls.append(("delete", self.key(obj)))
                self.view.pop(self.key(obj))

    def rvs(self):
        with self.lock:
            return {k: o["metadata"]["resourceVersion"] for k, o in self.view.items()}


def source_rvs(source, resource=CONFIGMAPS):
    return {k: o["metadata"]["resourceVersion"] for k, o in source.state(resource).items()}


@contextlib.contextmanager
def synced(source, *handlers, **options):
    """A started Informer on ConfigMaps of ``source`` with ``handlers`` and a
    Recorder (last), synced; yields (informer, recorder) and stops it after."""
    informer = Informer(source, CONFIGMAPS, options=FAST, **options)
    for handler in handlers:
        informer.add_handler(handler)
    rec = Recorder()
    informer.add_handler(rec)
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        yield informer, rec
    finally:
        informer.stop()


def test_handlers_see_adds_updates_deletes_in_order():
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    with synced(source) as (informer, rec):
        assert informer.has_synced()
        assert rec.calls == [("add", "default/a")]
        source.update(CONFIGMAPS, configmap("a", "2"))
        source.create(CONFIGMAPS, configmap("b"))
        source.delete(CONFIGMAPS, "default/a")
        assert wait_for(lambda: len(rec.calls) == 4)
        assert rec.calls[1:] == [("update", "default/a"), ("add", "default/b"), ("delete", "default/a")]
        assert rec.rvs() == source_rvs(source)


def test_deletes_found_on_relist_are_tombstones():
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    source.create(CONFIGMAPS, configmap("b"))
    with synced(source) as (informer, rec):
        assert wait_for(lambda: source.count("watch") == 1)
        source.fail_next(errors.ServerError(500, "down"))
        source.drop_watches()
        last_b = source.state(CONFIGMAPS)["default/b"]
        source.delete(CONFIGMAPS, "default/b")
        source.update(CONFIGMAPS, configmap("a", "changed"))
        source.compact()
        assert wait_for(lambda: rec.rvs() == source_rvs(source))
        tombstones = [c for c in rec.calls if c[0] == "tombstone"]
        assert tombstones == [("tombstone", "default/b")]
        assert ("update", "default/a") in rec.calls
        assert informer.store.get("default/b") is None
        assert last_b["metadata"]["name"] == "b"


def test_unchanged_objects_are_not_redelivered_on_relist():
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    with synced(source) as (informer, rec):
        first = informer.store.get("default/a")
        assert wait_for(lambda: source.count("watch") == 1)
        source.compact()
        source.fail_next(errors.ResourceExpired(410, "gone", "Expired"))
        source.drop_watches()
        assert wait_for(lambda: informer.reflector.list_count == 2)
        assert rec.calls == [("add", "default/a")]
        # The store keeps the object handlers were given, not the relisted copy.
        assert informer.store.get("default/a") is first


def test_handler_exceptions_are_logged_and_do_not_stop_the_informer(caplog):
    source = MemorySource()
    seen = []

    def explode(obj):
        seen.append(obj["metadata"]["name"])
        raise RuntimeError("handler bug")

    with synced(source, FuncHandler(add=explode)) as (informer, rec):
        source.create(CONFIGMAPS, configmap("a"))
        source.create(CONFIGMAPS, configmap("b"))
        assert wait_for(lambda: rec.rvs() == source_rvs(source))
        assert seen == ["a", "b"]
        assert "handler bug" in caplog.text
        assert informer.reflector.list_count == 1  # a handler bug does not force relists


def test_handler_added_late_gets_existing_objects_first():
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    informer = Informer(source, CONFIGMAPS, options=FAST)
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        rec = Recorder()
        informer.add_handler(rec)
        assert rec.calls == [("add", "default/a")]
        source.create(CONFIGMAPS, configmap("b"))
        assert wait_for(lambda: rec.rvs() == source_rvs(source))
    finally:
        informer.stop()


def test_resync_redelivers_every_object_as_an_update():
    clock = FakeClock()
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    source.create(CONFIGMAPS, configmap("b"))
    informer = Informer(source, CONFIGMAPS, resync_period=60, clock=clock, options=FAST)
    updates = []
    informer.add_handler(FuncHandler(update=lambda old, new: updates.append((old is new, new["metadata"]["name"]))))
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        assert clock.block_until_waiters(1)
        clock.advance(59)
        time.sleep(0.05)
        assert updates == []
        clock.advance(1)
        assert wait_for(lambda: len(updates) == 2)
        assert sorted(updates) == [(True, "a"), (True, "b")]
    finally:
        informer.stop()


def test_factory_shares_one_informer_per_resource_and_merges_indexers():
    source = MemorySource()
    source.create(ENDPOINT_SLICES, {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                                    "metadata": {"name": "web-1", "namespace": "default",
                                                 "labels": {"kubernetes.io/service-name": "web"}}})
    source.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    factory = InformerFactory(source, namespace="default", options=FAST)
    slices = factory.informer(ENDPOINT_SLICES)
    assert factory.informer(ENDPOINT_SLICES, {"service": index_endpointslice_by_service}) is slices
    nodes = factory.informer(NODES)
    assert nodes.namespace is None  # cluster-scoped: listed cluster-wide
    factory.start()
    try:
        assert factory.wait_for_sync(5)
        assert [o["metadata"]["name"] for o in slices.store.by_index("service", "default/web")] == ["web-1"]
        assert nodes.store.get("n1") is not None
        # requested after start: started at once
        configmaps = factory.informer(CONFIGMAPS)
        assert configmaps.wait_for_sync(5)
        health = factory.health()
        assert set(health) == {ENDPOINT_SLICES, NODES, CONFIGMAPS}
        assert all(h.synced and h.last_success is not None for h in health.values())
    finally:
        factory.stop()


def test_wait_for_sync_times_out_while_the_source_fails():
    source = MemorySource()
    source.fail_next(*[errors.ApiUnreachable("refused")] * 1000)
    factory = InformerFactory(source)
    factory.informer(CONFIGMAPS)
    factory.start()
    try:
        started = time.monotonic()
        assert factory.wait_for_sync(0.3) is False
        assert time.monotonic() - started < 2
        assert not factory.has_synced()
        assert factory.health()[CONFIGMAPS].last_success is None
    finally:
        factory.stop()


# ---------------------------------------------------------------- transform


def applied(name, value="v"):
    obj = configmap(name, value)
    obj["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}]
    obj["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: '{"big": "json"}', "team": "a"}
    return obj


def test_drop_field_management_copies_only_what_it_changes():
    obj = applied("a")
    out = drop_field_management(obj)
    assert out["metadata"] == {"name": "a", "namespace": "default", "annotations": {"team": "a"}}
    assert out["data"] is obj["data"]  # the rest is shared, not copied
    assert "managedFields" in obj["metadata"] and LAST_APPLIED_ANNOTATION in obj["metadata"]["annotations"]
    assert drop_field_management(out) is out  # idempotent: nothing left to drop
    plain = configmap("b")
    assert drop_field_management(plain) is plain
    only_fields = {**plain, "metadata": {**plain["metadata"], "managedFields": []}}
    assert drop_field_management(only_fields)["metadata"] == plain["metadata"]


def test_a_transform_applies_to_the_store_handlers_and_tombstones():
    source = MemorySource()
    source.create(CONFIGMAPS, applied("a"))
    source.create(CONFIGMAPS, applied("b"))
    factory = InformerFactory(source, options=FAST, transform=drop_field_management)
    informer = factory.informer(CONFIGMAPS)
    rec = Recorder()
    informer.add_handler(rec)
    factory.start()
    try:
        assert factory.wait_for_sync(5)
        source.update(CONFIGMAPS, applied("a", "2"))
        assert wait_for(lambda: rec.calls[-1:] == [("update", "default/a")])
        assert wait_for(lambda: source.count("watch") >= 1)
        source.fail_next(errors.ServerError(500, "down"))
        source.drop_watches()
        source.delete(CONFIGMAPS, "default/b")
        source.compact()
        assert wait_for(lambda: ("tombstone", "default/b") in rec.calls)
        seen = [*rec.view.values(), *informer.store.list()]
        assert seen and all("managedFields" not in o["metadata"] for o in seen)
        assert all(o["metadata"]["annotations"] == {"team": "a"} for o in seen)
        assert informer.store.get("default/a")["data"] == {"k": "2"}
        # The source's own objects are left as they were.
        assert "managedFields" in source.state(CONFIGMAPS)["default/a"]["metadata"]
    finally:
        factory.stop()


def test_without_a_transform_objects_are_stored_whole():
    source = MemorySource()
    source.create(CONFIGMAPS, applied("a"))
    factory = InformerFactory(source, options=FAST)
    informer = factory.informer(CONFIGMAPS)
    factory.start()
    try:
        assert factory.wait_for_sync(5)
        assert informer.store.get("default/a") == source.state(CONFIGMAPS)["default/a"]
        assert "managedFields" in informer.store.get("default/a")["metadata"]
    finally:
        factory.stop()
