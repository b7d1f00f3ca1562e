import threading

import pytest

from platformd.common.store import (
    Store,
    index_endpointslice_by_service,
    index_ingress_by_secret,
    index_ingress_by_service,
    key_of,
    split_key,
)


def slice_(name, service, namespace="default", rv="1"):
    labels = {"kubernetes.io/service-name": service} if service else {}
    return {"kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "resourceVersion": rv}}


def ingress(name, services=(), secrets=(), default=None, namespace="default"):
    paths = [{"path": "/", "backend": {"service": {"name": s, "port": {"number": 80}}}} for s in services]
    spec = {"rules": [{"host": "a.example", "http": {"paths": paths}}],
            "tls": [{"hosts": ["a.example"], "secretName": s} for s in secrets]}
    if default:
        spec["defaultBackend"] = {"service": {"name": default, "port": {"number": 80}}}
    return {"kind": "Ingress", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_keys():
    assert key_of({"metadata": {"name": "a", "namespace": "ns"}}) == "ns/a"
    assert key_of({"metadata": {"name": "node1"}}) == "node1"
    assert split_key("ns/a") == ("ns", "a")
    assert split_key("node1") == (None, "node1")


def test_add_get_update_delete_return_previous():
    store = Store()
    first = slice_("a", "svc", rv="1")
    assert store.add(first) is None
    assert store.get("default/a") is first
    second = slice_("a", "svc", rv="2")
    assert store.update(second) is first
    assert store.get("default/a") is second
    assert len(store) == 1
    assert store.delete(second) is second
    assert store.get("default/a") is None
    assert store.delete(second) is None
    assert store.list() == []


def test_endpointslice_index_follows_label_changes():
    store = Store({"service": index_endpointslice_by_service})
    store.add(slice_("a-1", "a"))
    store.add(slice_("a-2", "a"))
    store.add(slice_("b-1", "b", namespace="other"))
    store.add(slice_("orphan", None))
    assert [key_of(o) for o in store.by_index("service", "default/a")] == ["default/a-1", "default/a-2"]
    assert store.index_keys("service", "other/b") == ["other/b-1"]
    # relabelled: leaves the old value, joins the new one
    store.update(slice_("a-2", "b"))
    assert store.index_keys("service", "default/a") == ["default/a-1"]
    assert store.index_keys("service", "default/b") == ["default/a-2"]
    store.delete(slice_("a-1", "a"))
    assert store.by_index("service", "default/a") == []
    # no stale empty values are kept
    assert "default/a" not in store._indices["service"]


def test_ingress_indexes():
    store = Store({"service": index_ingress_by_service, "secret": index_ingress_by_secret})
    store.add(ingress("web", services=["web", "api"], secrets=["tls-web"], default="fallback"))
    store.add(ingress("other", services=["api"], namespace="team"))
    assert store.index_keys("service", "default/api") == ["default/web"]
    assert store.index_keys("service", "default/fallback") == ["default/web"]
    assert store.index_keys("service", "team/api") == ["team/other"]
    assert store.index_keys("secret", "default/tls-web") == ["default/web"]
    assert store.by_index("secret", "team/tls-web") == []


def test_index_functions_tolerate_sparse_objects():
    sparse = {"metadata": {"name": "x", "namespace": "n"}}
    assert index_ingress_by_service(sparse) == []
    assert index_ingress_by_secret(sparse) == []
    assert index_endpointslice_by_service(sparse) == []
    assert index_ingress_by_service({"metadata": {"name": "x"},
                                     "spec": {"rules": [{"host": "h"}, None]}}) == []


def test_unknown_index_is_an_error():
    with pytest.raises(KeyError):
        Store().by_index("nope", "x")


def test_replace_returns_previous_and_rebuilds_indexes():
    store = Store({"service": index_endpointslice_by_service})
    store.add(slice_("a-1", "a"))
    store.add(slice_("gone", "a"))
    old = store.replace([slice_("a-1", "b"), slice_("new", "a")])
    assert set(old) == {"default/a-1", "default/gone"}
    assert sorted(store.keys()) == ["default/a-1", "default/new"]
    assert store.index_keys("service", "default/a") == ["default/new"]
    assert store.index_keys("service", "default/b") == ["default/a-1"]


def test_add_indexers_indexes_existing_objects():
    store = Store()
    store.add(slice_("a-1", "a"))
    store.add_indexers({"service": index_endpointslice_by_service})
    assert store.index_keys("service", "default/a") == ["default/a-1"]
    store.add_indexers({"service": index_endpointslice_by_service})  # same function: no-op
    with pytest.raises(ValueError):
        store.add_indexers({"service": lambda obj: []})


def test_broken_index_function_does_not_lose_the_object(caplog):
    def broken(obj):
        raise RuntimeError("bug")

    store = Store({"broken": broken})
    store.add(slice_("a", "a"))
    assert store.get("default/a") is not None
    assert store.by_index("broken", "anything") == []
    assert "index function 'broken' failed" in caplog.text


def test_concurrent_writers_and_readers_keep_indexes_consistent():
    store = Store({"service": index_endpointslice_by_service})
    errors = []

    def writer(n):
        for i in range(300):
            store.update(slice_(f"s{i % 20}", f"svc{(i + n) % 3}", rv=str(i)))
            if i % 7 == 0:
                store.delete_key(f"default/s{(i + n) % 20}")

    def reader():
        for _ in range(300):
            for svc in ("svc0", "svc1", "svc2"):
                for obj in store.by_index("service", f"default/{svc}"):
                    if obj is None:
                        errors.append("missing object behind an index entry")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)] + \
              [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # The invariant: the index holds exactly what the index function says.
    expected = {}
    for key, obj in store.items():
        for value in index_endpointslice_by_service(obj):
            expected.setdefault(value, set()).add(key)
    assert store._indices["service"] == expected


def test_an_index_value_goes_from_one_key_to_many_and_back():
    store = Store({"svc": index_endpointslice_by_service})
    store.add(slice_("a-1", "a"))
    assert store.index_keys("svc", "default/a") == ["default/a-1"]
    store.add(slice_("a-1", "a", rv="2"))  # the same key again: still one
    assert store.index_keys("svc", "default/a") == ["default/a-1"]
    store.add(slice_("a-2", "a"))
    store.add(slice_("a-3", "a"))
    assert [o["metadata"]["name"] for o in store.by_index("svc", "default/a")] == ["a-1", "a-2", "a-3"]
    store.delete(slice_("a-2", "a"))
    store.delete(slice_("a-1", "a"))
    assert store.index_keys("svc", "default/a") == ["default/a-3"]
    store.add(slice_("a-3", "b"))  # moves to another Service
    assert store.index_keys("svc", "default/a") == [] and store.by_index("svc", "default/a") == []
    assert store.index_keys("svc", "default/b") == ["default/a-3"]
    store.replace([slice_("x", "b"), slice_("y", "b"), slice_("z", "c")])
    assert store.index_keys("svc", "default/b") == ["default/x", "default/y"]
    assert store.index_keys("svc", "default/c") == ["default/z"]


def test_an_index_of_one_object_per_value_costs_little():
    """Most index values name one object (a Service's slice): no set each."""
    import gc
    import tracemalloc

    slices = [slice_(f"s{i}-1", f"s{i}") for i in range(2000)]
    cost = {}
    for name, indexers in (("plain", None), ("indexed", {"svc": index_endpointslice_by_service})):
        gc.collect()
        tracemalloc.start()
        try:
            store = Store(indexers)
            store.replace(slices)
            gc.collect()
            cost[name] = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        del store
    per_object = (cost["indexed"] - cost["plain"]) / len(slices)
    # The value string and a dict entry; a set per value would add 216 bytes.
    assert per_object < 150, per_object


def test_key_of_is_the_one_key_and_refuses_a_nameless_object():
    from platformd.common.store import key_of as the_key
    from platformd.ingress.snapshot import key_of as snapshot_key

    assert snapshot_key is the_key
    assert the_key({"metadata": {"namespace": "ns", "name": "a"}}) == "ns/a"
    assert the_key({"metadata": {"name": "cluster-wide"}}) == "cluster-wide"
    for nameless in ({}, {"metadata": None}, {"metadata": {"namespace": "ns"}}, {"metadata": {"name": ""}}):
        with pytest.raises(ValueError, match="without metadata.name"):
            the_key(nameless)
