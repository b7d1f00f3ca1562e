"""Property: whatever happens to the API server, an informer's handlers end
up with the server's state.

Random sequences of creates, updates and deletes are interleaved with faults
(dropped watches, clean and abrupt; compaction, so resourceVersions expire;
500/503/429 answers; full restarts). The view under test is built **only**
from ``on_add``/``on_update``/``on_delete`` calls, and the handler sequence
must be coherent on its own: no add for a key the view has, no update or
delete for a key it lacks, and ``old`` in ``on_update`` is what the view held.
"""

import tempfile
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platformd.common import kubeclient
from platformd.common.apisource import ApiSource
from platformd.common.informer import DeletedFinalStateUnknown, Informer
from platformd.common.reflector import ReflectorOptions
from platformd.common.resources import CONFIGMAPS

from tests.fakeapi import FakeApiServer
from tests.helpers.waiting import wait_for

NAMES = [f"cm{i}" for i in range(6)]

# Short backoff so faults cost milliseconds; the real numbers are tested in test_reflector.
OPTIONS = ReflectorOptions(backoff_initial=0.02, backoff_cap=0.1, short_watch=0.0)


class HandlerView:
    def __init__(self):
        self.lock = threading.Lock()
        self.view: dict[str, dict] = {}
        self.violations: list[str] = []

    @staticmethod
    def key(obj):
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    def on_add(self, obj):
        with self.lock:
            if self.key(obj) in self.view:
                self.violations.append(f"add for known {self.key(obj)}")
            self.view[self.key(obj)] = obj

    def on_update(self, old, new):
        with self.lock:
            if self.view.get(self.key(new)) is not old:
                self.violations.append(f"update of {self.key(new)} with an old we did not hold")
            self.view[self.key(new)] = new

    def on_delete(self, obj):
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else self.key(obj)
        with self.lock:
            if key not in self.view:
                self.violations.append(f"delete for unknown {key}")
            self.view.pop(key, None)

    def rvs(self):
        with self.lock:
            return {k: o["metadata"]["resourceVersion"] for k, o in self.view.items()}


def server_rvs(server):
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
            for o in server.list_objects("configmaps")}


writes = st.tuples(st.sampled_from(["put", "delete"]), st.sampled_from(NAMES))
faults = st.one_of(
    st.tuples(st.just("drop"), st.booleans()),
    st.tuples(st.just("compact")),
    st.tuples(st.just("fail"), st.integers(1, 3), st.sampled_from([500, 503, 429])),
    st.tuples(st.just("restart")),
    st.tuples(st.just("pause")),
)
operations = st.lists(st.one_of(writes, writes, faults), min_size=1, max_size=25)


def apply(server, op, counter):
    kind = op[0]
    if kind == "put":
        name = op[1]
        existing = server.get("configmaps", "default", name)
        counter[0] += 1
        if existing is None:
            server.create({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": "default"}, "data": {"n": str(counter[0])}})
        else:
            server.update({**existing, "data": {"n": str(counter[0])}})
    elif kind == "delete":
        if server.get("configmaps", "default", op[1]) is not None:
            server.delete("configmaps", "default", op[1])
    elif kind == "drop":
        server.faults.drop_watches(abrupt=op[1])
    elif kind == "compact":
        server.faults.compact()
    elif kind == "fail":
        server.faults.fail_next(op[1], op[2])
    elif kind == "restart":
        server.restart()
    elif kind == "pause":
        time.sleep(0.02)  # let the informer catch up part of the way


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=st.lists(st.sampled_from(NAMES), unique=True), ops=operations)
def test_handler_view_converges_to_server_state(initial, ops):
    server = FakeApiServer(history_limit=50).start()
    informer = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            client = kubeclient.load(server.write_kubeconfig(Path(tmp) / "kubeconfig"))
        for name in initial:
            server.create({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": "default"}})
        informer = Informer(ApiSource(client), CONFIGMAPS, namespace="default", options=OPTIONS)
        handlers = HandlerView()
        informer.add_handler(handlers)
        informer.start()
        assert informer.wait_for_sync(10)
        counter = [0]
        for op in ops:
            apply(server, op, counter)
        server.faults.clear()  # failures still pending would only slow convergence
        wait_for(lambda: handlers.rvs() == server_rvs(server), timeout=15, message="handlers converged")
        assert {k: o["metadata"]["resourceVersion"] for k, o in informer.store.items()} == server_rvs(server)
        assert handlers.violations == []
    finally:
        if informer is not None:
            informer.stop()
        server.stop()
